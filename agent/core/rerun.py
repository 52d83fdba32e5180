"""Re-run a past conversation's code in a fresh sandbox; say, per execution, whether it matches.

`sbx replay --rerun TRANSCRIPT` comes here through the door's `App.rerun`. Every
`execute_python` call that ran in the transcript's runs is sent again, in
order, to one fresh sandbox with the same data (variables carry over between
runs, as they did in the conversation): one run of kind `rerun` (its ticket,
its recorder) in a workspace from the app's pool, and a gate per recorded run,
so each call is checked by the policy and audited like any other (audit run
ids `rerun-...`). No model is involved; what matches is `sbx.agent.replay`'s.

The conversation's history (`sbx.agent.core.history`) says where its state
was lost for good: the re-run resets there, and nowhere a restore rebuilt the
state. An execution that did not run to its end (a timeout, a kill) is not sent
again: it would be killed again, and the state with it.

The data comes first: each file's SHA-256 is compared with the digests the
transcript recorded (`run_start.data_sha256`), so a file that changed or went
missing is named in the report rather than blamed on the code. The code is
the transcript's: it may have been edited by anyone, which is why it only
ever runs in the sandbox.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sbx.agent.core.history import RecordedConversation, RecordedExecution, RecordedRun
from sbx.agent.core.run_recorder import RunOutcome, RunRecorder, recorded
from sbx.agent.core.workspace import Workspace
from sbx.agent.provenance.data import MISSING, DataChange, data_changes, data_digests
from sbx.agent.replay.compare import Comparison, Observed, compare
from sbx.sandbox.errors import SbxError
from sbx.tools.gate import ToolGate


class RerunError(SbxError):
    """The re-run cannot start (e.g. the policy disables code); the message says why."""


@dataclass(frozen=True, kw_only=True)
class ExecutionCheck:
    """One execution re-run and compared."""

    run_id: str
    """The recorded run it belongs to."""
    number: int
    """Its number in that run (1, 2, ...)."""
    call_id: str
    """The recorded call's id."""
    comparison: Comparison
    """Whether it matches, and what differs."""
    skipped: bool = False
    """Not sent again: it did not run to its end in the conversation (a timeout, a kill),
    and would not now; the state it left behind is what the record says came next."""


@dataclass(kw_only=True)
class RerunReport:
    """Everything a re-run found."""

    rerun_id: str
    """The audit run ids of the re-run start with it."""
    changes: list[DataChange] = field(default_factory=list)
    """Data files that differ from the record (changed, missing, new)."""
    checks: list[ExecutionCheck] = field(default_factory=list)
    """Every execution, in order."""

    @property
    def differing(self) -> int:
        """Executions whose output differs."""
        return sum(not check.comparison.matches for check in self.checks)

    @property
    def ok(self) -> bool:
        """Every execution matched and the data is the data the run read."""
        return not self.differing and not self.changes


def recorded_data(record: RecordedConversation) -> tuple[tuple[str, ...], dict[str, str]]:
    """The data paths and digests of the first run that recorded them."""
    for run in record.runs:
        if run.data or run.data_sha256:
            return run.data, run.data_sha256
    return (), {}


def rerun_plan(record: RecordedConversation) -> tuple[RerunReport, tuple[Path, ...]]:
    """A new re-run's report (its data compared with the record's), and the data it mounts.

    A recorded file that is missing now is named in the report and not mounted.
    """
    report = RerunReport(rerun_id="rerun-" + uuid.uuid4().hex[:12])
    paths, recorded_digests = recorded_data(record)
    if recorded_digests:
        report.changes = data_changes(recorded_digests, data_digests(paths))
    gone = {change.name for change in report.changes if change.now == MISSING}
    return report, tuple(Path(p) for p in paths if Path(p).resolve().name not in gone)


def rerun_in(
    workspace: Workspace, record: RecordedConversation, report: RerunReport, *,
    recorder: RunRecorder, on_check: Callable[[ExecutionCheck], None],
) -> RerunReport:
    """Re-run every execution of `record` in `workspace`, a run of its own (see the module).

    `App.rerun` opens the workspace, named after the re-run, and comes here.
    """
    if not workspace.enabled:
        raise RerunError("the policy does not enable execute_python: nothing can be re-run")
    ticket = workspace.ticket("rerun", run_id=report.rerun_id)

    def work() -> RerunReport:
        with workspace:
            for index, run in enumerate(record.runs, start=1):
                gate = workspace.open_gate(f"{report.rerun_id}-r{index}")
                try:
                    for check in _run_checks(gate, run, workspace.discard):
                        report.checks.append(check)
                        on_check(check)
                finally:
                    gate.close(reason="completed")
        return report

    return recorded(recorder, ticket, work, _outcome)


def _outcome(report: RerunReport) -> RunOutcome:
    """A re-run's outcome: `ok` when everything matched, else `error` saying what differs."""
    message = "every execution matches" if report.ok else (
        f"{report.differing} execution(s) differ, {len(report.changes)} data file(s) changed")
    return RunOutcome(status="ok" if report.ok else "error", message=message)


def _run_checks(
    gate: ToolGate, run: RecordedRun, reset: Callable[[], None]
) -> list[ExecutionCheck]:
    """Each execution again, in order; where the original's state was reset, so is ours."""
    checks = []
    for execution in run.executions:
        if execution.reset_before:  # the state was lost there, and nothing restored it
            reset()
        skipped = execution.unfinished  # it would be killed again, and take the state along
        comparison = Comparison(matches=True, detail="did not run to its end in the "
                                "conversation (a timeout or a kill)") if skipped else _again(
            gate, execution)
        checks.append(
            ExecutionCheck(
                run_id=run.run_id, number=execution.number, call_id=execution.call_id,
                comparison=comparison, skipped=skipped,
            )
        )
    return checks


def _again(gate: ToolGate, execution: RecordedExecution) -> Comparison:
    """Send the recorded code through the gate once more and compare what it printed."""
    outcome = gate.call(
        name="execute_python", arguments=json.dumps({"code": execution.code}),
        call_id=f"rerun-{execution.call_id}"[:128],
    )
    result = outcome.execution
    if result is None:  # refused at the gate: it did not run
        first = outcome.text.splitlines()[0] if outcome.text else outcome.status
        return Comparison(matches=False, detail=f"not re-run ({outcome.status}): {first}")
    recorded = Observed(
        stdout=execution.stdout, error_type=execution.error_type,
        error_message=execution.error_message, timed_out=execution.timed_out,
    )
    error = result.error
    now = Observed(
        stdout=result.stdout, error_type=error.type if error else None,
        error_message=error.message if error else None, timed_out=result.timed_out,
    )
    return compare(recorded, now)
