"""`sbx bench ds1000 --hints`: how many failures get a removed-API hint, and whether it is right.

For each failing program, the error it raised is matched against the image recipe's
table (`sbx.images.removed_apis`), exactly as the observation does. A hint is *right*
when applying it makes the program run: the entry's `rewrite` is applied to the
reference solution and the harness, the program runs again in a fresh sandbox, and if
it now fails on another removed API, that one's rewrite is applied too (a model would
read the next hint), up to `MAX_ROUNDS`. An entry without a `rewrite` is hinted but
cannot be applied mechanically: it counts as hinted, not as measured.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from sbx.images.removed_apis import RemovedApi, RemovedApiTable, default_table
from sbx.sandbox.bench.ds1000 import Ds1000Report, Outcome, Problem, build_program
from sbx.sandbox.errors import InvalidInput, SandboxBroken
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.spec import SessionSpec

MAX_ROUNDS = 4
"""Hints applied one after another to one program, at most."""


@dataclass(frozen=True, kw_only=True)
class HintOutcome:
    """One failing program: the hint it got and what applying the hints did."""

    problem_id: int
    """Which problem."""
    hint: str
    """The matched entry's name; empty: no hint."""
    applied: tuple[str, ...] = ()
    """The rewrites applied, in order (empty: none could be)."""
    runs: bool | None = None
    """True: the program passed with them; False: it still failed; None: not measured."""
    detail: str = ""
    """The last failure after the rewrites, when it still failed."""


@dataclass(frozen=True, kw_only=True)
class HintReport:
    """The figures the README quotes."""

    failures: int
    """Failing programs examined."""
    outcomes: tuple[HintOutcome, ...]
    """One per failure, in problem order."""

    def as_json(self) -> dict[str, Any]:
        """The figures and each problem's outcome."""
        hinted = [o for o in self.outcomes if o.hint]
        return {
            "failures": self.failures,
            "hinted": len(hinted),
            "applicable": sum(bool(o.applied) for o in hinted),
            "run_when_applied": sum(o.runs is True for o in hinted),
            "problems": [asdict(o) for o in self.outcomes],
        }

    def render(self) -> str:
        """Short text: the figures, then each hinted failure."""
        data = self.as_json()
        lines = [f"removed-API hints: {data['hinted']} of {self.failures} failures get one; "
                 f"{data['applicable']} can be applied mechanically, and "
                 f"{data['run_when_applied']} of those run when they are"]
        for o in self.outcomes:
            verdict = {True: "runs", False: "still fails", None: "not measured"}[o.runs]
            lines.append(f"  {o.problem_id}: {o.hint or '(no hint)'}: {verdict} {o.detail}"
                         .rstrip())
        return "\n".join(lines)


def measure_hints(
    report: Ds1000Report, problems: list[Problem], *, image: str, jobs: int = 1,
    table: RemovedApiTable | None = None, pool: Pool | None = None,
) -> HintReport:
    """Match every failure of `report` to a hint, and re-run the rewritable ones."""
    table = table or default_table()
    by_id = {problem.problem_id: problem for problem in problems}
    failing = [o for o in report.failing() if o.problem_id in by_id]
    key = PoolKey(image=image, limits=Limits())
    owned = pool is None
    pool = pool or Pool.start(config=PoolConfig(size=jobs))
    try:
        with TemporaryDirectory(prefix="sbx-ds1000-hints-") as scratch, \
                ThreadPoolExecutor(jobs, thread_name_prefix="sbx-ds1000-hints") as executor:
            def one(outcome: Outcome) -> HintOutcome:
                where = Path(scratch) / str(outcome.problem_id)
                return _measure(pool, key, by_id[outcome.problem_id], outcome, table, where)

            results = tuple(executor.map(one, failing))
    finally:
        if owned:
            pool.close()
    return HintReport(failures=len(failing), outcomes=results)


def _measure(pool: Pool, key: PoolKey, problem: Problem, outcome: Outcome,
             table: RemovedApiTable, where: Path) -> HintOutcome:
    entry = table.find(outcome.cause, outcome.detail)
    if entry is None:
        return HintOutcome(problem_id=problem.problem_id, hint="")
    applied: list[str] = []
    current, found, detail = problem, entry, ""
    for _ in range(MAX_ROUNDS):
        rewritten = _apply(current, found)
        if rewritten is None:
            break
        applied.append(found.name)
        current = rewritten
        result = _run(pool, key, current, where / str(len(applied)))
        if result is not None and result.ok and result.error is None:
            return HintOutcome(problem_id=problem.problem_id, hint=entry.name,
                               applied=tuple(applied), runs=True)
        error = result.error if result is not None else None
        following = table.find(error.type, error.message) if error is not None else None
        detail = f"{error.type}: {error.message}"[:160] if error is not None else "no result"
        if following is None:
            return HintOutcome(problem_id=problem.problem_id, hint=entry.name,
                               applied=tuple(applied), runs=False, detail=detail)
        found = following
    runs = False if applied else None
    return HintOutcome(problem_id=problem.problem_id, hint=entry.name, applied=tuple(applied),
                       runs=runs, detail=detail)


def _apply(problem: Problem, entry: RemovedApi) -> Problem | None:
    """The problem with the entry's rewrite applied, or None (no rewrite, or nothing changed)."""
    solution, context = problem.reference_code, problem.code_context
    for pattern, replacement in entry.rewrite:
        solution = pattern.sub(replacement, solution)
        context = pattern.sub(replacement, context)
    if (solution, context) == (problem.reference_code, problem.code_context):
        return None
    return replace(problem, reference_code=solution, code_context=context)


def _run(pool: Pool, key: PoolKey, problem: Problem, output_dir: Path) -> ExecutionResult | None:
    try:
        return pool.run_fresh(build_program(problem),
                              SessionSpec(limits=key.limits, image=key.image,
                                          output_dir=output_dir))
    except (SandboxBroken, InvalidInput):
        return None
