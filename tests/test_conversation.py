"""A conversation through the application core: follow-ups share one sandbox and one record.

Real Docker, the real SDK over HTTP to the scripted server, the real gate and
audit log; only the model is scripted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec, settle
from sbx.agent.core.events import Event, RunEnd
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.config import RUN_ID_LABEL
from sbx.tools.audit_verify import verify_log
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


def _app(tmp_path: Path) -> App:
    return App.open(
        load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE
    )


def _container(conversation) -> str | None:
    session = conversation.workspace._session
    return session.container_id if session is not None else None


def _endpoint(llm) -> Endpoint:
    return Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")


@pytest.mark.docker
def test_a_follow_up_uses_the_first_runs_variable_in_the_same_sandbox(llm, tmp_path, engine):
    llm.script([
        tool_call("execute_python", code="total = sum(range(10))\nprint(total)"),
        assistant("The total is 45."),
        tool_call("execute_python", code="print(total * 2)"),
        assistant("Twice the total is 90."),
    ])
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    seen: list[Event] = []
    with _app(tmp_path) as app:
        conversation = app.conversation(
            spec, endpoint=_endpoint(llm), transcript=tmp_path / "conv.jsonl"
        )
        with conversation:
            conversation.subscribe(seen.append)
            first = conversation.ask("What is the sum of 0..9?")
            container = _container(conversation)
            second = conversation.ask("And twice that?")
            same = _container(conversation)
        assert app.pool is not None and app.pool.reaper.wait_idle(timeout=60)
        gone = engine.api.containers(
            all=True, filters={"label": f"{RUN_ID_LABEL}={first.run_id}"}
        )

    assert (first.status, first.answer) == ("completed", "The total is 45.")
    assert (second.status, second.answer) == ("completed", "Twice the total is 90.")
    assert container is not None and same == container  # one container served both runs
    assert gone == []  # closing the conversation removed it
    follow_up = llm.requests[3]
    assert follow_up.last_tool_message.startswith("[stdout]\n90")  # `total` was still defined
    assert "The total is 45." in json.dumps(follow_up.body["messages"])  # it remembers

    lines = [json.loads(line) for line in (tmp_path / "conv.jsonl").read_text().splitlines()]
    assert {line["conversation_id"] for line in lines} == {conversation.id}
    ends = [line for line in lines if line["type"] == "run_end"]
    assert [e["run_id"] for e in ends] == [first.run_id, second.run_id]
    assert first.run_id != second.run_id
    assert [e.run_id for e in seen if isinstance(e, RunEnd)] == [first.run_id, second.run_id]

    report = verify_log(tmp_path / "audit.jsonl", key=None)
    assert report.ok, report
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    starts = [r for r in audit if r["event"] == "run_start"]
    assert [r["run_id"] for r in starts] == [first.run_id, second.run_id]
    assert {r["data"]["conversation_id"] for r in starts} == {conversation.id}
    assert {r["data"]["principal"] for r in audit} == {"os:tester"}


@pytest.mark.docker
def test_reset_forgets_the_variables_and_the_messages(llm, tmp_path):
    llm.script([
        tool_call("execute_python", code="x = 1"),
        assistant("Set."),
        tool_call("execute_python", code="print(x)"),
        assistant("It is gone."),
    ])
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    with _app(tmp_path) as app, app.conversation(
        spec, endpoint=_endpoint(llm), transcript=tmp_path / "c.jsonl"
    ) as conversation:
        conversation.ask("Set x.")
        conversation.reset()
        after = conversation.ask("Print x.")
    assert after.status == "completed"
    assert "NameError" in llm.requests[3].last_tool_message
    assert "Set." not in json.dumps(llm.requests[2].body["messages"])


def test_settle_answers_every_call_a_budget_left_unanswered() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "x", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "done"},
    ]
    settled = settle(messages, "tool_limit")
    assert [m.get("tool_call_id") for m in settled[3:]] == ["a", "b"]
    assert settled[-1]["content"] == "[sbx] Not run: the run ended before this call was made " \
        "(tool_limit)."
