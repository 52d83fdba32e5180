"""OpenTelemetry spans of a run, following the GenAI semantic conventions; no-op without an SDK.

    invoke_agent sbx        one run of the loop (`traced_run` wraps `agent.loop.run`)
      chat {model}          each model request (`traced_complete`, retries included)
      execute_tool {tool}   each call through the gate (`sbx.tools.tracing`)

The spans are made with the OpenTelemetry API alone, from the core, so every
face (the CLI, `sbx serve`, MCP) traces the same way once a tracer provider is
installed; until then each span is a no-op. `configure_from_env` installs the
SDK's provider when `OTEL_TRACES_EXPORTER` asks for one (`pip install
sbx[otel]`); nothing is exported otherwise.

Spans carry names, ids and figures (`gen_ai.request.model`, token usage,
finish reasons, the run's status), never content: no prompt, no answer, no
tool arguments, no output. The endpoint appears only as `server.address` and
`server.port`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from sbx.agent.core.state import RunResult
from sbx.agent.model.boundary import RequestGuard
from sbx.agent.model.cancellation import Cancellation
from sbx.agent.model.client import ModelClient, ModelReply, RetryHook
from sbx.sandbox.errors import SbxError
from sbx.tools.tracing import TRACER, failed

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

P = ParamSpec("P")

AGENT_NAME = "sbx"
PROVIDER = "openai"
"""`gen_ai.provider.name`: sbx speaks the OpenAI Chat Completions API to any endpoint; the
conventions say to name the API's provider then, with `server.address` telling which one."""
EXPORTERS = ("otlp", "console")


class TracingError(SbxError):
    """Tracing was asked for (`OTEL_TRACES_EXPORTER`) but cannot be set up."""


def model_attributes(model: ModelClient) -> dict[str, Any]:
    """What every span of a model names: the provider, the requested model, the server."""
    attributes: dict[str, Any] = {
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.system": PROVIDER,  # the older name of the same attribute, still widely read
        "gen_ai.request.model": model.model,
    }
    try:
        parts = urlsplit(model.base_url)
        if parts.hostname:
            attributes["server.address"] = parts.hostname
            attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a malformed URL names no server; the request itself will say why
        pass
    return attributes


def traced_run(run: Callable[P, RunResult]) -> Callable[P, RunResult]:
    """Wrap `agent.loop.run` in an `invoke_agent sbx` span; the run's totals go on it."""

    @functools.wraps(run)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> RunResult:
        model = kwargs.get("model")
        gate = kwargs.get("gate")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
        }
        if isinstance(model, ModelClient):
            attributes.update(model_attributes(model))
        run_id = getattr(gate, "run_id", None)
        if isinstance(run_id, str):
            attributes["sbx.run_id"] = run_id
        with TRACER.start_as_current_span(
            f"invoke_agent {AGENT_NAME}", kind=SpanKind.INTERNAL, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                result = run(*args, **kwargs)
            except BaseException as exc:  # an operator error stopped the run
                failed(span, type(exc).__name__)
                raise
            record_result(span, result)
            return result

    return wrapper


def record_result(span: Span, result: RunResult) -> None:
    """The run's token totals and how it ended."""
    if not span.is_recording():
        return
    span.set_attributes({
        "gen_ai.usage.input_tokens": result.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": result.usage.completion_tokens,
        "sbx.run.status": result.status,
        "sbx.run.turns": result.turns,
        "sbx.run.tool_calls": result.tool_calls,
    })


def traced_complete(model: ModelClient, messages: Sequence[dict[str, Any]],
                    tools: Sequence[dict[str, Any]], *, timeout: float, guard: RequestGuard,
                    cancel: Cancellation | None = None,
                    on_retry: RetryHook | None = None) -> ModelReply:
    """`model.complete(...)` inside a `chat {model}` span; errors propagate unchanged."""
    attributes = {"gen_ai.operation.name": "chat", **model_attributes(model)}
    with TRACER.start_as_current_span(
        f"chat {model.model}", kind=SpanKind.CLIENT, attributes=attributes,
        record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            reply = model.complete(messages, tools, timeout=timeout, guard=guard, cancel=cancel,
                                   on_retry=on_retry)
        except BaseException as exc:
            failed(span, type(exc).__name__)
            raise
        if span.is_recording():
            span.set_attributes({
                "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
                "gen_ai.response.finish_reasons": [reply.finish_reason or ""],
                "sbx.usage.estimated": reply.usage.estimated,
            })
        return reply


def configure_from_env(environ: Mapping[str, str]) -> TracerProvider | None:
    """Install the SDK's tracer provider when `OTEL_TRACES_EXPORTER` is `otlp` or `console`.

    Unset or `none`: nothing is installed and every span stays a no-op. The
    exporter reads the standard variables itself (`OTEL_EXPORTER_OTLP_ENDPOINT`,
    `OTEL_SERVICE_NAME`, ...). Returns the provider, for `shutdown()` (which
    flushes) when the process ends; raises `TracingError` when the SDK or the
    exporter is not installed or the exporter is not one of `EXPORTERS`.
    """
    wanted = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if wanted in ("", "none"):
        return None
    if wanted not in EXPORTERS:
        raise TracingError(f"OTEL_TRACES_EXPORTER={wanted[:40]!r}: sbx exports to "
                           f"{' or '.join(EXPORTERS)} (or none)")
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        if wanted == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise TracingError(f"OTEL_TRACES_EXPORTER={wanted} needs the OpenTelemetry SDK and "
                           f"exporter: pip install 'sbx[otel]' ({exc.name} is missing)") from None
    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or "sbx"})
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter() if wanted == "otlp" else ConsoleSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider
