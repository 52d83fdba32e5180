"""`ToolSession`: one workspace and one gate for a caller that brings its own model.

An MCP client (or any agent driving sbx's tools directly) has no conversation:
it calls tools. A tool session gives it one `Workspace` (one sandbox, opened at
the first call, kept between calls so variables persist) and one `ToolGate`
whose run id is the session's id: the audit log shows `run_start` at the first
call and `run_end` when the session ends, and the sandbox containers carry the
same id in their `sbx.run_id` label.

Everything here is blocking and thread-safe; a face calls it from worker
threads. A sandbox is removed (and the next call told so) when the caller
cancels a running call, when it asks (`discard(forget=True)`), and after an
idle timeout (`discard_if_idle`, the workspace's one idle release); the
session's end removes it for good and calls `on_close`. Each execution is a
run of its own for the face's `RunRecorder` (its quotas and store; `Refused`
before it starts), with a `Cancellation` token that the face's drain may fire
like any run's. After a reset the caller did not ask for (a cancel, an idle
release), the session's successful executions are replayed into the new
sandbox before the next one (`sbx.agent.core.restore`) and the caller is told
what came back. A tool whose value is a file path (`data_tool`) adds a data
file to the session.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sbx.agent.core.outcomes import idle_reason, loss_text, reset_note
from sbx.agent.core.restore import (
    Cell,
    cell_of,
    replace_killed,
    restore_note,
    restore_workspace,
)
from sbx.agent.core.run_recorder import (
    RunKind,
    RunRecorder,
    recorded_call,
)
from sbx.agent.core.state import PriorWork
from sbx.agent.core.workspace import Workspace
from sbx.sandbox.closing import Closing
from sbx.sandbox.errors import SbxError
from sbx.sandbox.limits import Limits
from sbx.sandbox.result import Artifact
from sbx.tools.audit import AuditError
from sbx.tools.context import OutputSink
from sbx.tools.gate import ToolGate
from sbx.tools.guard import DataGuard
from sbx.tools.outcome import ToolOutcome

logger = logging.getLogger(__name__)

IN_SANDBOX = ("execute_python", "run_command")
"""The tools that run in the session's sandbox: each a run (recorded, cancellable), after the
session's state is restored; only `execute_python`'s programs are journaled and replayed."""
MAX_REMEMBERED_ARTIFACTS = 10_000
"""Artifacts a session keeps addressable as resources; the oldest are forgotten first."""
DATA_NOW = "It is at /data/{name} from the next execute_python call."
DATA_AFTER_RESET = (
    "This session's sandbox started before it and holds your variables, so /data/{name} "
    "appears there only after reset_sandbox (which clears them); list_data_files and "
    "preview_data_file see it now."
)


class SessionClosed(SbxError):
    """The session ended while a call was on its way in."""


@dataclass(frozen=True, kw_only=True)
class CallReport:
    """One call's outcome at the gate, and the reset the client has not been told of yet."""

    outcome: ToolOutcome
    """What the gate returned (denials and tool errors included)."""
    reset_note: str | None = None
    """Said before the output when the sandbox was reset since the last execution."""
    footer: str | None = None
    """Said after the output (where a file just uploaded can be read)."""


class ToolSession(Closing):
    """One tool session's sandbox, gate and artifacts; thread-safe."""

    def __init__(
        self, *, session_id: str, workspace: Workspace, recorder: RunRecorder,
        run_kind: RunKind, on_output: OutputSink | None = None, data_tool: str | None = None,
        reset_reason: str | None = None, journal: tuple[Cell, ...] = (),
    ) -> None:
        self.id = session_id
        self.workspace = workspace
        self.principal = workspace.spec.principal
        """Who opened it (the face authenticated them): every audit record's principal."""
        self.run_kind = run_kind
        """Each execution's run kind for the recorder (`mcp`, `e2b`)."""
        self.data_tool = data_tool
        self.on_output = on_output
        self._call_output: Callable[[str, str], None] | None = None
        """The running call's own output sink (`call(on_output=)`)."""
        self.recorder = recorder
        """Hears each execution as a run (the face's quotas and store)."""
        self._lock = threading.Lock()
        self._gate_lock = threading.Lock()
        self._gate: ToolGate | None = None
        self._closed = False
        self._closing = False
        self._holds_state = False
        """Code has run in the current sandbox (replacing it would lose variables)."""
        self._reset_reason = reset_reason
        self._last_reason: str | None = None
        """Told at the next execution: set by a discard, or given by an earlier session of
        the same key that ended idle (its state is gone, and the client should know)."""
        self._artifacts: dict[str, Artifact] = {}
        self._journal: list[Cell] = list(journal)
        """The executions that built the sandbox's state, replayed after a reset."""
        rules = workspace.config.policy.guard.for_principal(self.principal, workspace.spec.team)
        self._guard = DataGuard(rules)

    def guarded(self, text: str) -> str:
        """`text` as it may leave for the client's model: the principal's data guard applied.

        The gate filters each observation; what the session says beside it (a restore's
        note quoting replayed output, a running execution's newest line) passes here.
        """
        return self._guard.text(text).text

    def allows(self, tool: str) -> bool:
        """Whether the policy enables `tool`.

        A face may refuse in its own words what the gate would deny: a denial at the
        gate counts toward its halt.
        """
        rule = self.workspace.config.policy.tools.rule(tool)
        return rule is not None and rule.enabled

    @property
    def limits(self) -> Limits:
        """The limits each execution runs under (what a face tells its client of them)."""
        return self.workspace.config.limits

    @property
    def output_dir(self) -> Path:
        """Where this session's artifacts are copied (nothing of another session's is there)."""
        return self.workspace.output_dir(self.id)

    def call(self, name: str, arguments: Mapping[str, Any], *,
             on_output: Callable[[str, str], None] | None = None,
             on_start: Callable[[], None] | None = None,
             charged: bool = True) -> CallReport:
        """One tool call through the session's gate (policy, validation, quotas, audit).

        An execution is a run of the face's `RunRecorder` (its quotas); a refusal
        raises `Refused` and leaves the session as it was. `on_start()` is heard once
        the call is admitted (a face may begin its answer), and `on_output(stream,
        text)` with this call's output while it runs (the session's own sink hears it
        too); one call at a time should pass them, as a face's turn ensures.
        `charged=False`: a program the session runs for itself at its start (its env
        vars, its working directory) is audited and journaled but is no run of the
        recorder, so it costs the caller no quota.
        """
        note: str | None = None
        prior: PriorWork | None = None

        def through_gate() -> ToolOutcome:
            nonlocal note, prior
            gate = self._open_gate()
            if name in IN_SANDBOX:
                note, prior = self._restored(self._take_reset_note())
            if on_start is not None:
                on_start()
            call_id = "call-" + uuid.uuid4().hex[:12]
            self._call_output = on_output
            try:
                outcome = gate.call(name=name, arguments=json.dumps(arguments), call_id=call_id)
            finally:
                self._call_output = None
            if name == "execute_python":
                self._journal_add(cell_of(call_id, arguments.get("code"), outcome))
            return outcome

        with ExitStack() as using:
            with self._lock:  # an idle end cannot slip between this check and the use
                if self._closed:
                    raise SessionClosed(f"session {self.id} has ended")
                using.enter_context(self.workspace.in_use())
            if name in IN_SANDBOX and charged:
                outcome = self._execution(through_gate, lambda: prior)
            else:
                outcome = through_gate()
            self._remember(outcome.artifacts)
            if outcome.execution is not None:
                with self._lock:
                    self._holds_state = True
            footer = None
            if name == self.data_tool and outcome.status == "ok" and isinstance(outcome.value,
                                                                                 Path):
                footer = self._add_data(outcome.value)
            shown = self.guarded(note) if note is not None else None
            return CallReport(outcome=outcome, reset_note=shown, footer=footer)

    def _execution(self, call: Callable[[], ToolOutcome],
                   prior: Callable[[], PriorWork | None]) -> ToolOutcome:
        """One execution as a run: recorded, and cancelled (the drain) through its token.

        A restore's replay before it (`prior()`) is charged to it.
        """
        ticket = self.workspace.ticket(self.run_kind, gate_id=self.id)
        unhook = ticket.cancel.on_cancel(self.cancel_running)
        tariff = self.workspace.config.settings.prices.tariff("")  # sandbox time: its cost
        try:
            return recorded_call(self.recorder, ticket, call, tariff, prior)
        finally:
            unhook()

    def journal(self) -> tuple[Cell, ...]:
        """The executions a later session of the same key replays (this one ended idle)."""
        with self._lock:
            return tuple(self._journal)

    def artifact(self, name: str) -> Artifact | None:
        """The latest artifact this session's code left under `name`, if any."""
        with self._lock:
            return self._artifacts.get(name)

    def cancel_running(self) -> None:
        """The client cancelled the running call: it ends `cancelled` and its sandbox goes."""
        gate = self._gate
        if gate is not None:
            gate.cancel(halt=False)
        self.discard(loss_text("cancel", "it stopped the running call"))

    def discard(self, reason: str, *, forget: bool = False) -> bool:
        """Remove the sandbox now; True when code had run in it (its state was lost).

        `forget` (the client asked for a clean sandbox): nothing is restored later.
        """
        with self._lock:
            lost = self._discard_locked(reason)
            if forget:
                self._journal.clear()
        if lost:
            self._record_reset(reason)
        return lost

    def discard_if_idle(self, idle_s: float, reason: str | None = None) -> bool:
        """Remove the sandbox when no call has come for `idle_s` seconds (and none runs).

        True when code had run in it (its state was lost; the next call is told).
        """
        reason = reason or idle_reason(idle_s)
        with self._lock:
            if self._closed or not self.workspace.discard_if_idle(idle_s, reason=reason):
                return False
            lost = self._reset_locked(reason)
        if lost:
            self._record_reset(reason)
        return lost

    def end_if_idle(self, idle_s: float, now: float) -> bool:
        """Mark the session ended when no call has come for `idle_s` s (and none runs).

        True: the caller must `close()` it; a call arriving from now on is refused.
        """
        with self._lock:
            idle = self.workspace.idle_for(now)
            if self._closed or idle is None or idle < idle_s:
                return False
            self._closed = True
            return True

    def close(self) -> None:
        """The session ended: stop what runs, remove the sandbox, write `run_end` (idempotent).

        `closed()` is called last, whatever failed before.
        """
        with self._lock:
            if self._closing:
                return
            self._closed = self._closing = True
            busy = self.workspace.busy
        gate = self._gate
        if gate is not None and busy:
            gate.cancel()  # a call still running ends `cancelled`, and nothing runs after it
        try:
            self.workspace.close()  # from now on no program opens a sandbox here
        finally:
            try:
                with self._gate_lock:  # a gate being opened right now is closed as well
                    gate = self._gate
                if gate is not None:
                    gate.close(reason="session_end")
            finally:
                self.closed()

    def closed(self) -> None:
        """Heard once the session has ended (a face's admission gives its place back)."""

    def _open_gate(self) -> ToolGate:
        """The session's one gate, opened (with its sandbox) at the first call: `run_start`."""
        with self._gate_lock:
            if self._closed:
                raise SessionClosed(f"session {self.id} has ended")
            if self._gate is None:
                self._gate = self.workspace.open_gate(self.id, on_output=self._relay)
            return self._gate

    def _relay(self, call_id: str, stream: str, text: str) -> None:
        """The gate's output: to the session's sink and to the running call's."""
        if self.on_output is not None:
            self.on_output(call_id, stream, text)
        sink = self._call_output
        if sink is not None:
            sink(stream, text)

    def _discard_locked(self, reason: str) -> bool:
        self.workspace.discard()
        return self._reset_locked(reason)

    def _reset_locked(self, reason: str) -> bool:
        """After the sandbox went: whether state was lost, and the reason kept for the note."""
        self._holds_state = False
        lost = self.workspace.take_reset()
        if lost:
            self._reset_reason = reason
        return lost

    def _take_reset_note(self) -> str | None:
        """The note of a reset since the last execution (a timeout's too, as chat's is)."""
        replace_killed(self.workspace, self.workspace.config.restore)
        pending = self.workspace.take_reset()
        lost = self.workspace.lost_reason() if pending else None
        with self._lock:
            reason, self._reset_reason = self._reset_reason or lost, None
            self._last_reason = reason
        if not pending and reason is None:
            return None
        return reset_note(reason or "its sandbox was replaced")

    def _restored(self, note: str | None) -> tuple[str | None, PriorWork | None]:
        """After a reset, the journal replayed into the new sandbox; the client's note.

        Also the replay's work, charged to the execution that caused it.
        """
        settings = self.workspace.config.restore
        with self._lock:
            cells, reason = list(self._journal), self._last_reason
        if note is None or not cells or not settings.enabled:
            return note, None
        restored = restore_workspace(self.workspace, cells, settings, run_id=self.id,
                                     reason=reason or "its sandbox was replaced")
        if restored.event.status == "not_restored":
            with self._lock:
                self._journal.clear()
        return restore_note(restored.event), restored.work

    def _journal_add(self, cell: Cell | None) -> None:
        settings = self.workspace.config.restore
        with self._lock:
            if cell is not None and len(self._journal) <= settings.max_cells:
                self._journal.append(cell)

    def _add_data(self, path: Path) -> str:
        """A file just uploaded joins the session's data: mounted by its next sandbox.

        The sandbox running now cannot gain a mount. When no code has run in it yet it
        is replaced at once (nothing is lost); otherwise the client is told to reset.
        """
        workspace = self.workspace
        with self._lock:
            workspace.spec = replace(workspace.spec, data=(*workspace.spec.data, path))
            fresh = not self._holds_state
        if fresh:
            workspace.discard()
            workspace.forget_loss()  # nothing was lost: no reset to report, nothing to restore
            return DATA_NOW.format(name=path.name)
        return DATA_AFTER_RESET.format(name=path.name)

    def _remember(self, artifacts: tuple[Artifact, ...]) -> None:
        with self._lock:
            for artifact in artifacts:
                self._artifacts.pop(artifact.name, None)  # re-inserted: newest last
                self._artifacts[artifact.name] = artifact
            while len(self._artifacts) > MAX_REMEMBERED_ARTIFACTS:
                del self._artifacts[next(iter(self._artifacts))]

    def _record_reset(self, reason: str) -> None:
        """An audit record of a reset the client did not run code for (cancel, idle, ask)."""
        if self._gate is None:
            return
        data = {"reason": reason, "principal": self.principal}
        try:
            self.workspace.audit.record(self.id, "sandbox_reset", data)
        except AuditError:  # the sandbox is gone either way; the next tool call will halt
            logger.warning("could not record the sandbox reset of %s", self.id)
