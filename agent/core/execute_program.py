"""Execute one program as a core operation: gated and audited exactly like a model's call.

`sbx exec` and `POST /v1/execute` come here through the door's `App.execute`
(MCP's executions are its tool sessions' calls, `sbx.agent.core.tool_session`). The
program is one `execute_python` call through the tool gate, in a workspace
opened for it and removed after it, so the policy applies as it does to a
model (a policy without `execute_python` denies it, and the denial is
audited) and the audit log gets the run's records under the caller's
principal: `run_start` names the principal and the sandbox limits in force,
the network mode and the runtime included; then the request, the decision,
the outcome, and `run_end`. `sbx audit verify` checks them like any run's.

The limits are the policy's, tightened by the face's `LimitsRequest` and
never loosened (`LimitRefused`, before anything runs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sbx.agent.core.limits_request import LimitsRequest
from sbx.agent.core.run_recorder import NoRecorder, RunRecorder, recorded_call
from sbx.agent.core.workspace import Workspace
from sbx.agent.model.cancellation import Cancellation
from sbx.sandbox.limits import Limits
from sbx.sandbox.result import ExecutionResult
from sbx.tools.context import OutputSink
from sbx.tools.gate import ToolGate
from sbx.tools.outcome import ToolOutcome

CANCELLED_BEFORE = "Cancelled before it ran: the code did not start."
CALL_ID = "call-1"
"""The one call's id in the run (the audit's call id is the gate's `<run_id>-c1`)."""


@dataclass(frozen=True, kw_only=True)
class ProgramSpec:
    """One program to run: whose it is, what it reads, where its files go, under which limits."""

    code: str
    """Python source; the gate refuses more than the limits' `max_code_bytes`."""
    principal: str
    """Who runs it, as the face authenticated them (the OS user, an API key's principal)."""
    team: str | None = None
    """The principal's team (audited beside it, and the run's cost counts toward it)."""
    data: tuple[Path, ...] = ()
    """Files and directories mounted read-only at `/data/<name>`."""
    output: Path | None = None
    """Where artifacts are copied; default `sbx-output/<run_id>`, new for each run."""
    limits: LimitsRequest = field(default_factory=LimitsRequest)
    """Per-run limits asked for; applied only below the policy's `[sandbox]` ceiling."""
    run_id: str | None = None
    """The run's id (audit, output directory); default a new one."""


@dataclass(frozen=True, kw_only=True)
class ProgramRun:
    """What one program run produced, and under which limits."""

    run_id: str
    """The audit run id of its records."""
    outcome: ToolOutcome
    """The gate's outcome: `ok` with the execution, or why it did not run (`denied`, ...)."""
    limits: Limits
    """The limits it ran under (the policy's, tightened as requested)."""
    output_dir: Path
    """Where its artifacts were copied."""

    @property
    def execution(self) -> ExecutionResult | None:
        """The sandbox's result; None when the gate refused the program or it could not finish."""
        return self.outcome.execution


def run_program(
    workspace: Workspace,
    spec: ProgramSpec,
    *,
    on_output: OutputSink | None = None,
    watch: Callable[[ToolGate], None] | None = None,
    recorder: RunRecorder | None = None,
    cancel: Cancellation | None = None,
) -> ProgramRun:
    """Run `spec.code` once through the gate in `workspace` (one-shot), then remove it.

    `App.execute` opens the workspace (its id is the run's) and comes here; see it
    for what each argument does.
    """
    token = cancel or Cancellation()
    ticket = workspace.ticket("execute", run_id=workspace.owner_id, cancel=token)
    run_id = ticket.run_id

    def work() -> ToolOutcome:
        with workspace:
            gate = workspace.open_gate(run_id, on_output=on_output)
            unhook = token.on_cancel(gate.cancel)
            reason = "interrupted"
            try:
                if watch is not None:
                    watch(gate)
                outcome = gate.call(name="execute_python",
                                    arguments=json.dumps({"code": spec.code}), call_id=CALL_ID)
                reason = "cancelled" if token.cancelled else "completed"
                if token.cancelled and outcome.execution is None:  # cancelled before it ran
                    outcome = replace(outcome, status="cancelled", text=CANCELLED_BEFORE)
                return outcome
            except BaseException:
                workspace.discard()  # the code dies with its sandbox; run_end follows its outcome
                raise
            finally:
                unhook()
                gate.close(reason=reason)

    tariff = workspace.config.settings.prices.tariff("")  # no model: sandbox time alone
    outcome = recorded_call(recorder or NoRecorder(), ticket, work, tariff)
    return ProgramRun(run_id=run_id, outcome=outcome, limits=workspace.config.limits,
                      output_dir=workspace.output_dir(run_id))
