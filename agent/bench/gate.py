"""`sbx bench`: the gate and audit overhead per tool call, alone and with 1, 4 and 16 callers.

Only `agent/` may import both `tools` and `sandbox`, so this is measured here:
`ToolGate.call` of `execute_python` with a runner that answers at once (the
answer of a real `print(1)`), so what is timed is validation, policy, quotas,
two fsync'd audit appends and rendering. The audit file lives, for the run, in
the directory of the configured audit log, so its fsync costs what
production's does. Target 5 compares one call with a session `print(1)`.

With callers at once, each caller is a run of its own
(its own gate, as each conversation of one `sbx serve` process has), and all
of them share one audit log, so their appends meet at its lock and, with group
commit, share fsyncs. A caller makes `calls` calls; the levels are measured in
rounds whose order rotates, after an untimed round.

Two figures per level, both per call:

    latency     the median time one call took, as its caller saw it
    amortised   the level's wall time divided by the calls it made (the host's cost)

Target 4 compares both at 16 callers with the same figure at one caller.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from sbx.agent.core.config import load_config
from sbx.sandbox.bench.stats import BenchReport, Summary, Target
from sbx.sandbox.bench.targets import SESSION
from sbx.sandbox.bench.workloads import PRINT_ONE
from sbx.sandbox.limits import Limits
from sbx.sandbox.live_output import OutputCallback
from sbx.sandbox.result import ExecutionResult
from sbx.tools.audit import AuditLog, resolve_audit_path
from sbx.tools.context import ToolContext
from sbx.tools.gate import ToolGate, build_gate
from sbx.tools.policy import Policy, Quotas
from sbx.tools.redact import Redactor

LEVELS = (1, 4, 16)
TARGET = 1.5
"""Target 4: per call at 16 callers at most 1.5x the per-call cost at one caller."""
GATE_TARGET = 0.05
"""Target 5: gate + audit overhead at most 5% of a session execution of `print(1)`."""
ARGUMENTS = json.dumps({"code": "print(1)"})


class GateRefused(RuntimeError):
    """The gate refused a call the bench makes (a policy that denies `execute_python`)."""


class _AnsweringRunner:
    """A `CodeRunner` that returns a fixed result at once: the gate is what is timed."""

    def run(
        self,
        code: str,
        *,
        on_output: OutputCallback | None = None,
        timeout: float | None = None,
        show_values: bool = True,
        print_values: bool = True,
    ) -> ExecutionResult:
        return ExecutionResult(stdout="1\n", duration_s=0.0008)


@dataclass(frozen=True, kw_only=True)
class LevelFigures:
    """One concurrency level's figures."""

    latency: Summary
    """Per-call latency as each caller saw it, over every call of every timed round."""
    amortised_s: float
    """Median over rounds of wall time / calls."""
    appends_per_fsync: float
    """Audit appends that shared one fsync, on average (1.0: none shared)."""


@contextmanager
def _bench_audit() -> Iterator[tuple[Policy, Limits, AuditLog]]:
    """The configured policy without quotas, its limits, a scratch audit log beside the real one."""
    config = load_config(None)
    policy = config.policy.model_copy(update={"quotas": Quotas(per_tool={}, max_denied=None)})
    directory = resolve_audit_path(None, policy.audit.path, os.environ).resolve().parent
    with TemporaryDirectory(prefix=".sbx-bench-", dir=directory) as scratch:
        with AuditLog.open(Path(scratch) / "audit.jsonl", key=None, redact=Redactor.build()) as log:
            yield policy, config.limits, log


def _checked(gate: ToolGate, call_id: str) -> None:
    outcome = gate.call(name="execute_python", arguments=ARGUMENTS, call_id=call_id)
    if outcome.status != "ok":
        raise GateRefused(f"bench: the gate refused: {outcome.text}")


def measure_gate(samples: int) -> dict[str, Summary]:
    """Time `gate.call("execute_python")` and a bare audit append, each `samples` times."""
    with _bench_audit() as (policy, limits, audit):
        context = ToolContext(run_id="bench-gate", runner=_AnsweringRunner())
        gate = build_gate(policy, limits=limits, context=context, audit=audit)
        calls, appends = [], []
        for index in range(samples + 5):
            started = time.perf_counter()
            _checked(gate, f"c{index}")
            calls.append(time.perf_counter() - started)
            started = time.perf_counter()
            audit.record("bench-gate", "bench", {"n": index})
            appends.append(time.perf_counter() - started)
        gate.close()
    return {"gate_call": Summary.of(calls[5:]), "audit_append": Summary.of(appends[5:])}


def add_gate(report: BenchReport, samples: int) -> None:
    """Put the gate figures and target 5 into the report."""
    figures = measure_gate(samples)
    call = figures["gate_call"]
    session = report.median(PRINT_ONE.name, SESSION)
    share = call.median_s / session if session else None
    report.gate = {name: summary.as_json() for name, summary in figures.items()}
    report.gate["share_of_session_print1"] = None if share is None else round(share, 4)
    report.gate["summary"] = (
        f"{call.median_s * 1000:.3f} ms median (p90 {call.p90_s * 1000:.3f}); "
        f"one fsync'd audit append alone {figures['audit_append'].median_s * 1000:.3f} ms"
        + ("" if share is None else f"; {share:.1%} of a session print(1)")
    )
    report.targets.append(Target(
        name="gate + audit per tool call vs session print(1)", limit="<= 5%",
        measured="n/a" if share is None else f"{share:.1%}",
        met=None if share is None else share <= GATE_TARGET,
    ))


def measure_gate_concurrency(
    calls: int, *, rounds: int = 3, levels: tuple[int, ...] = LEVELS
) -> dict[int, LevelFigures]:
    """Every level `rounds` times (plus one untimed round), in rotating order."""
    latencies: dict[int, list[float]] = {level: [] for level in levels}
    amortised: dict[int, list[float]] = {level: [] for level in levels}
    syncs: dict[int, int] = dict.fromkeys(levels, 0)
    with _bench_audit() as (policy, limits, log):
        for number in range(rounds + 1):
            shift = number % len(levels)
            for level in levels[shift:] + levels[:shift]:
                taken, wall, synced = _one_round(policy, limits, log, level, calls,
                                                 f"r{number}")
                if number:
                    latencies[level].extend(taken)
                    amortised[level].append(wall / (level * calls))
                    syncs[level] += synced
    return {
        level: LevelFigures(
            latency=Summary.of(latencies[level]),
            amortised_s=statistics.median(amortised[level]),
            appends_per_fsync=2 * level * calls * rounds / max(1, syncs[level]),
        )
        for level in levels
    }


def _one_round(
    policy: Policy, limits: Limits, log: AuditLog, level: int, calls: int, tag: str
) -> tuple[list[float], float, int]:
    """`level` callers, `calls` calls each, started together; (latencies, wall s, fsyncs)."""
    runner = _AnsweringRunner()
    gates = [
        build_gate(
            policy, limits=limits, audit=log,
            context=ToolContext(run_id=f"bench-{tag}-c{level}-{n}", runner=runner),
        )
        for n in range(level)
    ]
    start = threading.Barrier(level + 1)
    taken: list[list[float]] = [[] for _ in range(level)]
    failures: list[GateRefused] = []

    def caller(n: int, gate: ToolGate) -> None:
        start.wait()
        for index in range(calls):
            began = time.perf_counter()
            try:
                _checked(gate, f"c{index}")
            except GateRefused as refused:
                failures.append(refused)
            taken[n].append(time.perf_counter() - began)

    threads = [threading.Thread(target=caller, args=(n, g)) for n, g in enumerate(gates)]
    for thread in threads:
        thread.start()
    start.wait()
    began, synced = time.perf_counter(), log.syncs
    for thread in threads:
        thread.join()
    wall, synced = time.perf_counter() - began, log.syncs - synced
    for gate in gates:
        gate.close()
    if failures:
        raise failures[0]
    return [value for values in taken for value in values], wall, synced


def add_gate_concurrency(report: BenchReport, calls: int) -> None:
    """Put the per-level figures and target 4 into the report."""
    figures = measure_gate_concurrency(calls)
    one, many = figures[LEVELS[0]], figures[LEVELS[-1]]
    report.gate["concurrency"] = {
        str(level): {
            **f.latency.as_json(),
            "amortised_ms": round(f.amortised_s * 1000, 3),
            "appends_per_fsync": round(f.appends_per_fsync, 2),
        }
        for level, f in figures.items()
    }
    report.gate["concurrency_summary"] = "; ".join(
        f"c={level} {f.latency.median_s * 1000:.3f} ms per call "
        f"(amortised {f.amortised_s * 1000:.3f}, {f.appends_per_fsync:.1f} appends per fsync)"
        for level, f in figures.items()
    )
    latency_x = many.latency.median_s / one.latency.median_s
    amortised_x = many.amortised_s / one.amortised_s
    report.targets.append(
        Target(
            name=f"gate + audit per call at {LEVELS[-1]} callers vs 1",
            limit=f"<= {TARGET}x",
            measured=f"{amortised_x:.2f}x amortised, {latency_x:.2f}x latency",
            met=amortised_x <= TARGET,
        )
    )
