"""Execute one program as a core operation: gated and audited exactly like a model's call.

`sbx exec`, `POST /v1/execute` and MCP's one-shot execution come here. The
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
from dataclasses import dataclass, field
from pathlib import Path

from sbx.agent.core.app import OUTPUT_DIR, App
from sbx.agent.core.limits_request import LimitsRequest
from sbx.agent.core.workspace import Workspace, WorkspaceSpec
from sbx.sandbox.limits import Limits
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import new_run_id
from sbx.tools.context import OutputSink
from sbx.tools.gate import ToolGate
from sbx.tools.outcome import ToolOutcome

CALL_ID = "call-1"
"""The one call's id in the run (the audit's call id is the gate's `<run_id>-c1`)."""


@dataclass(frozen=True, kw_only=True)
class ProgramSpec:
    """One program to run: whose it is, what it reads, where its files go, under which limits."""

    code: str
    """Python source; the gate refuses more than the limits' `max_code_bytes`."""
    principal: str
    """Who runs it, as the face authenticated them (the OS user, an API key's principal)."""
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


def execute_program(
    app: App,
    spec: ProgramSpec,
    *,
    on_output: OutputSink | None = None,
    watch: Callable[[ToolGate], None] | None = None,
) -> ProgramRun:
    """Run `spec.code` once through the gate in a sandbox of its own, then remove the sandbox.

    Raises `LimitRefused` for limits above the policy (nothing runs, nothing is
    audited) and `SandboxError` when sbx itself could not run it (engine, image,
    runtime, data, host capacity). `on_output(call_id, stream, text)` gets the
    output while the code runs; `watch` gets the gate as soon as it is open
    (a face that may cancel the call keeps it: `gate.cancel()`).
    """
    config = app.config.limited(spec.limits)
    run_id = spec.run_id or new_run_id()
    output = spec.output or OUTPUT_DIR / run_id
    workspace = Workspace(
        spec=WorkspaceSpec(owner_id=run_id, principal=spec.principal, data=spec.data,
                           output=output, one_shot=True),  # stdout exactly the program's
        config=config, audit=app.audit, pool=app.pool, image=app.image,
    )
    with workspace:
        gate = workspace.open_gate(run_id, on_output=on_output)
        reason = "interrupted"
        try:
            if watch is not None:
                watch(gate)
            outcome = gate.call(name="execute_python", arguments=json.dumps({"code": spec.code}),
                                call_id=CALL_ID)
            reason = "completed"
        except BaseException:
            workspace.discard()  # the code dies with its sandbox; run_end follows its outcome
            raise
        finally:
            gate.close(reason=reason)
    return ProgramRun(run_id=run_id, outcome=outcome, limits=config.limits, output_dir=output)
