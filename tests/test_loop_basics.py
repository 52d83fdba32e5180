"""Acceptance 1: no tool; one execution; a traceback fixed on the second try; state across calls.

The model is scripted (real SDK, real HTTP); the gate, the audit log and the
sandbox session are real.
"""

from __future__ import annotations

import pytest

import scripted_llm
from sbx.agent.core.events import ToolResult
from sbx.agent.testing.scripted_model import ScriptedRequest, assistant, load_turns, tool_call
from scripted_llm import FIXTURES, ask, body, policy
from tools_support import events, make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model
sandbox = scripted_llm.sandbox


def test_a_question_that_needs_no_tool_is_answered_directly(llm, tmp_path):
    llm.script([assistant("Paris.")])
    gate, _ = make_gate(tmp_path, policy("calculate"))

    result = ask(llm, gate, "What is the capital of France?")

    assert (result.status, result.answer, result.turns, result.tool_calls) == (
        "completed", "Paris.", 1, 0
    )
    sent = llm.requests[0].body
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert sent["messages"][1]["content"] == "What is the capital of France?"
    assert [t["function"]["name"] for t in sent["tools"]] == ["calculate"]
    assert llm.requests[0].headers["authorization"] == f"Bearer {scripted_llm.FAKE_KEY}"


@pytest.mark.docker
def test_one_execution_is_run_in_the_sandbox_and_its_output_observed(llm, tmp_path, sandbox):
    def answer(request: ScriptedRequest):
        assert body(request.last_tool_message) == "[stdout]\n42"
        return assistant("It is 42.")

    llm.script([tool_call("execute_python", code="print(6 * 7)"), answer])
    gate, log = make_gate(tmp_path, policy("execute_python"), runner=sandbox)

    result = ask(llm, gate)

    assert (result.status, result.answer, result.tool_calls) == ("completed", "It is 42.", 1)
    assert [o["status"] for o in events(log, "outcome")] == ["ok"]


@pytest.mark.docker
def test_first_execution_raises_the_traceback_goes_back_and_the_second_succeeds(
    llm, tmp_path, sandbox
):
    llm.script(load_turns(FIXTURES / "fix_traceback.json"))
    gate, _ = make_gate(tmp_path, policy("execute_python"), runner=sandbox)
    seen = []

    result = ask(llm, gate, "What is the mean of 3, 4 and 5?", events=seen)

    assert (result.status, result.answer) == ("completed", "The mean is 4.0.")
    first_observation = llm.requests[1].last_tool_message
    assert first_observation.startswith(
        "Error: AttributeError: 'list' object has no attribute 'mean'"
    )
    assert "Traceback (most recent call last)" in first_observation
    assert "print(values.mean())" in first_observation  # the user's own frame, with the line
    assert body(llm.requests[2].last_tool_message) == "[stdout]\nmean: 4.0"
    results = [e for e in seen if isinstance(e, ToolResult)]
    assert [r.failed for r in results] == [True, False]


@pytest.mark.docker
def test_variables_persist_between_two_executions(llm, tmp_path, sandbox):
    llm.script([
        tool_call("execute_python", code="total = sum(range(10))"),
        tool_call("execute_python", code="print(total * 2)"),
        assistant("90"),
    ])
    gate, _ = make_gate(tmp_path, policy("execute_python"), runner=sandbox)

    result = ask(llm, gate)

    assert result.status == "completed"
    assert llm.requests[1].last_tool_message.startswith("(no output")
    assert body(llm.requests[2].last_tool_message) == "[stdout]\n90"
