"""Acceptance: a plan kept current across a failing execution.

The scripted model writes a plan of three steps, one execution fails, and it
revises the plan (a step dropped, one added); every revision is a `plan` event
in the transcript, the final plan is in the result with the steps the answer
leaves open, `sbx ask` shows the checklist as it changes, `sbx replay` shows
every revision, the notebook and the report start with the final plan, and a
follow-up in the same conversation is shown the plan and revises it. The
operator's `require_plan_from_data` refuses code until a plan exists.
"""

from __future__ import annotations

import json
import re

import nbformat
import pytest
from click.testing import CliRunner
from plan_support import EXEC, LOAD, REPORT, SUM_BY_KEY, SUM_BY_ROW, planned_turns
from plan_support import plan_call as _plan

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.history import read_record
from sbx.agent.core.settings import Endpoint
from sbx.agent.core.state import RunResult
from sbx.agent.export.formats import export
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY, policy
from tools_support import events, make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model
sandbox = scripted_llm.sandbox

def _transcript(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ask(llm, tmp_path, *questions: str) -> list[RunResult]:
    """Each question asked in turn in one conversation (transcript `conv.jsonl`)."""
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    with App.open(load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app:
        endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
        with app.conversation(spec, endpoint=endpoint,
                              transcript=tmp_path / "conv.jsonl") as conversation:
            return [conversation.ask(question) for question in questions]


def _check_revisions(lines):
    plans = [line for line in lines if line["type"] == "plan"]
    assert [p["revision"] for p in plans] == [1, 2, 3]
    assert [s["status"] for s in plans[0]["steps"]] == ["in_progress", "pending", "pending"]
    assert plans[1]["changes"] == [
        {"change": "status", "step": LOAD, "before": "in_progress", "after": "done"},
        {"change": "status", "step": SUM_BY_KEY, "before": "pending", "after": "dropped"},
        {"change": "added", "step": SUM_BY_ROW, "before": None, "after": "in_progress"},
    ]
    assert plans[1]["note"] == "there is no 'group' column"
    results = [line for line in lines if line["type"] == "tool_result"]
    assert [(r["name"], r["failed"]) for r in results] == [
        ("update_plan", False), (EXEC, False), (EXEC, True), ("update_plan", False), (EXEC, False),
        ("update_plan", False),
    ]
    end = next(line for line in lines if line["type"] == "run_end")
    assert [s["description"] for s in end["plan"]] == [LOAD, SUM_BY_KEY, SUM_BY_ROW, REPORT]
    assert end["plan_pending"] == [REPORT]
    return plans


@pytest.mark.docker
def test_the_plan_is_revised_after_a_failure_recorded_exported_and_seen_by_a_follow_up(
    llm, tmp_path
):
    llm.script([
        *planned_turns(),
        _plan((LOAD, "done"), (SUM_BY_KEY, "dropped"), (SUM_BY_ROW, "done"),
              (REPORT, "in_progress")),
        tool_call(EXEC, code="open('/output/total.txt', 'w').write(str(total))\nprint(total)"),
        _plan((LOAD, "done"), (SUM_BY_KEY, "dropped"), (SUM_BY_ROW, "done"), (REPORT, "done")),
        assistant("I wrote the total, 6, to total.txt."),
    ])
    transcript = tmp_path / "conv.jsonl"
    first, second = _ask(llm, tmp_path, "What is the total?", "Write it to a file.")

    assert (first.status, first.answer, first.plan_pending) == (
        "completed", "The total is 6.", (REPORT,))
    assert "update_plan" in llm.requests[0].body["tools"][-1]["function"]["name"]
    assert "`update_plan`" in llm.requests[0].body["messages"][0]["content"]  # the prompt asks
    assert "KeyError" in llm.requests[3].last_tool_message
    lines = _transcript(transcript)
    _check_revisions([line for line in lines if line.get("run_id") == first.run_id])

    follow_up = llm.requests[7].body["messages"]  # the follow-up's first request
    notice = next(m["content"] for m in follow_up if "Your plan as the previous" in str(
        m.get("content")))
    assert f"2. [-] {SUM_BY_KEY} ({EXEC})\n3. [x] {SUM_BY_ROW} ({EXEC})\n4. [ ] {REPORT}" in notice
    assert follow_up[-1] == {"role": "user", "content": "Write it to a file."}
    later = [line for line in lines if line["type"] == "plan" and line["run_id"] == second.run_id]
    assert [p["revision"] for p in later] == [4, 5]  # the conversation's plan, continued
    assert later[0]["changes"] == [
        {"change": "status", "step": REPORT, "before": "pending", "after": "in_progress"}]
    assert (second.status, second.plan_pending) == ("completed", ())

    record = read_record(transcript)
    notebook = nbformat.reads(export(record, "ipynb"), as_version=4)
    assert notebook.cells[0].cell_type == "markdown"
    assert notebook.cells[0].source.splitlines() == [
        "## Plan", "", f"- [x] {LOAD} (`{EXEC}`)", f"- ~~{SUM_BY_KEY} (`{EXEC}`)~~ (dropped)",
        f"- [x] {SUM_BY_ROW} (`{EXEC}`)", f"- [x] {REPORT} (`{EXEC}`)",
    ]
    report = export(record, "md")
    assert report.split("\n\n")[1].startswith("## Plan")


@pytest.mark.docker
def test_a_follow_up_that_does_not_revise_the_plan_is_not_warned_about_its_steps(llm, tmp_path):
    llm.script([
        _plan((LOAD, "done"), (REPORT, "pending")),
        assistant("The total is 6."),
        assistant("Yes: 6 is the sum of the rows."),  # the follow-up keeps the plan as it was
    ])
    transcript = tmp_path / "conv.jsonl"
    first, second = _ask(llm, tmp_path, "What is the total?", "Is that the sum of the rows?")

    assert first.plan_pending == (REPORT,)  # its own plan leaves a step open
    assert second.status == "completed" and second.plan_pending == ()
    ends = [line for line in _transcript(transcript) if line["type"] == "run_end"]
    assert [end.get("plan_pending") for end in ends] == [[REPORT], []]


@pytest.mark.docker
def test_sbx_ask_shows_the_checklist_as_it_changes_and_replay_shows_every_revision(
    llm, tmp_path
):
    llm.script(planned_turns())
    args = ["--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted",
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"),
            "--output", str(tmp_path / "out"), "--image", TEST_IMAGE]

    asked = CliRunner().invoke(cli, ["ask", "What is the total?", *args])

    assert asked.exit_code == 0, asked.output
    shown = asked.output
    first = shown.index("plan (revision 1)")
    failed = shown.index("KeyError")
    revised = shown.index("plan (revision 2): there is no 'group' column")
    assert first < failed < revised < shown.index("plan (revision 3)")
    assert f"   [>] 1. {LOAD} ({EXEC})\n   [ ] 2. {SUM_BY_KEY} ({EXEC})" in shown
    assert f"   [-] 2. {SUM_BY_KEY} ({EXEC})  <- was pending" in shown[revised:]
    assert f"   [>] 3. {SUM_BY_ROW} ({EXEC})  <- new" in shown[revised:]
    assert f"The answer leaves 1 plan step(s) not done: {REPORT}" in shown
    _check_revisions(_transcript(tmp_path / "run.jsonl"))

    replayed = CliRunner().invoke(cli, ["replay", str(tmp_path / "run.jsonl")])
    assert replayed.exit_code == 0, replayed.output
    assert re.findall(r"plan \(revision (\d)\)", replayed.output) == ["1", "2", "3"]
    assert f"The answer leaves 1 plan step(s) not done: {REPORT}" in replayed.output


@pytest.mark.docker
def test_the_operator_can_require_a_plan_before_the_first_execution(llm, tmp_path, sandbox):
    data = tmp_path / "big.csv"
    data.write_text("n\n" + "1\n" * 2000)
    rules = {"tools": {EXEC: {"enabled": True},
                       "update_plan": {"enabled": True, "require_plan_from_data": "1k"}}}
    llm.script([
        tool_call(EXEC, code="print(1)"),
        _plan(("print one", "in_progress")),
        tool_call(EXEC, code="print(1)"),
        assistant("1"),
    ])
    gate, log = make_gate(tmp_path, policy(**rules), runner=sandbox, data_paths=[data])

    result = scripted_llm.ask(llm, gate)

    assert llm.requests[1].last_tool_message == (
        "Call to 'execute_python' denied by policy rule tools.update_plan.require_plan_from_data: "
        "this run must write a plan before its first execution; call update_plan with your "
        "steps, then run the code"
    )
    assert llm.requests[3].last_tool_message.startswith("[stdout]\n1")
    assert result.status == "completed"
    assert [d["decision"] for d in events(log, "decision")] == ["denied", "allowed", "allowed"]
