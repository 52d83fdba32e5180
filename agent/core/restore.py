"""Restore by replay: a conversation whose sandbox is gone gets its interpreter's state back.

A conversation's record (its transcript: every execution, in order, with its
output) outlives its sandbox. When the sandbox is gone (an idle release, a
timeout or out-of-memory kill, a cancelled run, a restart, a drain, a dead
replica) and the conversation asks again, the core re-runs, in the fresh
sandbox and before the question, the executions that built the state:

- which: every `execute_python` call that ran and succeeded (no exception,
  no timeout, no kill), in order, since the conversation last lost its state
  without getting it back ("not restored"). A call that failed (the killer of
  a timeout or OOM, a traceback) is never re-run;
- how: each through a gate of its own run (`<run_id>-restore`), so it is
  checked by the policy and audited like any other call, under the
  conversation's principal, within the sandbox's limits;
- "the same": stdout compared line by line with numbers equal at their printed
  precision (`sbx.agent.replay.compare`: `0.30000000000000004` matches `0.3`)
  and a relative noise of 1e-12 at most,
  the same exception type (none), and every recorded artifact written again
  (by name; by SHA-256 where the recorded file is still on this host). A cell
  that prints the clock or an unseeded random number differs; the names it
  assigns are reported as variables that may differ;
- bounds (`[restore]`): the number of cells, then CPU seconds and wall time
  checked after each cell. Past one, or when the engine fails, the sandbox is
  replaced by an empty one and the model is told "state not restored", as
  without restore. An engine that fails is the operator's error, as in any run;
- charged: the replay is work of the run that caused it. Its executions' CPU
  seconds, wall time and memory (`Restored.sandbox`) are added to that run's
  usage, so they count in its cost, its money budgets and the daily CPU quota;
  the budgets are asked before each cell, and one that is used up stops the
  replay (then the run stops at its first budget check, with the budget's status);
- artifacts: the re-run cells write into a directory of their own below the
  run's output (`restored-<token>/`). A file whose SHA-256 equals a recorded
  artifact still on this host is removed again (a conversation resumed three
  times keeps one copy, not four); one that differs, or whose original is on
  another host, is kept and recorded as the run's artifact (`storage_bytes`).

- a snapshot first: when the workspace holds one (`sbx.agent.core.snapshot`,
  taken inside the sandbox at its idle release) and it may be loaded, it is
  loaded by a cell of the replay's gate, and only the cells it could not hold
  are re-run (those after it, and those assigning a name it could not
  pickle); otherwise, or when it fails to load, every cell is replayed.

The outcome is one `state_restored` event (transcript, subscribers, the
service's stream) and a note put before the question the model reads.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from sbx.agent.core.artifacts import file_sha256, keep_new
from sbx.agent.core.budget import work_ending
from sbx.agent.core.cells import Cell as Cell
from sbx.agent.core.cells import assigned_names as assigned_names
from sbx.agent.core.cells import cell_of as cell_of
from sbx.agent.core.cells import cells_of as cells_of
from sbx.agent.core.config import RestoreSettings
from sbx.agent.core.events import CellDifference, StateRestored
from sbx.agent.core.outcomes import loss_text
from sbx.agent.core.snapshot import Snapshot, load_cell, refusal, report_of
from sbx.agent.core.state import PriorWork, SandboxUsage
from sbx.agent.core.transcript import TranscriptError, read_transcript
from sbx.agent.core.workspace import Workspace
from sbx.agent.replay.compare import Comparison, Observed, compare
from sbx.tools.gate import ToolGate
from sbx.tools.outcome import ToolOutcome

logger = logging.getLogger(__name__)

RELATIVE_NOISE = 1e-12
"""Float noise tolerated beyond the printed precision: a printed `time.time()` (about 1.7e9)
differs after a millisecond, where `sbx replay --rerun`'s 1e-9 would allow 1.7 seconds."""
MAX_NAMES = 20
"""Most variable names one notice lists (a cell may assign hundreds)."""
RESTORED_DIR = "restored"
"""The replay's artifacts go to `<run's output>/restored-<token>/` (see the module)."""

BudgetCheck = Callable[[SandboxUsage], str | None]
"""Asked before each cell with what the replay used so far: why it must stop (a money budget
is used up), or None."""


@dataclass(frozen=True, kw_only=True)
class Restored:
    """What a restore came to, and the work it did for the run that caused it."""

    event: StateRestored
    """The outcome (transcript, subscribers, the model's note)."""
    sandbox: SandboxUsage = field(default_factory=SandboxUsage)
    """What the re-run cells used: charged to the run that caused the replay."""
    written: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Every file the re-run cells wrote: host path -> (size, SHA-256)."""
    kept: tuple[str, ...] = ()
    """The written files kept by `restore_workspace` (the others matched a recorded one)."""

    @property
    def work(self) -> PriorWork:
        """The replay as work of its run (its usage and the artifacts it records)."""
        return PriorWork(sandbox=replace(self.sandbox), artifacts=self.kept)


@dataclass(kw_only=True)
class _Tally:
    """A replay in progress: what it has spent and found."""

    started: float
    cpu: float = 0.0
    replayed: int = 0
    used: SandboxUsage = field(default_factory=SandboxUsage)
    written: dict[str, tuple[int, str]] = field(default_factory=dict)


def replay(
    gate: ToolGate, cells: list[Cell], settings: RestoreSettings, *, reason: str,
    budget: BudgetCheck | None = None,
) -> Restored:
    """Re-run `cells` through `gate`, in order, within the bounds and `budget`; what came of it."""
    base: dict[str, object] = {"cells": len(cells)}
    if len(cells) > settings.max_cells:
        return Restored(event=StateRestored(
            status="not_restored", cells=len(cells),
            reason=f"{reason}; {len(cells)} cells exceed the replay bound of "
                   f"{settings.max_cells} cells"))
    tally = _Tally(started=time.monotonic())
    differed: list[CellDifference] = []
    failed: list[CellDifference] = []
    for cell in cells:
        spent = budget(tally.used) if budget is not None else None
        if spent is not None:
            return _ended(tally, base, "not_restored", [], [], f"{reason}; the replay stopped "
                                                               f"at a budget: {spent}")
        outcome = gate.call(name="execute_python", arguments=json.dumps({"code": cell.code}),
                            call_id=f"restore-{cell.call_id}"[:128])
        tally.replayed += 1
        result = outcome.execution
        if result is None:
            first = outcome.text.splitlines()[0] if outcome.text else outcome.status
            failed.append(_difference(cell, f"not re-run ({outcome.status}): {first}"))
            continue
        tally.cpu += result.cpu_seconds if result.cpu_seconds is not None else result.duration_s
        tally.used.add(result.duration_s, result.cpu_seconds, result.peak_memory_bytes)
        tally.written.update((a.path, (a.size, a.sha256)) for a in result.artifacts)
        verdict = _verdict(cell, outcome)
        if not result.ok:
            failed.append(_difference(cell, verdict.detail))
        elif not verdict.matches:
            differed.append(_difference(cell, verdict.detail))
        over = _over_bound(tally, settings)
        if over is not None:
            return _ended(tally, base, "not_restored", [], [], f"{reason}; {over}")
    status: Literal["restored", "partial"] = "partial" if differed or failed else "restored"
    return _ended(tally, base, status, differed, failed, reason)


def _verdict(cell: Cell, outcome: ToolOutcome) -> Comparison:
    """Does the re-run match the record: stdout, exception, artifacts (see the module)."""
    result = outcome.execution
    if result is None:
        return Comparison(matches=False, detail=f"not re-run ({outcome.status})")
    error = result.error
    now = Observed(stdout=result.stdout, error_type=error.type if error else None,
                   error_message=error.message if error else None, timed_out=result.timed_out)
    verdict = compare(Observed(stdout=cell.stdout, error_type=cell.error_type), now,
                      relative=RELATIVE_NOISE)
    if result.oom_killed:
        return Comparison(matches=False, detail="killed at the memory limit now")
    missing = _artifact_difference(cell, {Path(a.path).name: a.sha256 for a in result.artifacts})
    if verdict.matches and missing:
        return Comparison(matches=False, detail=missing)
    return verdict


def _artifact_difference(cell: Cell, written: dict[str, str]) -> str | None:
    """The first recorded artifact not written again, or written with other content."""
    for recorded in cell.artifacts:
        name = Path(recorded).name
        if name not in written:
            return f"artifact {name!r} was not written again"
        then = file_sha256(Path(recorded))
        if then is not None and then != written[name]:
            return f"artifact {name!r} differs (sha256 {then[:12]} then, {written[name][:12]} now)"
    return None


def _over_bound(tally: _Tally, settings: RestoreSettings) -> str | None:
    if tally.cpu > settings.cpu_seconds:
        return (f"the replay used {tally.cpu:.1f} CPU seconds, past its bound of "
                f"{settings.cpu_seconds:g}")
    elapsed = time.monotonic() - tally.started
    if elapsed > settings.wall_time:
        return f"the replay took {elapsed:.1f} s, past its bound of {settings.wall_time:g} s"
    return None


def _difference(cell: Cell, detail: str) -> CellDifference:
    return CellDifference(call_id=cell.call_id, detail=detail,
                          variables=assigned_names(cell.code)[:MAX_NAMES])


def _ended(tally: _Tally, base: dict[str, object], status: str, differed: list[CellDifference],
           failed: list[CellDifference], reason: str) -> Restored:
    names = [name for item in (*differed, *failed) for name in item.variables]
    event = StateRestored.model_validate({
        **base, "status": status, "replayed": tally.replayed, "differed": differed,
        "failed": failed, "variables": list(dict.fromkeys(names))[:MAX_NAMES],
        "reason": reason, "duration_s": round(time.monotonic() - tally.started, 3),
        "cpu_seconds": round(tally.cpu, 3),
    })
    return Restored(event=event, sandbox=tally.used, written=tally.written)


def restore_workspace(
    workspace: Workspace, cells: list[Cell], settings: RestoreSettings, *, run_id: str,
    reason: str, cause: str = "replaced",
) -> Restored:
    """Replay `cells` into `workspace`'s sandbox, through a gate of their own.

    Their audit run id is `<run_id>-restore`; a replay that does not finish
    leaves an empty sandbox behind (the note then says "state not restored").
    Its artifacts go below `output_dir(run_id)` and are settled by digest, and the
    owner's money budgets are asked before each cell (see the module).
    """
    workspace.prepare(run_id)  # the sandbox carries the owner's run id, not the replay's
    scratch = workspace.output_dir(run_id) / f"{RESTORED_DIR}-{secrets.token_hex(4)}"
    gate = workspace.open_gate(f"{run_id}-restore", output=scratch)
    outcome = "error"  # the engine failed: the run's own handling reports it
    try:
        restored = from_snapshot(workspace, gate, cells, settings, reason=reason)
        outcome = "completed"
    finally:
        gate.close(reason=outcome)
        if outcome == "error":  # nothing of a failed replay is recorded: nothing stays
            shutil.rmtree(scratch, ignore_errors=True)
    if restored.event.status == "not_restored" and restored.event.replayed:
        workspace.discard()  # half a state is worse than none: start empty, as the note says
        workspace.take_reset()
    recorded = [Path(path) for cell in cells for path in cell.artifacts]
    event = restored.event.model_copy(update={"run_id": run_id, "cause": cause})
    return replace(restored, event=event, kept=keep_new(restored.written, recorded, scratch))


def from_snapshot(workspace: Workspace, gate: ToolGate, cells: list[Cell],
                  settings: RestoreSettings, *, reason: str) -> Restored:
    """Load the workspace's snapshot, then replay only what it could not hold; else replay all.

    The load is a cell of the replay's gate (checked, audited, metered); what taking
    and loading the snapshot used is added to the replay's usage (see `snapshot`).
    """
    budget = _budget(workspace)
    snapshot = workspace.snapshot
    if snapshot is None:
        return replay(gate, cells, settings, reason=reason, budget=budget)
    why = refusal(snapshot, principal=workspace.spec.principal,
                  cells=[cell.call_id for cell in cells], limit=settings.snapshot_bytes)
    cost = replace(snapshot.usage)
    written: dict[str, tuple[int, str]] = {}
    if why is None:
        why = _load(gate, snapshot, cost, written)
    workspace.snapshot = replace(snapshot, usage=SandboxUsage())  # charged once
    if why is not None:
        logger.info("snapshot of %s not used: %s", workspace.owner_id, why)
        if cost.executions > snapshot.usage.executions:  # a load ran: its state is unknown
            workspace.discard()
            workspace.take_reset()
        rest, held = cells, 0
    else:
        rest = still_to_replay(cells, snapshot)
        held = len(cells) - len(rest)
    restored = replay(gate, rest, settings, reason=reason,
                      budget=lambda used: budget(_sum(used, cost)))
    event = restored.event.model_copy(update={
        "from_snapshot": held, "snapshot": why or "",
        "cpu_seconds": round(restored.event.cpu_seconds + cost.cpu_seconds, 3)})
    return replace(restored, event=event, sandbox=_sum(restored.sandbox, cost),
                   written={**written, **restored.written})


def _load(gate: ToolGate, snapshot: Snapshot, cost: SandboxUsage,
          written: dict[str, tuple[int, str]]) -> str | None:
    """Run the load cell; why it did not load, or None.

    Its usage is added to `cost`, and the `/output` files it wrote back to `written`.
    """
    outcome = gate.call(name="execute_python",
                        arguments=json.dumps({"code": load_cell(snapshot)}),
                        call_id="restore-snapshot")
    result = outcome.execution
    if result is None:
        return f"the load was not run ({outcome.status})"
    cost.add(result.duration_s, result.cpu_seconds, result.peak_memory_bytes)
    written.update((a.path, (a.size, a.sha256)) for a in result.artifacts)
    report = report_of(result.stdout) if result.ok else None
    if report is None or report.get("ok") is not True:
        detail = report.get("reason") if report else None
        return f"it did not load: {str(detail or 'the load cell failed')[:200]}"
    return None


def still_to_replay(cells: list[Cell], snapshot: Snapshot) -> list[Cell]:
    """The cells a loaded snapshot does not hold: after it, or assigning a name it left out."""
    unheld = set(snapshot.unheld)
    held = len(snapshot.cells)
    return [cell for index, cell in enumerate(cells)
            if index >= held or unheld.intersection(assigned_names(cell.code))]


def _sum(first: SandboxUsage, second: SandboxUsage) -> SandboxUsage:
    total = replace(first)
    total.executions += second.executions
    total.execution_s += second.execution_s
    total.cpu_seconds += second.cpu_seconds
    total.peak_memory_bytes = max(total.peak_memory_bytes, second.peak_memory_bytes)
    total.gb_seconds += second.gb_seconds
    return total


def _budget(workspace: Workspace) -> BudgetCheck:
    """The owner's `max_cost` and key's or team's budgets, for sandbox time (no model asked)."""
    settings = workspace.config.settings
    tariff = settings.prices.tariff("")  # no tokens are spent: only the sandbox's prices count

    def check(used: SandboxUsage) -> str | None:
        ended = work_ending(used, settings.budget, tariff, workspace.spec.spend)
        return ended.message if ended is not None else None
    return check


def prior_cells(path: Path, settings: RestoreSettings, *, reset: bool) -> list[Cell] | None:
    """The cells to replay before a run that starts after a reset (None: no restore).

    Read from the transcript before the run's own `run_start` is written; a
    transcript that cannot be read restores nothing (the model is told as before).
    """
    if not reset or not settings.enabled:
        return None
    try:
        return cells_of(read_transcript(path))
    except TranscriptError as exc:
        logger.warning("no restore: %s", exc)
        return None


def held_cells(path: Path, settings: RestoreSettings) -> tuple[str, ...]:
    """The ids of the cells a live sandbox holds: what a restore would replay (a snapshot's)."""
    return tuple(cell.call_id for cell in prior_cells(path, settings, reset=True) or ())


def replace_killed(workspace: Workspace, settings: RestoreSettings) -> None:
    """After a timeout or OOM kill reset the interpreter in place, replace the sandbox.

    The next run then restores into a fresh one (the killer is never replayed).
    """
    reason = workspace.state_lost
    if settings.enabled and reason and not workspace.reset_pending:
        workspace.discard(reason=reason, cause=workspace.lost_cause)


def forgotten() -> StateRestored:
    """The event of a conversation reset on purpose: nothing before it is replayed later."""
    return StateRestored(status="not_restored", reason=loss_text("reset"), cause="reset")


# ---------------------------------------------------------------- what people and the model read


def cell_count(count: int) -> str:
    """`1 cell`, `3 cells`: the count the model, the CLI and the page read alike."""
    return f"{count} cell" if count == 1 else f"{count} cells"


def restore_note(event: StateRestored) -> str:
    """What the model reads before the question, after a restore (or its failure)."""
    if event.status == "not_restored":
        return (f"[sbx] The sandbox was replaced since the previous question ({event.reason}); "
                "state not restored: variables, imports and files from earlier runs are gone. "
                "Re-run what you need.")
    how = (f"restored {cell_count(event.replayed)} by re-running the earlier code in order"
           if not event.from_snapshot else
           f"loaded the variables and files of {cell_count(event.from_snapshot)} from a snapshot "
           f"and re-ran {cell_count(event.replayed)}")
    lines = [f"[sbx] The sandbox was replaced since the previous question ({event.reason}); "
             f"sbx restored its state: {how}."]
    for item in event.differed:
        lines.append(f"- cell {item.call_id} differs: {item.detail}")
    for item in event.failed:
        lines.append(f"- cell {item.call_id} could not be restored: {item.detail}")
    if event.variables:
        lines.append("These variables may differ from before (and anything computed from "
                     "them): " + ", ".join(event.variables) + ".")
    return "\n".join(lines)


def restore_summary(event: StateRestored) -> str:
    """One line for people (CLI progress, the web page); the caller escapes it."""
    if event.status == "not_restored":
        return f"state not restored ({event.reason})"
    text = f"restored {cell_count(event.replayed)} ({event.reason})"
    if event.from_snapshot:
        text = (f"restored {cell_count(event.from_snapshot)} from a snapshot and re-ran "
                f"{event.replayed} ({event.reason})")
    if event.differed or event.failed:
        text += f"; {len(event.differed)} differ, {len(event.failed)} could not be restored"
    if event.variables:
        text += "; may differ: " + ", ".join(event.variables)
    return text
