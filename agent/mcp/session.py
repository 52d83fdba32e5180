"""`McpSession` and `McpSessions`: one workspace and one gate for each MCP session.

An MCP client brings its own model; sbx gives it the tools without one. A
session is what the transport calls a session (the whole life of a stdio
connection; an `Mcp-Session-Id` over HTTP). Each gets a `Workspace` (one
sandbox, opened at the first call, kept between calls so variables persist)
and one `ToolGate` whose run id is the session's id: the audit log shows
`run_start` at the first call and `run_end` when the session ends, and the
sandbox containers carry the same id in their `sbx.run_id` label.

Everything here is blocking and thread-safe; the MCP layer calls it from
worker threads. A sandbox is removed (and the next call told so) when the
client cancels a running call, when the client asks (`reset_sandbox`), and
after an idle timeout; the session's end removes it for good.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from sbx.agent.app import App
from sbx.agent.workspace import Workspace, WorkspaceSpec
from sbx.sandbox.closing import Closing
from sbx.sandbox.result import Artifact
from sbx.tools.audit import AuditError
from sbx.tools.gate import ToolGate
from sbx.tools.outcome import ToolOutcome

logger = logging.getLogger(__name__)

RESET_NOTE = (
    "[sbx] The sandbox was reset before this call ({reason}): variables, imports and files "
    "written in the sandbox by earlier calls are gone (artifacts already copied out stay "
    "readable as resources). Re-run what you need."
)
MAX_REMEMBERED_ARTIFACTS = 10_000
"""Artifacts a session keeps addressable as resources; the oldest are forgotten first."""


def new_session_id() -> str:
    """A short unique id: the gate's run id, the containers' label, the artifacts' directory."""
    return "mcp-" + uuid.uuid4().hex[:12]


class SessionClosed(Exception):
    """The session ended while a call was on its way in."""


@dataclass(frozen=True, kw_only=True)
class CallReport:
    """One call's outcome at the gate, and the reset the client has not been told of yet."""

    outcome: ToolOutcome
    """What the gate returned (denials and tool errors included)."""
    reset_note: str | None = None
    """Said before the output when the sandbox was reset since the last execution."""


class McpSession(Closing):
    """One MCP session's sandbox, gate and artifacts; thread-safe."""

    def __init__(self, *, session_id: str, workspace: Workspace) -> None:
        self.id = session_id
        self.workspace = workspace
        self._lock = threading.Lock()
        self._gate_lock = threading.Lock()
        self._gate: ToolGate | None = None
        self._closed = False
        self._busy = 0
        self._last_used = time.monotonic()
        self._reset_reason: str | None = None
        self._artifacts: dict[str, Artifact] = {}
        self.turn = anyio.Lock()
        """Held by the async layer around an execution: one at a time, so that a
        cancellation reaches only the call that runs, never one waiting its turn."""

    @property
    def output_dir(self) -> Path:
        """Where this session's artifacts are copied (nothing of another session's is there)."""
        return self.workspace.output_dir(self.id)

    def call(self, name: str, arguments: Mapping[str, Any]) -> CallReport:
        """One tool call through the session's gate (policy, validation, quotas, audit)."""
        with self._lock:
            if self._closed:
                raise SessionClosed(f"MCP session {self.id} has ended")
            self._busy += 1
        try:
            gate = self._open_gate()
            note = self._take_reset_note() if name == "execute_python" else None
            call_id = "call-" + uuid.uuid4().hex[:12]
            outcome = gate.call(name=name, arguments=json.dumps(arguments), call_id=call_id)
            self._remember(outcome.artifacts)
            return CallReport(outcome=outcome, reset_note=note)
        finally:
            with self._lock:
                self._busy -= 1
                self._last_used = time.monotonic()

    def artifact(self, name: str) -> Artifact | None:
        """The latest artifact this session's code left under `name`, if any."""
        with self._lock:
            return self._artifacts.get(name)

    def cancel_running(self) -> None:
        """The client cancelled the running call: it ends `cancelled` and its sandbox goes."""
        gate = self._gate
        if gate is not None:
            gate.cancel(halt=False)
        self.discard("the previous call was cancelled, which stopped its code")

    def discard(self, reason: str) -> bool:
        """Remove the sandbox now; True when code had run in it (its state was lost)."""
        with self._lock:
            lost = self._discard_locked(reason)
        if lost:
            self._record_reset(reason)
        return lost

    def discard_if_idle(self, idle_s: float, now: float) -> bool:
        """Remove the sandbox when no call has come for `idle_s` seconds (and none runs)."""
        reason = f"it was idle for more than {idle_s:g} s"
        with self._lock:  # no call can start while the idle sandbox is removed
            idle = not self._closed and self._busy == 0 and now - self._last_used >= idle_s
            lost = idle and self.workspace.used and self._discard_locked(reason)
        if lost:
            self._record_reset(reason)
        return lost

    def close(self) -> None:
        """The session ended: stop what runs, remove the sandbox, write `run_end` (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            busy = self._busy
        gate = self._gate
        if gate is not None and busy:
            gate.cancel()  # a call still running ends `cancelled`, and nothing runs after it
        try:
            self.workspace.close()  # from now on no program opens a sandbox here
        finally:
            with self._gate_lock:  # a gate being opened right now is closed as well
                gate = self._gate
            if gate is not None:
                gate.close(reason="session_end")

    def _open_gate(self) -> ToolGate:
        """The session's one gate, opened (with its sandbox) at the first call: `run_start`."""
        with self._gate_lock:
            if self._closed:
                raise SessionClosed(f"MCP session {self.id} has ended")
            if self._gate is None:
                self._gate = self.workspace.open_gate(self.id)
            return self._gate

    def _discard_locked(self, reason: str) -> bool:
        self.workspace.discard()
        lost = self.workspace.take_reset()
        if lost:
            self._reset_reason = reason
        return lost

    def _take_reset_note(self) -> str | None:
        pending = self.workspace.take_reset()
        with self._lock:
            reason, self._reset_reason = self._reset_reason, None
        if not pending and reason is None:
            return None
        return RESET_NOTE.format(reason=reason or "its sandbox was replaced")

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
        data = {"reason": reason, "principal": self.workspace.spec.principal}
        try:
            self.workspace.audit.record(self.id, "sandbox_reset", data)
        except AuditError:  # the sandbox is gone either way; the next tool call will halt
            logger.warning("could not record the sandbox reset of %s", self.id)


class McpSessions(Closing):
    """Every live MCP session of one server, by the transport's session key; thread-safe.

    Sessions open at their first call. `close(key)` ends one (the transport
    says when); `reap_idle` removes idle sandboxes; `close()` ends them all.
    """

    def __init__(
        self, *, app: App, principal: str, data: tuple[Path, ...], output_root: Path
    ) -> None:
        self.app = app
        self.principal = principal
        self.data = data
        self.output_root = output_root
        self._lock = threading.Lock()
        self._sessions: dict[str, McpSession] = {}
        self._closed = False

    def get(self, key: str) -> McpSession:
        """The session for `key`, opened now if it is new (no I/O until its first call)."""
        with self._lock:
            if self._closed:
                raise SessionClosed("the MCP server is shutting down")
            session = self._sessions.get(key)
            if session is None:
                session = self._open()
                self._sessions[key] = session
            return session

    def find(self, key: str) -> McpSession | None:
        """The live session for `key`, or None (reading a resource opens nothing)."""
        with self._lock:
            return self._sessions.get(key)

    def end(self, key: str) -> None:
        """The transport ended the session `key`: its sandbox is removed, `run_end` written."""
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is not None:
            session.close()

    def reap_idle(self, idle_s: float) -> int:
        """Remove the sandboxes of sessions idle for `idle_s` seconds; how many were removed."""
        with self._lock:
            sessions = list(self._sessions.values())
        now = time.monotonic()
        return sum(session.discard_if_idle(idle_s, now) for session in sessions)

    def close(self) -> None:
        """End every session (idempotent); later calls are refused."""
        with self._lock:
            self._closed = True
            sessions, self._sessions = list(self._sessions.values()), {}
        errors: list[BaseException] = []
        for session in sessions:
            try:
                session.close()
            except Exception as exc:  # end the others first, then report
                errors.append(exc)
        if errors:
            raise errors[0]

    def _open(self) -> McpSession:
        session_id = new_session_id()
        spec = WorkspaceSpec(
            owner_id=session_id, principal=self.principal, data=self.data,
            output_root=self.output_root,
        )
        workspace = Workspace(
            spec=spec, config=self.app.config, audit=self.app.audit, pool=self.app.pool,
            image=self.app.image,
        )
        return McpSession(session_id=session_id, workspace=workspace)
