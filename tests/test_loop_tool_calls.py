"""Acceptance 2: several calls in one reply; invalid JSON; an unknown tool; a denied tool.

Each is a correct observation, matched to its `tool_call_id`, and the run goes on.
"""

from __future__ import annotations

import threading

import pytest

import scripted_llm
from sbx.agent.testing.scripted_model import (
    ScriptedRequest,
    assistant,
    call,
    load_turns,
    tool_calls,
)
from sbx.tools.registry import tool
from scripted_llm import FIXTURES, ask, body, policy
from tools_support import events, make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model
sandbox = scripted_llm.sandbox


def _reply_messages(request: ScriptedRequest) -> list[dict]:
    """The assistant message with tool calls and everything after it."""
    messages = request.messages
    start = max(i for i, m in enumerate(messages) if m.get("tool_calls"))
    return messages[start:]


def test_two_calls_in_one_reply_are_answered_with_both_ids_in_order(llm, tmp_path):
    llm.script(load_turns(FIXTURES / "two_calls_one_reply.json"))
    gate, log = make_gate(tmp_path, policy("calculate", "list_data_files"))

    result = ask(llm, gate)

    assert (result.status, result.tool_calls) == ("completed", 2)
    assistant_message, *answers = _reply_messages(llm.requests[1])
    assert [c["id"] for c in assistant_message["tool_calls"]] == ["call_first", "call_second"]
    assert [(m["role"], m["tool_call_id"]) for m in answers] == [
        ("tool", "call_first"), ("tool", "call_second")
    ]
    assert answers[0]["content"] == "42"
    assert answers[1]["content"] == "No data files were given for this run."
    # they ran concurrently: the audit log records them as they finished, in any order
    # keyed by the ids the gate gave them; the model's ids are data beside them
    assert sorted(o["call_id"] for o in events(log, "outcome")) == ["run-test-c1", "run-test-c2"]
    requests = events(log, "request")
    assert [(r["call_id"], r["model_call_id"]) for r in requests] == [
        ("run-test-c1", "call_first"), ("run-test-c2", "call_second")
    ]


def test_calls_without_a_shared_sandbox_run_concurrently_and_answer_in_call_order(llm, tmp_path):
    finished: list[str] = []
    # raises BrokenBarrierError if the calls ran one after the other; the 60 s only stops a
    # hung test
    both_started = threading.Barrier(2, timeout=60)
    b_done = threading.Event()

    @tool
    def slow(label: str) -> str:
        """Wait until the other call has started too, then return the label.

        Args:
            label: Echoed back.
        """
        both_started.wait()
        if label == "a":
            assert b_done.wait(60), "b never finished"  # "a" finishes last, by construction
        finished.append(label)
        if label == "b":
            b_done.set()
        return label

    llm.script([
        tool_calls(call("slow", "call_a", label="a"), call("slow", "call_b", label="b")),
        assistant("done"),
    ])
    gate, _ = make_gate(tmp_path, policy(custom=("slow",)), extra_tools=[slow])

    result = ask(llm, gate)

    assert result.status == "completed"
    assert finished == ["b", "a"]
    _, *answers = _reply_messages(llm.requests[1])
    assert [(m["tool_call_id"], m["content"]) for m in answers] == [
        ("call_a", "a"), ("call_b", "b")
    ]


@pytest.mark.docker
def test_executions_in_one_reply_share_the_session_and_run_in_order(llm, tmp_path, sandbox):
    llm.script([
        tool_calls(
            call("execute_python", "call_1", code="import time; time.sleep(0.3); x = 20"),
            call("execute_python", "call_2", code="print(x + 1)"),
            call("execute_python", "call_3", code="print(x + 2)"),
        ),
        assistant("21 and 22"),
    ])
    gate, _ = make_gate(tmp_path, policy("execute_python"), runner=sandbox)

    result = ask(llm, gate)

    assert result.status == "completed"
    _, *answers = _reply_messages(llm.requests[1])
    assert [(m["tool_call_id"], body(m["content"])) for m in answers] == [
        ("call_1", "(no output: the code ran without error; print() what you need to see)"),
        ("call_2", "[stdout]\n21"),
        ("call_3", "[stdout]\n22"),
    ]


def test_invalid_json_unknown_and_denied_tools_are_observations_and_the_run_goes_on(
    llm, tmp_path
):
    llm.script(load_turns(FIXTURES / "model_mistakes.json"))
    gate, log = make_gate(tmp_path, policy("calculate"))
    seen = []

    result = ask(llm, gate, events=seen)

    assert (result.status, result.answer) == ("completed", "I could only use calculate.")
    observations = {
        e.call_id: (e.status, e.content) for e in seen if e.type == "tool_result"
    }
    status, text = observations["call_bad_json"]
    assert status == "invalid"
    assert text.startswith("1 validation error for tool 'calculate'") and "json" in text.lower()
    assert text.endswith("Fix the errors and try again.")
    assert observations["call_unknown"] == (
        "unknown", "Unknown tool name: 'run_shell'. Available tools: calculate"
    )
    status, text = observations["call_denied"]
    assert status == "denied"
    assert text.startswith(
        "Call to 'preview_data_file' denied by policy rule tools.preview_data_file.enabled"
    )
    assert "Available tools: calculate" in text
    # what the model read is what the transcript events and the audit log hold
    assert llm.requests[1].last_tool_message == observations["call_bad_json"][1]
    assert llm.requests[3].last_tool_message == observations["call_denied"][1]
    model_ids = {r["call_id"]: r["model_call_id"] for r in events(log, "request")}
    decisions = {model_ids[d["call_id"]]: d["decision"] for d in events(log, "decision")}
    assert decisions == {
        "call_bad_json": "invalid", "call_unknown": "unknown", "call_denied": "denied"
    }
