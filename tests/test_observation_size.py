"""Observations sized for a model: one flood of output neither ends the run nor the conversation.

The model reads a bounded observation (head, a cut marker, tail); the transcript
and provenance keep the whole output; earlier runs' observations are shortened
before any budget check. Real Docker, the real SDK over HTTP to the scripted
server; only the model is scripted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.compaction import shorten_observations
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.core.state import RunState
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.result import ExecutionResult
from sbx.tools.observation import render_execution
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

FLOOD = "for i in range(16384):\n    print(f'{i:06d} ' + 'x' * 57)\n"
"""1 MiB of stdout (16384 lines of 64 bytes), the size of the default stdout cap."""


def test_a_long_output_is_cut_to_head_marker_and_tail_with_its_headers_intact() -> None:
    stdout = "".join(f"row {i}\n" for i in range(100_000))
    result = ExecutionResult(stdout=stdout, stderr="warning\n" * 5000, exit_code=0)
    text = render_execution(result, max_chars=8000)
    assert len(text) <= 8000
    assert text.startswith("[stdout]\nrow 0\nrow 1\n")
    assert "row 99999" in text  # the tail, where a log ends, is kept
    assert "\n[stderr]\nwarning\n" in text  # sections stay parseable
    assert "characters (" in text and "of stdout cut to fit" in text
    assert "of stderr cut to fit" in text
    whole = render_execution(result)
    assert "row 50000" in whole and len(whole) > 500_000  # unbounded without max_chars


def test_short_output_is_rendered_exactly_as_before() -> None:
    result = ExecutionResult(stdout="42\n", exit_code=0)
    assert render_execution(result, max_chars=4000) == render_execution(result)


def test_earlier_runs_observations_are_shortened_before_the_budget_check() -> None:
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c1", "content": "[stdout]\n" + "y" * 1_000_000},
        {"role": "assistant", "content": "done"},
    ]
    state = RunState(run_id="r", started=0.0, messages=[*history, {"role": "user",
                     "content": "next"}], question="next", history=len(history))
    done = shorten_observations(state, limit_tokens=10_000, tools=[])
    assert done == [3]
    assert len(state.messages[3]["content"]) < 2000


def _app(tmp_path: Path) -> App:
    return App.open(
        load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE
    )


@pytest.mark.docker
def test_a_one_mebibyte_print_then_a_follow_up_in_the_same_conversation(llm, tmp_path):
    llm.script([
        tool_call("execute_python", code=FLOOD),
        assistant("The last row is 16383."),
        tool_call("execute_python", code="print(6 * 7)"),
        assistant("The answer is 42."),
    ])
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    transcript = tmp_path / "conv.jsonl"
    with _app(tmp_path) as app:
        bound = app.config.settings.observation_tokens * 4
        with app.conversation(spec, endpoint=endpoint, transcript=transcript) as conversation:
            first = conversation.ask("Print every row.")
            second = conversation.ask("And what is six times seven?")

    assert (first.status, second.status) == ("completed", "completed"), first.message
    assert second.answer == "The answer is 42."
    seen = llm.requests[1].last_tool_message
    assert len(seen) <= bound  # the model read a bounded observation ...
    assert seen.startswith("[stdout]\n000000 ") and "016383 " in seen  # head and tail
    assert "of stdout cut to fit the model's observation size" in seen
    for request in llm.requests:  # ... and no request carried the flood
        assert len(json.dumps(request.body["messages"])) < 4 * bound
    lines = [json.loads(line) for line in transcript.read_text().splitlines()]
    results = [line for line in lines if line["type"] == "tool_result"]
    kept = results[0]["execution"]["stdout"]
    assert len(kept) > 1_000_000 and "008000 " in kept  # the user keeps all of it
    assert results[0]["content"] == seen  # the transcript shows what the model read


@pytest.mark.docker
def test_an_mcp_client_reads_the_same_bounded_observation(tmp_path, engine):
    import anyio

    from mcp_support import mcp_client, text_of

    async def scenario() -> str:
        async with mcp_client(tmp_path) as client:
            result = await client.call_tool("execute_python", {"code": FLOOD})
            return text_of(result)

    text = anyio.run(scenario)
    assert "of stdout cut to fit the model's observation size" in text
    assert len(text) < 4 * 4000 + 2000  # the bound, plus MCP's own reset note and footer
    assert "016383 " in text
