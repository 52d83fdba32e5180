"""Every refused call counts toward `quotas.max_denied`, and arguments may arrive as an object.

Unknown tools and invalid arguments are a model probing or flailing just as
denials are: a run of them must halt like a run of denials does.
"""

from __future__ import annotations

import json

import pytest

import scripted_llm
from sbx.agent.testing.scripted_model import call, tool_calls
from scripted_llm import ask, settings
from tools_support import events, make_gate, policy_from

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

POLICY = policy_from({"tools": {"calculate": {"enabled": True}}, "quotas": {"max_denied": 3}})
REFUSED = {
    "unknown": ("run_shell", '{"cmd": "id"}'),
    "invalid": ("calculate", '{"expression": '),
    "denied": ("preview_data_file", '{"path": "x"}'),
}


@pytest.mark.parametrize("kind", REFUSED)
def test_refused_calls_of_any_kind_halt_the_run_past_max_denied(tmp_path, kind):
    gate, log = make_gate(tmp_path, POLICY)
    name, arguments = REFUSED[kind]

    statuses = [gate.call(name=name, arguments=arguments, call_id=f"c{i}").status for i in range(5)]

    assert statuses == [kind, kind, kind, "halted", "halted"]
    halt = events(log, "decision")[3]
    assert (halt["decision"], halt["rule"]) == ("halted", "quotas.max_denied")
    assert halt["text"] == (
        "The run was halted by policy: more than 3 refused calls (denied, unknown tool or invalid "
        "arguments) in this run. No further tool calls will run."
    )
    # and an allowed call after the halt does not run either
    assert gate.call(name="calculate", arguments='{"expression": "1"}', call_id="x").status == (
        "halted"
    )


def test_a_model_calling_unknown_tools_is_halted_by_the_loop(llm, tmp_path):
    llm.script([tool_calls(*(call("run_shell", f"c{i}", cmd="id") for i in range(4)))])
    gate, _ = make_gate(tmp_path, POLICY)

    result = ask(llm, gate, agent_settings=settings())

    assert result.status == "gate_halt"
    assert result.message.startswith("The tool gate halted the run: The run was halted by policy: "
                                     "more than 3 refused calls")


def test_arguments_given_as_an_object_are_that_object(tmp_path):
    gate, log = make_gate(tmp_path, POLICY)

    outcome = gate.call(name="calculate", arguments={"expression": "6 * 7"}, call_id="c1")

    assert (outcome.status, outcome.text) == ("ok", "42")
    assert events(log, "request")[0]["arguments"] == {"expression": "6 * 7"}


def test_arguments_over_the_cap_are_refused_as_invalid_and_not_stored(tmp_path):
    gate, log = make_gate(tmp_path, POLICY)
    gate.max_argument_bytes = 1000
    arguments = json.dumps({"expression": "1+" * 1000 + "1"})

    outcome = gate.call(name="calculate", arguments=arguments, call_id="c1")

    assert outcome.status == "invalid"
    assert f"the arguments are {len(arguments)} bytes, over the cap of 1000 bytes" in outcome.text
    request = events(log, "request")[0]
    assert "arguments" not in request and request["arguments_bytes"] == len(arguments)
    assert request["arguments_raw"] == arguments[:1024]


def test_a_flood_of_validation_errors_is_listed_up_to_a_bound(tmp_path):
    gate, _ = make_gate(tmp_path, POLICY)
    arguments = json.dumps({"expression": "1", **{f"extra_{i}": i for i in range(500)}})

    outcome = gate.call(name="calculate", arguments=arguments, call_id="c1")

    assert outcome.status == "invalid"
    assert outcome.text.startswith("21 validation errors for tool 'calculate'")
    assert "480 more errors not listed (500 in all)" in outcome.text
