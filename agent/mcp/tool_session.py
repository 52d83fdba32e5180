"""`McpSession`: the core's `ToolSession` as one MCP session holds it.

A session is what the face calls a session (the whole life of a stdio
connection; over HTTP, an `Mcp-Session-Id` or a named session of a
sessionless client: `sbx.agent.service.mcp_http`). What it runs, resets,
restores and records is the core's (`sbx.agent.core.tool_session`); the
face adds who opened it (its `Caller`, whose key finds it again), the
newest output line for progress notifications, the async turn that keeps
one execution at a time, and its `SessionAdmission`, told when the session ends.
"""

from __future__ import annotations

import uuid

import anyio

from sbx.agent import (
    UPLOAD_TOOL,
    Caller,
    Cell,
    RunRecorder,
    SessionAdmission,
    ToolSession,
    Workspace,
)
from sbx.agent.mcp.live_tail import LiveTail


def new_session_id() -> str:
    """A short unique id: the gate's run id, the containers' label, the artifacts' directory."""
    return "mcp-" + uuid.uuid4().hex[:12]


class McpSession(ToolSession):
    """One MCP session's tool session, caller, progress line and turn; thread-safe."""

    def __init__(
        self, *, session_id: str, workspace: Workspace, caller: Caller, admission: SessionAdmission,
        recorder: RunRecorder, reset_reason: str | None = None, journal: tuple[Cell, ...] = (),
    ) -> None:
        self.live = LiveTail()
        """The running execution's newest output line, for progress notifications."""
        super().__init__(session_id=session_id, workspace=workspace, recorder=recorder,
                         run_kind="mcp", on_output=self.live.add, data_tool=UPLOAD_TOOL,
                         reset_reason=reset_reason, journal=journal)
        self.caller = caller
        """Who opened it: its principal is every audit record's; its key finds it again."""
        self.admission = admission
        self.turn = anyio.Lock()
        """Held by the async layer around an execution: one at a time, so that a
        cancellation reaches only the call that runs, never one waiting its turn."""

    def closed(self) -> None:
        """The face's `SessionAdmission` hears of the end last, whatever failed before."""
        self.admission.close(self.caller, self.id)
