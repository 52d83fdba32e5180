"""The bench's modes (one name each, shown in the table) and the targets judged from them."""

from __future__ import annotations

from sbx.sandbox.bench.felt import BENCH, felt_targets
from sbx.sandbox.bench.live import SESSION_BUFFERED, live_targets
from sbx.sandbox.bench.stats import BenchReport, Target, ratio
from sbx.sandbox.bench.workloads import FIRST_QUESTION, PRINT_ONE, STDOUT_1MIB

HOST = "host python3 -c"
FLOOR = "persistent floor"
BASELINE = "docker run"
FRESH = "sbx fresh"
POOLED = "sbx fresh (pool)"
SESSION = "sbx session"
MODES = (HOST, FLOOR, BASELINE, FRESH, POOLED, SESSION, SESSION_BUFFERED)
BURST = "sbx fresh (pool, burst)"
BARE = "bare container (true)"
"""Throughput only: a hardened `docker run --rm` of `true`, the engine's cost per container."""
THROUGHPUT_MODES = (BARE, BASELINE, FRESH, POOLED, BURST, SESSION)


def evaluate_targets(report: BenchReport) -> None:
    """The targets as ratios of this run's numbers (the gate's is added by the CLI).

    The earlier targets 1-4, then 3a, 3b and 5 (`live.py`).
    """
    one = PRINT_ONE.name
    session_x = ratio(report.median(one, SESSION), report.median(one, FLOOR))
    pooled_x = ratio(report.median(one, POOLED), report.median(one, BASELINE))
    baseline_c4 = report.throughput.get(BASELINE, {}).get(4)
    tput = ratio(report.throughput.get(POOLED, {}).get(4), baseline_c4)
    burst = ratio(report.throughput.get(BURST, {}).get(4), baseline_c4)
    report.targets = [
        _target("session print(1) vs persistent floor", "<= 1.3x", session_x, 1.3, below=True),
        _target("pooled fresh print(1) vs docker run", "<= 0.35x", pooled_x, 0.35, below=True),
        _target("pooled fresh throughput at c=4 vs docker run", ">= 2x", tput, 2.0, below=False),
        _target(
            "  same, burst of pool-size runs from a full pool", ">= 2x", burst, 2.0, below=False
        ),
        *live_targets(
            report, stdout_workload=STDOUT_1MIB.name, session_mode=SESSION, print_one=one
        ),
        *first_question_targets(report),
    ]
    report.felt = felt_targets(felt_figures(report), bench=BENCH, notes=_busy_host(report))


def _busy_host(report: BenchReport) -> dict[str, str]:
    """A note on the CPU target: what it counts, and whether other work on the host is in it."""
    if _pooled_cpu(report)[1]:
        return {"pooled_cpu": "CPU of the bench's containers, the engine's daemons and the bench"}
    cores = report.environment.get("cores") or 1
    loads = [report.environment.get(k) or [0.0] for k in ("load_before", "load_after")]
    load = max(values[0] for values in loads)
    if load <= cores:
        return {}
    return {"pooled_cpu": f"host CPU counts other work too: load {load:g} on {cores} cores"}


def felt_figures(report: BenchReport) -> dict[str, float | None]:
    """This bench's share of the speed users feel (`felt.py`), from the run's numbers."""
    return {
        "pooled_cpu": _pooled_cpu(report)[0],
        "first_question": ratio(
            report.median(FIRST_QUESTION, POOLED), report.median(FIRST_QUESTION, BASELINE)
        ),
        "idle_memory": report.idle_memory.get("cgroup_anon_rss"),
    }


def _pooled_cpu(report: BenchReport) -> tuple[float | None, bool]:
    """The pooled new conversation's CPU over `docker run`'s, and whether it is the bench's own.

    Own: its containers, the engine's daemons and the bench (`counted.py`); else
    the whole host's busy CPU.
    """
    counted = report.first_question_counted_cpu
    own = ratio(counted.get(POOLED), counted.get(BASELINE))
    if own is not None:
        return own, True
    cpu = report.first_question_cpu
    return ratio(cpu.get(POOLED), cpu.get(BASELINE)), False


def first_question_targets(report: BenchReport) -> list[Target]:
    """Targets 1 and 2: a new conversation's first question with a 10 MB CSV."""
    pooled = report.median(FIRST_QUESTION, POOLED)
    vs_run = ratio(pooled, report.median(FIRST_QUESTION, BASELINE))
    vs_session = ratio(pooled, report.median(FIRST_QUESTION, SESSION))
    return [
        _target("first question, 10 MB CSV: pooled vs docker run", "<= 0.1x", vs_run, 0.1,
                below=True),
        _target("  same, vs an already-warm session", "<= 2x", vs_session, 2.0, below=True),
    ]


def _target(name: str, limit: str, value: float | None, bound: float, *, below: bool) -> Target:
    if value is None:
        return Target(name=name, limit=limit, measured="n/a", met=None)
    return Target(
        name=name,
        limit=limit,
        measured=f"{value:.3g}x",
        met=value <= bound if below else value >= bound,
    )
