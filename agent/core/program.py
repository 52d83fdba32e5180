"""One program, run like a model's `execute_python`: gated, audited, recorded, cancellable.

`App.execute(program)` is the front door's operation for callers that bring
their own code (`POST /v1/execute`, `sbx exec`): a workspace of its own, opened
for this call and removed after it, one gate (policy, validation, quotas,
audit records `run_start` .. `run_end` under the caller's principal), one call.
The face's `RunRecorder` hears it admitted, started and finished; a host at
its sandbox cap (`HostBusy`) or a call the gate refuses withdraws it (nothing
ran). The `Cancellation` token cancels the running call (its sandbox is
removed); fired before the gate exists, it halts the gate as soon as it opens,
so the code never runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sbx.agent.core.cancellation import Cancellation
from sbx.agent.core.run_recorder import RunKind, RunRecorder, RunTicket, recorded_call
from sbx.agent.core.workspace import ConversationSpec, Workspace
from sbx.sandbox.limits import Limits
from sbx.tools.context import OutputSink
from sbx.tools.outcome import ToolOutcome


@dataclass(frozen=True, kw_only=True)
class Program:
    """One program and who runs it, with what."""

    run_id: str
    """The run's id (audit, store, the sandbox's label)."""
    code: str
    """The Python source, as the caller sent it (the gate validates its size)."""
    principal: str
    """Who runs it, as the face authenticated them."""
    output: Path
    """Where its artifacts are copied."""
    data: tuple[Path, ...] = ()
    """Files mounted read-only at `/data/<name>`."""
    limits: Limits | None = None
    """The sandbox's limits for this program (at most the policy's); None: the policy's."""
    kind: RunKind = "execute"
    """How the recorder files it."""

    def spec(self) -> ConversationSpec:
        """The workspace's spec: owned by the run, its artifacts in `output`."""
        return ConversationSpec(principal=self.principal, data=self.data, output=self.output,
                                conversation_id=self.run_id)


def run_program(workspace: Workspace, program: Program, *, recorder: RunRecorder,
                cancel: Cancellation, on_output: OutputSink | None = None) -> ToolOutcome:
    """Admit, run and record `program` in `workspace` (removed before this returns)."""
    ticket = RunTicket(run_id=program.run_id, kind=program.kind, principal=program.principal,
                       output_dir=program.output, cancel=cancel)

    def work() -> ToolOutcome:
        with workspace:
            gate = workspace.open_gate(program.run_id, on_output=on_output)
            unhook = cancel.on_cancel(gate.cancel)
            try:
                return gate.call(name="execute_python",
                                 arguments=json.dumps({"code": program.code}), call_id="call-1")
            finally:
                unhook()
                gate.close(reason="cancelled" if cancel.cancelled else "completed")

    return recorded_call(recorder, ticket, work)
