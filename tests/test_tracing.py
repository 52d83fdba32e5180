"""OpenTelemetry spans of a run (GenAI conventions), read with the SDK's in-memory exporter.

A real conversation through the application core: real Docker, the real SDK
over HTTP to the scripted model, the real gate. The spans come from the core
(the loop and the gate) through the OpenTelemetry API, as they would under any
face; without an SDK they are no-ops (checked in a fresh interpreter).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import assistant, call, tool_call, tool_calls
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (installed once: OpenTelemetry allows no second one)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()  # spans of later tests are dropped, not kept in memory


def _by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


@pytest.mark.docker
def test_a_run_is_an_invoke_agent_span_with_chat_and_execute_tool_children(
    exporter, llm, tmp_path, engine
):
    exporter.clear()
    llm.script([
        tool_calls(call("execute_python", code="print(6 * 7)"), call("bad name!", x=1),
                   usage=(120, 30)),
        tool_call("execute_python", code="1 / 0"),
        assistant("The answer is 42.", usage=(200, 10)),
    ])
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    with App.open(load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app:
        with app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "c.jsonl") as conv:
            result = conv.ask("What is six times seven?")
    assert result.status == "completed"
    spans = exporter.get_finished_spans()

    (agent,) = _by_name(spans, "invoke_agent sbx")
    assert agent.kind == SpanKind.INTERNAL
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == "sbx"
    assert agent.attributes["gen_ai.provider.name"] == "openai"
    assert agent.attributes["gen_ai.request.model"] == "scripted"
    assert agent.attributes["sbx.run_id"] == result.run_id
    assert agent.attributes["sbx.run.status"] == "completed"
    assert agent.attributes["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens >= 320
    assert agent.attributes["gen_ai.usage.output_tokens"] == result.usage.completion_tokens
    assert agent.parent is None

    chats = _by_name(spans, "chat scripted")
    assert len(chats) == 3
    first = chats[0]
    assert first.kind == SpanKind.CLIENT
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.request.model"] == "scripted"
    assert first.attributes["gen_ai.usage.input_tokens"] == 120
    assert first.attributes["gen_ai.usage.output_tokens"] == 30
    assert first.attributes["server.address"] == "127.0.0.1"
    assert tuple(chats[-1].attributes["gen_ai.response.finish_reasons"]) == ("stop",)

    ok, failed = _by_name(spans, "execute_tool execute_python")
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
    assert ok.attributes["gen_ai.tool.name"] == "execute_python"
    assert ok.attributes["gen_ai.tool.type"] == "function"
    assert ok.attributes["gen_ai.tool.call.id"]
    assert ok.attributes["sbx.tool.decision"] == "allowed"
    assert ok.attributes["sbx.execution.exit_code"] == 0
    assert ok.status.status_code == StatusCode.UNSET
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["error.type"] == "execution_error"

    (unknown,) = _by_name(spans, "execute_tool")  # the model's tool name is no span name
    assert unknown.attributes["gen_ai.tool.name"] == "(unknown)"
    assert unknown.attributes["error.type"] == "unknown"
    assert unknown.attributes["sbx.tool.decision"] == "unknown"

    for child in [*chats, ok, failed, unknown]:  # tools ran on the dispatcher's threads
        assert child.parent is not None and child.parent.span_id == agent.context.span_id
        assert child.context.trace_id == agent.context.trace_id
    shown = json.dumps([dict(span.attributes or {}) for span in spans])
    for payload in ("6 * 7", "six times seven", "The answer is", "ZeroDivisionError", "bad name"):
        assert payload not in shown  # names and figures, never content


SNIPPET = """
import os, sys
from sbx.agent.core.tracing import TracingError, configure_from_env
from sbx.tools.tracing import TRACER
try:
    provider = configure_from_env(os.environ)
except TracingError as exc:
    print("error:", exc)
    sys.exit(0)
with TRACER.start_as_current_span("probe") as span:
    print("recording:", span.is_recording())
if provider is not None:
    provider.shutdown()
"""


def _probe(exporter: str | None) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    if exporter is not None:
        env["OTEL_TRACES_EXPORTER"] = exporter
    done = subprocess.run([sys.executable, "-c", SNIPPET], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_spans_are_no_ops_until_an_exporter_is_asked_for():
    assert _probe(None).strip() == "recording: False"
    assert _probe("none").strip() == "recording: False"
    console = _probe("console")
    assert "recording: True" in console and '"name": "probe"' in console
    assert '"service.name": "sbx"' in console
    assert "sbx exports to otlp or console" in _probe("jaeger")
