"""`ToolOutcome`: what one call through the gate produced, typed for every face that reads it.

The loop, the transcript, MCP and the service read outcomes; only the gate
makes them (`sbx.tools.gate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sbx.sandbox.result import Artifact, ExecutionResult

CallStatus = Literal["ok", "error", "invalid", "denied", "unknown", "halted", "cancelled"]
"""How one call went at the gate (a run's ending, `sbx.agent.core.state.Status`, is another)."""


@dataclass(kw_only=True, frozen=True)
class ToolOutcome:
    """What one tool call produced, for the agent loop and the transcript."""

    call_id: str
    """The `tool_call_id` the answering message carries, as the caller gave it."""
    audit_id: str
    """The id the gate gave the call (`<run_id>-c<n>`): the audit records' `call_id`."""
    name: str
    """The tool name as the model sent it."""
    status: CallStatus
    """`ok`; `error` (the tool failed); `invalid`/`denied`/`unknown` (not run); `halted`;
    `cancelled` (cancelled while it ran: its result is not trusted)."""
    text: str
    """The exact observation the model receives (from the one renderer)."""
    execution: ExecutionResult | None = None
    """The sandbox's result, when the call ran code (`execute_python`)."""
    value: object = None
    """Any other tool's structured value, kept for the caller, never sent as is."""
    duration_s: float = 0.0
    """Wall-clock seconds from the call's arrival at the gate to its outcome."""
    rule: str | None = None
    """For denials and halts: the dotted policy key that decided."""

    @property
    def failed(self) -> bool:
        """Refused, failed, or ran code that raised, timed out or was killed."""
        return self.status != "ok" or (self.execution is not None and not self.execution.ok)

    @property
    def artifacts(self) -> tuple[Artifact, ...]:
        """Files the execution copied out of `/output` (none for other tools)."""
        return tuple(self.execution.artifacts) if self.execution is not None else ()


CANCELLED_TEXT = "Cancelled while it ran; the sandbox was removed, so its variables are gone."
