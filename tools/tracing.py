"""`execute_tool {tool}` spans (OpenTelemetry GenAI conventions) around every call through the gate.

The gate's `call` is wrapped by `traced_call`, so every face (the agent loop,
`/v1/execute`, MCP) traces its tool calls the same way. Only the OpenTelemetry
API is used: without an SDK and a configured tracer provider the span is a
no-op that costs a few microseconds (`sbx.agent.core.tracing.configure_from_env`
installs one for `sbx serve`).

A span carries names and figures, never payloads: no arguments, no
observation, no stdout. Everything the model chose is bounded first: a tool
name that is not a plain identifier is shown as `(invalid)`, the model's call
id is cut at 128 characters, and a call to an unknown tool is named
`execute_tool` without the name, so a model cannot mint span names.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from sbx.tools.outcome import ToolOutcome

if TYPE_CHECKING:
    from sbx.tools.gate import ToolGate

TRACER = trace.get_tracer("sbx")
"""The tracer of every sbx span (a proxy: it follows whatever provider is installed later)."""

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_ID_CHARS = 128
REFUSED = frozenset({"invalid", "denied", "unknown", "halted"})

P = ParamSpec("P")
G = TypeVar("G", bound="ToolGate")


def bounded_name(name: str) -> str:
    """A tool name fit for a span name and an attribute: itself, or `(invalid)`."""
    return name if _NAME.match(name) else "(invalid)"


def traced_call(
    call: Callable[Concatenate[G, P], ToolOutcome],
) -> Callable[Concatenate[G, P], ToolOutcome]:
    """Wrap `ToolGate.call` in an `execute_tool {name}` span (see the module docstring)."""

    @functools.wraps(call)
    def wrapper(gate: G, /, *args: P.args, **kwargs: P.kwargs) -> ToolOutcome:
        name = bounded_name(str(kwargs.get("name", "")))
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": str(kwargs.get("call_id", ""))[:MAX_ID_CHARS],
            "sbx.run_id": gate.run_id,
        }
        with TRACER.start_as_current_span(
            f"execute_tool {name}", kind=SpanKind.INTERNAL, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                outcome = call(gate, *args, **kwargs)
            except BaseException as exc:  # an operator error (or a cancel) leaves the gate
                failed(span, type(exc).__name__)
                raise
            record_outcome(span, outcome)
            return outcome

    return wrapper


def record_outcome(span: Span, outcome: ToolOutcome) -> None:
    """The decision, the status and an execution's figures; an error status when it failed."""
    if not span.is_recording():
        return
    if outcome.status == "unknown":
        span.update_name("execute_tool")
        span.set_attribute("gen_ai.tool.name", "(unknown)")
    attributes: dict[str, Any] = {
        "sbx.tool.status": outcome.status,
        "sbx.tool.decision": outcome.status if outcome.status in REFUSED else "allowed",
        "sbx.tool.audit_id": outcome.audit_id,
    }
    if outcome.rule:
        attributes["sbx.tool.rule"] = outcome.rule[:MAX_ID_CHARS]
    execution = outcome.execution
    if execution is not None:
        attributes["sbx.execution.exit_code"] = execution.exit_code
        attributes["sbx.execution.duration_s"] = execution.duration_s
        if execution.cpu_seconds is not None:
            attributes["sbx.execution.cpu_seconds"] = execution.cpu_seconds
        if execution.peak_memory_bytes is not None:
            attributes["sbx.execution.peak_memory_bytes"] = execution.peak_memory_bytes
    span.set_attributes(attributes)
    if outcome.failed:
        failed(span, error_type(outcome))


def error_type(outcome: ToolOutcome) -> str:
    """A low-cardinality `error.type`: the gate's status, or how the execution failed."""
    execution = outcome.execution
    if outcome.status != "ok" or execution is None:
        return outcome.status
    if execution.timed_out:
        return "timeout"
    if execution.oom_killed:
        return "oom_killed"
    return "execution_error"


def failed(span: Span, kind: str) -> None:
    """Mark the span failed with `error.type` (and no message: messages may carry payloads)."""
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR))
