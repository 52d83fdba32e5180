"""Provenance in a run: the validation turn, its budget, and what `sbx ask` and replay show.

Acceptance: runs the real CLI, the real SDK over HTTP to the
scripted server, and the real sandbox; the budget cases use `calculate`
(no container) through the real gate.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.core.events import MessageAdded, RunEnd
from sbx.agent.core.loop import run
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY, ask, model_for, policy, settings
from tools_support import make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

VALIDATION = "[sbx] These numbers in your answer were not printed"


def _cli_args(llm, tmp_path):
    return ["--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted",
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"),
            "--output", str(tmp_path / "out"), "--image", TEST_IMAGE]


def _asked_to_validate(request) -> str:
    last = request.messages[-1]
    assert last["role"] == "user" and last["content"].startswith(VALIDATION), last
    return last["content"]


def _after_validation(reply):
    """A responder that checks the request is the validation turn, then replies."""

    def respond(request):
        _asked_to_validate(request)
        return reply

    return respond


@pytest.mark.docker
def test_a_number_never_printed_ends_unverified_and_is_listed(llm, tmp_path):
    answer = "There are 96 rows and the mean revenue is 41.7."
    llm.script([
        tool_call("execute_python", code="print('rows', 96)"),
        assistant(answer),
        _after_validation(assistant(answer)),  # it insists
    ])

    outcome = CliRunner().invoke(cli, ["ask", "How many rows, and the mean?", "--json",
                                       *_cli_args(llm, tmp_path)])

    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.stdout)
    assert (document["status"], document["answer"]) == ("completed", answer)
    assert document["verified"] is False
    assert document["unsupported"] == ["41.7"]
    assert [(s["number"], s["execution"], s["text"]) for s in document["sources"]] == [
        ("96", 1, "rows 96")
    ]
    assert "41.7" in document["message"]
    assert "41.7" in _asked_to_validate(llm.requests[2])  # the validation turn named it
    assert "96" not in _asked_to_validate(llm.requests[2]).split(":", 1)[1]
    end = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()][-1]
    assert (end["type"], end["verified"], end["unsupported"]) == ("run_end", False, ["41.7"])

    replayed = CliRunner().invoke(cli, ["replay", str(tmp_path / "run.jsonl")])
    assert replayed.exit_code == 0, replayed.output
    assert "NOT VERIFIED: not printed by any output of the run: 41.7" in replayed.stdout
    assert "96  <- execution 1 [call_" in replayed.stdout


@pytest.mark.docker
def test_after_the_validation_turn_a_printed_number_is_verified_with_its_source(llm, tmp_path):
    llm.script([
        tool_call("execute_python", code="rows = 96\nprint('rows', rows)"),
        assistant("The mean revenue is 41.7."),
        _after_validation(tool_call("execute_python", code="print('mean revenue', 41.7)")),
        assistant("The mean revenue is 41.7 over 96 rows."),
    ])

    outcome = CliRunner().invoke(cli, ["ask", "What is the mean?", *_cli_args(llm, tmp_path)])

    assert outcome.exit_code == 0, outcome.output
    lines = outcome.stdout.splitlines()
    assert lines[0] == "The mean revenue is 41.7 over 96 rows."
    assert lines[2] == "Verified: every number checked was printed by an output (2 traced)"
    assert lines[3].startswith("  41.7  <- execution 2 [call_")
    assert lines[3].endswith("], line 1: mean revenue 41.7")
    assert lines[4].startswith("  96  <- execution 1 [call_")
    assert "verified: every number checked" in outcome.stderr  # the live progress too
    end = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()][-1]
    assert end["verified"] is True and end["unsupported"] == []
    assert [s["execution"] for s in end["sources"]] == [2, 1]


def _calc_gate(tmp_path):
    gate, _ = make_gate(tmp_path, policy("calculate"))
    return gate


def test_no_validation_turn_when_the_budget_has_no_request_left(llm, tmp_path):
    llm.script([tool_call("calculate", expression="6 * 7"), assistant("It is 43.")])

    result = ask(llm, _calc_gate(tmp_path), agent_settings=settings(max_turns=2))

    assert (result.status, result.answer, result.verified) == ("completed", "It is 43.", False)
    assert result.unsupported == ("43",)
    assert "no validation turn" in result.message and "max_turns of 2" in result.message


def test_a_validation_turn_cut_short_keeps_the_first_answer_unverified(llm, tmp_path):
    llm.script([
        tool_call("calculate", expression="6 * 7"),
        assistant("It is 43."),
        tool_call("calculate", expression="43 * 1"),  # the third and last turn the budget allows
    ])
    seen = []

    result = ask(llm, _calc_gate(tmp_path), agent_settings=settings(max_turns=3), events=seen)

    assert (result.status, result.answer, result.verified) == ("completed", "It is 43.", False)
    assert "the validation turn ended step_limit" in result.message
    end = [e for e in seen if isinstance(e, RunEnd)][-1]
    assert (end.status, end.verified, end.unsupported) == ("completed", False, ["43"])


def test_a_calculate_result_verifies_the_corrected_answer(llm, tmp_path):
    llm.script([
        assistant("It is 43."),
        tool_call("calculate", expression="6 * 7"),
        assistant("It is 42."),
    ])
    seen = []

    result = ask(llm, _calc_gate(tmp_path), events=seen)

    assert (result.answer, result.verified, result.unsupported) == ("It is 42.", True, ())
    assert [(s.number, s.tool, s.execution) for s in result.sources] == [("42", "calculate", None)]
    notices = [e for e in seen if isinstance(e, MessageAdded) and e.turn == 1]
    assert [n.message["content"][: len(VALIDATION)] for n in notices] == [VALIDATION]


def test_without_tools_no_validation_turn_is_asked(llm, tmp_path):
    llm.script([assistant("Paris has 2.1 million people.")])
    gate, _ = make_gate(tmp_path, policy())

    result = ask(llm, gate)

    assert (result.status, result.verified, result.unsupported) == (
        "completed", False, ("2.1 million",)
    )


def test_a_verified_answer_costs_no_extra_turn(llm, tmp_path):
    llm.script([tool_call("calculate", expression="6 * 7"), assistant("It is 42.")])

    result = ask(llm, _calc_gate(tmp_path))

    assert (result.turns, result.verified, result.message) == (2, True, "The model answered.")


def test_a_follow_up_may_quote_what_an_earlier_run_printed(llm, tmp_path):
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "What is the sum of 0..9?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function",
             "function": {"name": "execute_python", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "[stdout]\n45\n[resources] 0.31 s wall"},
        {"role": "assistant", "content": "The total is 45."},
    ]
    answer = assistant("Twice 45 is 90; that run took 0.31 s.")
    llm.script([tool_call("calculate", expression="45 * 2"), answer, answer])
    chosen = settings()
    with model_for(llm, chosen) as model:
        result = run("And twice that?", model=model, gate=_calc_gate(tmp_path), settings=chosen,
                     system_prompt="s", history=history)

    assert [(s.number, s.tool) for s in result.sources] == [("45", "earlier run"),
                                                           ("90", "calculate")]
    assert result.unsupported == ("0.31",)  # sbx's own timings are not the program's output
