"""`sbx bench`'s other parts: the service's and the restore's benches, in the same run.

`sbx bench` measures the sandbox (`sbx.sandbox.bench.run`); the targets of the
speed users feel also need a real `sbx serve` under a burst and a conversation
restored from its snapshot. This module runs both harnesses after the sandbox's
(`sbx.agent.bench.serve`, `sbx.agent.bench.restore`, the same code as `sbx bench
serve` and `sbx bench restore`), puts each one's JSON under the report's `parts`,
and merges the three lists of targets, so one `sbx bench --json` carries every
target with a figure. A part left out (`--skip`) says so in its targets' notes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sbx.agent.bench.restore import run_restore_bench
from sbx.agent.bench.serve import run_serve_bench
from sbx.agent.bench.serve_options import ServeBenchOptions
from sbx.sandbox.bench.felt import GOALS, RESTORE, SERVE, Felt, felt_targets, merge_felt
from sbx.sandbox.bench.stats import BenchReport

PARTS = ("serve", "restore")
"""What `--skip` may leave out."""


@dataclass(frozen=True, kw_only=True)
class Parts:
    """Which other benches to run, and how much of each."""

    serve: ServeBenchOptions | None
    """The service's bench (levels, questions, rounds); None: skipped."""
    restore_rounds: int
    """Rounds of the restore's bench (live, snapshot, replay, cold each); 0: skipped."""
    image: str
    """The sandbox image, the same as the sandbox part's."""
    restore_cells: int = 10
    """Executions the restored conversation holds (a DataFrame, a model fit, a chart, ...)."""


def skipped(bench: str, flag: str) -> list[Felt]:
    """The list of targets with `bench`'s own left unmeasured, the note naming `flag`."""
    return felt_targets({}, bench=bench,
                        notes={goal.key: f"skipped ({flag})" for goal in GOALS if goal.by == bench})


def add_parts(report: BenchReport, parts: Parts, progress: Callable[[str], None]) -> list[str]:
    """Run the other benches into `report` (`parts`, merged `felt`); their texts, to print.

    A service bench that broke a promise (an event lost, a container left) is a
    problem of the run: it is added to `report.notes` and its JSON says `ok: false`.
    """
    lists, texts = [report.felt], []
    if parts.serve is not None:
        served = run_serve_bench(parts.serve, lambda message: progress(f"serve: {message}"))
        report.parts["serve"] = served.as_json()
        lists.append(served.felt())
        texts.append("sbx bench serve (part of this run):\n" + served.render())
        report.notes += [f"serve part: {problem}" for problem in served.problems]
    else:
        lists.append(skipped(SERVE, "--skip serve"))
    if parts.restore_rounds:
        restored = run_restore_bench(
            image=parts.image, cells_count=parts.restore_cells, rounds=parts.restore_rounds,
            idle=0, progress=lambda message: progress(f"restore: {message}"))
        report.parts["restore"] = restored.as_json()
        lists.append(restored.felt())
        texts.append("sbx bench restore (part of this run):\n" + restored.render())
    else:
        lists.append(skipped(RESTORE, "--skip restore"))
    report.felt = merge_felt(*lists)
    return texts


def serve_ok(report: BenchReport) -> bool:
    """Whether the service's part, if it ran, kept every promise."""
    return bool(report.parts.get("serve", {}).get("ok", True))
