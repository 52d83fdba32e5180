"""`sbx bench ds1000`: how much DS-1000-style code the image's data stack still runs.

DS-1000 (Lai et al. 2022) pairs each problem with a reference solution and a
test harness (`code_context`) that defines `test_execution(solution)`, and for
some problems `test_string(solution)`. The benchmark's own evaluator runs one
program per problem: the harness, then `code = <repr of the solution>`, then
the calls. We build the same program around the *reference* solution, so a
failure is not a model's mistake: it is an API the installed pandas, NumPy or
SciPy removed or changed since the code was written. Models write those older
idioms, so the pass count measures how much model-style code an image runs,
and comparing images measures candidate stacks.

Each program runs the way `sbx exec` runs one: a fresh hardened container with
default `Limits`, handed over by the pool (`Pool.run_fresh`), discarded after.
Nothing is fetched: the JSONL file is read from the path given, and the data
stays outside the repository.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from sbx.sandbox.errors import InvalidInput, SandboxBroken
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.spec import SessionSpec

MAX_RECORD_BYTES = 1 << 20
"""Longest JSONL line accepted; DS-1000's longest record is about 20 KB."""
MAX_LIBRARY_CHARS = 32
"""A library name is a short word (`Pandas`, `Numpy`, `Scipy`)."""
DETAIL_CHARS = 160
"""Characters kept of a failure's message: enough to name the API, never a flood."""

TIMEOUT = "timeout"
"""Cause of a program killed at `Limits.timeout`."""
MEMORY = "memory limit"
"""Cause of a program killed at `Limits.memory`."""
SANDBOX = "sandbox broke"
"""Cause when the sandbox itself failed (runner lost, protocol error): sbx's fault."""

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One DS-1000 record, reduced to what the program needs."""

    problem_id: int
    """`metadata.problem_id`, 0..999 in the full benchmark."""
    library: str
    """`metadata.library`, e.g. `Pandas`."""
    code_context: str
    """The test harness: defines `test_execution` (and perhaps `test_string`)."""
    reference_code: str
    """The reference solution the harness must accept."""


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one program did."""

    problem_id: int
    """Which problem."""
    library: str
    """Its library."""
    cause: str
    """Empty when it passed; else the exception type, `timeout`, `memory limit`, ..."""
    detail: str = ""
    """First line of the failure's message, bounded and with control characters escaped."""
    seconds: float = 0.0
    """Wall time of the execution, as the host measured it."""

    @property
    def passed(self) -> bool:
        """The harness accepted the reference solution."""
        return not self.cause


@dataclass(kw_only=True)
class Ds1000Report:
    """Every outcome of one run against one image, and the figures derived from them."""

    image: str
    """The image the programs ran in."""
    outcomes: list[Outcome] = field(default_factory=list)
    """One per problem, in problem-id order."""

    @property
    def passed(self) -> int:
        """Programs that passed."""
        return sum(outcome.passed for outcome in self.outcomes)

    def failing(self) -> list[Outcome]:
        """The failures, in problem-id order."""
        return [outcome for outcome in self.outcomes if not outcome.passed]

    def causes(self) -> Counter[str]:
        """Failures counted by cause."""
        return Counter(outcome.cause for outcome in self.failing())

    def by_library(self) -> dict[str, dict[str, Any]]:
        """Per library: passed, total, and failures by cause."""
        table: dict[str, dict[str, Any]] = {}
        for outcome in self.outcomes:
            row = table.setdefault(outcome.library, {"passed": 0, "total": 0, "causes": Counter()})
            row["total"] += 1
            if outcome.passed:
                row["passed"] += 1
            else:
                row["causes"][outcome.cause] += 1
        return {name: {**row, "causes": dict(row["causes"])} for name, row in sorted(table.items())}

    def as_json(self) -> dict[str, Any]:
        """The report as plain data (`--json`)."""
        return {
            "image": self.image,
            "passed": self.passed,
            "total": len(self.outcomes),
            "libraries": self.by_library(),
            "causes": dict(self.causes().most_common()),
            "failing": [
                {"id": o.problem_id, "library": o.library, "cause": o.cause, "detail": o.detail}
                for o in self.failing()
            ],
        }


def load_problems(
    path: Path, *, limit: int | None = None, only: frozenset[int] = frozenset()
) -> list[Problem]:
    """The records of a DS-1000 JSONL file, sorted by id; a malformed one is InvalidInput.

    `only` keeps just those problem ids; `limit` keeps the first N after that.
    """
    problems: list[Problem] = []
    try:
        with path.open("rb") as handle:
            number = 0
            while line := handle.readline(MAX_RECORD_BYTES + 1):
                number += 1
                if len(line) > MAX_RECORD_BYTES:
                    raise InvalidInput(f"{path}:{number}: record over {MAX_RECORD_BYTES} bytes")
                if line.strip():
                    problems.append(parse_record(line, where=f"{path}:{number}"))
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}") from None
    seen = Counter(problem.problem_id for problem in problems)
    repeated = [pid for pid, count in seen.items() if count > 1]
    if repeated:
        raise InvalidInput(f"{path}: problem id {repeated[0]} appears more than once")
    problems.sort(key=lambda problem: problem.problem_id)
    if only:
        problems = [problem for problem in problems if problem.problem_id in only]
    return problems[:limit] if limit is not None else problems


def parse_record(line: bytes, *, where: str) -> Problem:
    """One JSONL line as a Problem; any missing or wrongly typed field is InvalidInput."""
    try:
        record = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{where}: not a JSON record ({type(exc).__name__})") from None
    metadata = record.get("metadata") if isinstance(record, dict) else None
    if not isinstance(metadata, dict):
        raise InvalidInput(f"{where}: expected an object with a `metadata` object")
    problem_id, library = metadata.get("problem_id"), metadata.get("library")
    context, reference = record.get("code_context"), record.get("reference_code")
    if not isinstance(problem_id, int) or isinstance(problem_id, bool) or problem_id < 0:
        raise InvalidInput(f"{where}: metadata.problem_id must be a non-negative integer")
    if (
        not isinstance(library, str)
        or not 0 < len(library) <= MAX_LIBRARY_CHARS
        or not library.isidentifier()
    ):
        raise InvalidInput(f"{where}: metadata.library must be a short name such as `Pandas`")
    if not isinstance(context, str) or "def test_execution(" not in context:
        raise InvalidInput(f"{where}: code_context must define test_execution(solution)")
    if not isinstance(reference, str):
        raise InvalidInput(f"{where}: reference_code must be a string")
    return Problem(
        problem_id=problem_id, library=library, code_context=context, reference_code=reference
    )


def build_program(problem: Problem, solution: str | None = None) -> str:
    """The program DS-1000's evaluator runs: harness, the solution as a literal, the checks.

    The solution goes in through `repr`, never pasted as code, because the
    harness itself splices it into its `exec_context` (and `test_string`
    inspects its tokens) exactly as the benchmark does.
    """
    code = problem.reference_code if solution is None else solution
    checks = "test_execution(code)\n"
    if "test_string(" in problem.code_context:
        checks += "test_string(code)\n"
    return f"{problem.code_context}\ncode = {code!r}\n{checks}"


def classify(result: ExecutionResult) -> tuple[str, str]:
    """(cause, detail) of a result: ("", "") when it passed.

    The harness reports a wrong answer as `AssertionError`; a removed API shows
    as the exception it raised (`AttributeError`, `TypeError`, ...).
    """
    if result.timed_out:
        return TIMEOUT, ""
    if result.oom_killed:
        return MEMORY, ""
    if result.error is not None:
        return printable(result.error.type, 64), printable(result.error.message)
    if result.exit_code != 0:
        lines = result.stderr.strip().splitlines()
        return f"exit {result.exit_code}", printable(lines[-1] if lines else "")
    return "", ""


def printable(text: str, limit: int = DETAIL_CHARS) -> str:
    """The first non-empty line of `text`, cut to `limit`, every control or bidi char escaped.

    The text comes from the executed program, so it may carry terminal escapes.
    """
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    line = line[:limit]
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in line
    )


def run_ds1000(
    problems: list[Problem],
    *,
    image: str,
    jobs: int = 1,
    pool: Pool | None = None,
    progress: Progress = lambda message: None,
) -> Ds1000Report:
    """Run every problem's program in its own fresh sandbox, `jobs` at a time.

    Warm containers are kept for `jobs` programs, so creating a container stays
    off the critical path as it does for `sbx exec` with a warm pool.
    """
    key = PoolKey(image=image, limits=Limits())
    owned = pool is None
    pool = pool or Pool.start(config=PoolConfig(size=jobs))
    try:
        pool.warm(key)
        with TemporaryDirectory(prefix="sbx-ds1000-") as scratch:
            outcomes = _run_all(
                pool, key, problems, scratch=Path(scratch), jobs=jobs, progress=progress
            )
    finally:
        if owned:
            pool.close()
    return Ds1000Report(image=image, outcomes=outcomes)


def _run_all(
    pool: Pool,
    key: PoolKey,
    problems: list[Problem],
    *,
    scratch: Path,
    jobs: int,
    progress: Progress,
) -> list[Outcome]:
    """The outcomes in problem order; on Ctrl-C nothing more starts and running ones finish."""
    outcomes: list[Outcome] = []
    executor = ThreadPoolExecutor(jobs, thread_name_prefix="sbx-ds1000")

    def one(problem: Problem) -> Outcome:
        return run_problem(pool, key, problem, scratch / str(problem.problem_id))

    try:
        for outcome in executor.map(one, problems):
            outcomes.append(outcome)
            _report_progress(progress, outcome, done=len(outcomes), total=len(problems))
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return outcomes


def run_problem(pool: Pool, key: PoolKey, problem: Problem, output_dir: Path) -> Outcome:
    """Run one problem's program as `sbx exec` would and classify what happened."""
    try:
        result = pool.run_fresh(
            build_program(problem),
            SessionSpec(limits=key.limits, image=key.image, output_dir=output_dir),
        )
    except (SandboxBroken, InvalidInput) as exc:
        return Outcome(
            problem_id=problem.problem_id,
            library=problem.library,
            cause=SANDBOX,
            detail=printable(f"{type(exc).__name__}: {exc}"),
        )
    cause, detail = classify(result)
    return Outcome(
        problem_id=problem.problem_id,
        library=problem.library,
        cause=cause,
        detail=detail,
        seconds=result.duration_s,
    )


def _report_progress(progress: Progress, outcome: Outcome, *, done: int, total: int) -> None:
    """A line per failure, and one every 50 programs."""
    if not outcome.passed:
        progress(f"{outcome.library} {outcome.problem_id}: {outcome.cause} {outcome.detail}")
    if done % 50 == 0 or done == total:
        progress(f"{done}/{total} programs run")


def render(report: Ds1000Report) -> str:
    """The report as a table: passed per library, failures by cause, the failing ids."""
    total = len(report.outcomes)
    lines = [f"DS-1000 reference solutions in {printable(report.image)}", ""]
    lines.append(f"{'library':<10} {'passed':>7} {'of':>5}   failures by cause")
    for name, row in report.by_library().items():
        causes = ", ".join(f"{cause} {n}" for cause, n in Counter(row["causes"]).most_common())
        lines.append(f"{name:<10} {row['passed']:>7} {row['total']:>5}   {causes}".rstrip())
    causes = ", ".join(f"{cause} {n}" for cause, n in report.causes().most_common())
    lines.append(f"{'all':<10} {report.passed:>7} {total:>5}   {causes}".rstrip())
    failing = report.failing()
    if failing:
        lines += ["", "failing:"]
        lines += [f"  {o.library} {o.problem_id}: {o.cause} {o.detail}".rstrip() for o in failing]
    return "\n".join(lines)
