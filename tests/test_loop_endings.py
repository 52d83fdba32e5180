"""Acceptance 3: each budget ends its run with its status; model errors are retried, then end it.

A budget end never carries an answer, and its message names the limit and the flag.
"""

from __future__ import annotations

import re
import socket
import threading
import time

import scripted_llm
from sbx.agent.core.loop import run
from sbx.agent.core.settings import Endpoint
from sbx.agent.model.client import ModelClient
from sbx.agent.testing.scripted_model import (
    HttpFailure,
    Reply,
    assistant,
    call,
    tool_call,
    tool_calls,
)
from sbx.tools.registry import tool
from scripted_llm import FAKE_KEY, SYSTEM, ask, policy, settings
from tools_support import events, make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


def _calc_gate(tmp_path, **kwargs):
    gate, log = make_gate(tmp_path, policy("calculate", **kwargs))
    return gate, log


def test_max_turns_ends_with_step_limit_before_the_extra_request(llm, tmp_path):
    llm.script([
        tool_call("calculate", expression="1 + 1"),
        Reply(content="I think it is 2", tool_calls=(call("calculate", expression="2"),)),
    ])
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate, agent_settings=settings(max_turns=2))

    assert (result.status, result.answer, result.turns) == ("step_limit", None, 2)
    assert result.message == "The next request would exceed max_turns of 2 (--max-turns)"
    assert len(llm.requests) == 2  # checked before spending: no third request was made


def test_wall_time_ends_with_time_limit_after_a_slow_tool(llm, tmp_path):
    @tool
    def slow() -> str:
        """Take a while."""
        time.sleep(0.6)  # longer than the whole budget; nothing here asserts how long
        return "finally"

    llm.script([tool_call("slow")])
    gate, log = make_gate(tmp_path, policy(custom=("slow",)), extra_tools=[slow])

    result = ask(llm, gate, agent_settings=settings(max_wall_time="0.5s"))

    assert (result.status, result.answer) == ("time_limit", None)
    assert re.fullmatch(
        r"The run reached max_wall_time of 0\.5 s after \d+\.\d s \(--max-time\)", result.message
    )
    # the call in flight was finished, not cut; the budget stopped the next request
    assert [(o["tool"], o["status"], o["text"]) for o in events(log, "outcome")] == [
        ("slow", "ok", "finally")
    ]
    assert len(llm.requests) == 1


def test_a_model_request_in_flight_is_cut_at_the_remaining_wall_time(llm, tmp_path):
    release = threading.Event()
    answered = threading.Event()

    def held(request):
        release.wait(60)  # held until the test lets go; the 60 s only stops a hung test
        answered.set()
        return assistant("too late")

    llm.script([held])
    gate, _ = _calc_gate(tmp_path)
    try:
        result = ask(llm, gate, agent_settings=settings(max_wall_time="0.5s", max_retries=0))
        # the run ended while the endpoint still held the request: it was cut, not waited out
        assert not answered.is_set()
    finally:
        release.set()

    assert (result.status, result.answer) == ("time_limit", None)
    assert re.fullmatch(
        r"The run reached max_wall_time of 0\.5 s after \d+\.\d s \(--max-time\)", result.message
    )
    assert len(llm.requests) == 1


def test_total_tokens_end_with_token_limit_before_the_request_that_would_pass_it(llm, tmp_path):
    llm.script([Reply(tool_calls=(call("calculate", expression="2 ** 10"),), usage=(900, 50))])
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate, agent_settings=settings(max_total_tokens=1000))

    assert (result.status, result.answer, result.usage.total_tokens) == ("token_limit", None, 950)
    assert "would exceed max_total_tokens of 1000; 950 used (--max-tokens)" in result.message
    assert len(llm.requests) == 1


def test_too_many_calls_in_one_reply_end_with_tool_limit_and_none_runs(llm, tmp_path):
    expressions = ("1", "2", "3")
    llm.script([tool_calls(*(call("calculate", expression=e) for e in expressions))])
    gate, log = _calc_gate(tmp_path)

    result = ask(llm, gate, agent_settings=settings(max_tool_calls_per_turn=2))

    assert (result.status, result.answer, result.tool_calls) == ("tool_limit", None, 0)
    assert result.message == (
        "The reply asked for 3 tool calls, over max_tool_calls_per_turn of 2 "
        "(--max-tool-calls-per-turn)"
    )
    assert events(log, "request") == []  # checked before spending: the gate saw nothing


def test_too_many_calls_in_the_run_end_with_tool_limit(llm, tmp_path):
    llm.script([
        tool_calls(call("calculate", expression="1"), call("calculate", expression="2")),
        tool_calls(call("calculate", expression="3"), call("calculate", expression="4")),
    ])
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate, agent_settings=settings(max_tool_calls=3))

    assert (result.status, result.tool_calls) == ("tool_limit", 2)
    assert result.message == (
        "2 more tool call(s) would exceed max_tool_calls of 3; 2 made (--max-tool-calls)"
    )


def test_a_gate_halt_ends_the_run_with_its_own_status(llm, tmp_path):
    llm.script([tool_calls(call("http_get", url="http://example.com/"), call("http_get", url="x"))])
    gate, _ = _calc_gate(tmp_path, quotas={"max_denied": 1})

    result = ask(llm, gate)

    assert result.status == "gate_halt"  # a policy event, never mistaken for a budget
    assert result.message.startswith("The tool gate halted the run: The run was halted by policy")


def test_a_server_error_twice_then_success_is_retried_by_the_sdk(llm, tmp_path):
    llm.script([HttpFailure(status=500), HttpFailure(status=502), assistant("fine")])
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate, agent_settings=settings(max_retries=2))

    assert (result.status, result.answer, result.turns) == ("completed", "fine", 1)
    assert [r.headers.get("x-stainless-retry-count") for r in llm.requests] == ["0", "1", "2"]


def test_a_server_that_always_fails_ends_with_model_error_and_a_clear_message(llm, tmp_path):
    llm.script([HttpFailure(status=503, message="overloaded, come back later")] * 3)
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate, agent_settings=settings(max_retries=2))

    assert (result.status, result.answer, result.turns) == ("model_error", None, 0)
    assert result.message == (
        f"Model request failed: the model endpoint {llm.base_url}/ answered HTTP 503 after 2 "
        "retries (--max-retries): overloaded, come back later"
    )


def test_an_unreachable_endpoint_ends_with_model_error_naming_it(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    chosen = settings(max_retries=0)
    endpoint = Endpoint(base_url=f"http://127.0.0.1:{port}/v1", api_key=FAKE_KEY, model="m")
    gate, _ = _calc_gate(tmp_path)

    with ModelClient.connect(endpoint, chosen) as model:
        result = run("q", model=model, gate=gate, settings=chosen, system_prompt=SYSTEM)

    assert result.status == "model_error"
    assert f"cannot reach the model endpoint http://127.0.0.1:{port}/v1/" in result.message
    assert "--base-url" in result.message


def test_a_reply_with_neither_text_nor_tools_is_a_model_error(llm, tmp_path):
    llm.script([Reply(content="  ")])
    gate, _ = _calc_gate(tmp_path)

    result = ask(llm, gate)

    assert (result.status, result.answer) == ("model_error", None)
    assert result.message == (
        "The model replied with neither text nor tool calls (finish_reason='stop')"
    )
