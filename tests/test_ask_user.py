"""`ask_user`: a terminal prompts the operator; elsewhere the run ends `needs_input` and
`sbx ask --continue RUN_ID "answer"` completes it, both parts in one transcript and the audit log.

Real CLI, real SDK over HTTP to the scripted server, the real gate and audit log; the
acceptance runs in the real sandbox.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli_chat import Terminal

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.cli.prompting import POLL_S as ASKER_POLL_S
from sbx.agent.testing.scripted_model import ScriptedRequest, assistant, tool_call
from sbx.tools.audit_verify import verify_log
from sbx.tools.context import ToolContext
from sbx.tools.gate import build_gate
from scripted_llm import FAKE_KEY
from tools_support import events, make_gate, open_log, policy_from, records

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

ASK_ONLY = "[tools.ask_user]\nenabled = true\n[tools.calculate]\nenabled = true\n"
RESTORED = "[sbx] The sandbox was replaced since the previous question"
QUESTION = "Should the total count refunds?"


def _flags(llm, tmp_path, *, policy: str | None = None) -> list[str]:
    flags = ["--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted",
             "--audit-log", str(tmp_path / "audit.jsonl"), "--image", TEST_IMAGE]
    if policy is not None:
        (tmp_path / "sbx.toml").write_text(policy)
        flags += ["--policy", str(tmp_path / "sbx.toml")]
    return flags


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.docker
def test_without_a_terminal_the_run_needs_input_and_continue_completes_it(
    llm, tmp_path, engine, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sales.csv").write_text("amount,refund\n10,0\n20,1\n30,0\n")
    llm.script([
        tool_call("execute_python", code="import pandas as pd\ndf = pd.read_csv('/data/sales.csv')"
                  "\nprint(len(df))"),
        tool_call("ask_user", question=QUESTION),
    ])
    first = CliRunner().invoke(
        cli, ["ask", "What is the total?", "--data", "sales.csv", "--json", *_flags(llm, tmp_path)]
    )
    assert first.exit_code == 6, first.output
    paused = json.loads(first.stdout)
    assert (paused["status"], paused["question"], paused["answer"]) == (
        "needs_input", QUESTION, None
    )
    assert f"sbx ask --continue {paused['run_id']}" in first.stderr
    tools = [t["function"]["name"] for t in llm.requests[0].body["tools"]]
    assert "ask_user" in tools

    def check_told(request: ScriptedRequest):
        last = request.messages[-1]["content"]
        assert last.startswith(RESTORED)  # a new sandbox, `df` rebuilt by replay
        assert "restored 1 cell" in last and "the previous process ended" in last
        assert f"The user answered your question ({QUESTION!r}):\n\nNo, leave refunds out." in last
        code = "import pandas as pd\ndf = pd.read_csv('/data/sales.csv')\n"
        return tool_call("execute_python", code=code + "print(df[df.refund == 0].amount.sum())")

    llm.script([check_told, assistant("Without refunds the total is 40.")])
    second = CliRunner().invoke(cli, [
        "ask", "No, leave refunds out.", "--continue", paused["run_id"], "--json",
        *_flags(llm, tmp_path),
    ])
    assert second.exit_code == 0, second.output
    done = json.loads(second.stdout)
    assert (done["status"], done["answer"]) == ("completed", "Without refunds the total is 40.")
    assert llm.requests[3].last_tool_message.startswith("[stdout]\n40")
    assert done["conversation_id"] == paused["conversation_id"]
    assert done["transcript"] == paused["transcript"]  # one transcript shows both parts

    lines = _lines(Path(paused["transcript"]))
    assert {line["conversation_id"] for line in lines} == {paused["conversation_id"]}
    assert [line["seq"] for line in lines] == list(range(len(lines)))
    starts = [line for line in lines if line["type"] == "run_start"]
    assert [(s["run_id"], s.get("continues")) for s in starts] == [
        (paused["run_id"], None), (done["run_id"], paused["run_id"])
    ]
    assert [e["status"] for e in lines if e["type"] == "run_end"] == ["needs_input", "completed"]

    audit = tmp_path / "audit.jsonl"
    assert verify_log(audit, key=None).ok
    every_start = [r for r in records(audit) if r["event"] == "run_start"]
    audit_starts = [r["data"] for r in every_start if not r["run_id"].endswith("-restore")]
    [restoring] = [r for r in every_start if r["run_id"] == f"{done['run_id']}-restore"]
    assert restoring["data"]["principal"] == audit_starts[0]["principal"]  # replayed as its own
    assert [s.get("continues") for s in audit_starts] == [None, paused["run_id"]]
    assert {s["conversation_id"] for s in audit_starts} == {paused["conversation_id"]}
    asked = [o for o in events(audit, "outcome") if o["tool"] == "ask_user"]
    assert asked[0]["needs_input"] is True
    [answer] = events(audit, "user_answer")
    assert answer == {**answer, "continues": paused["run_id"], "question": QUESTION,
                      "answer": "No, leave refunds out."}
    ends = [r for r in records(audit) if r["event"] == "run_end"]
    assert [e["data"]["reason"] for e in ends if not e["run_id"].endswith("-restore")] == [
        "needs_input", "completed"]


def test_a_run_that_did_not_ask_cannot_be_continued(llm, tmp_path):
    llm.script([assistant("It is 4.")])
    transcript = tmp_path / "run.jsonl"
    flags = [*_flags(llm, tmp_path, policy=ASK_ONLY), "--transcript", str(transcript)]
    done = CliRunner().invoke(cli, ["ask", "2 + 2?", "--json", *flags])
    run_id = json.loads(done.stdout)["run_id"]
    again = CliRunner().invoke(cli, ["ask", "yes", "--continue", run_id, *flags])
    assert again.exit_code == 2
    assert again.stderr.strip().splitlines()[-1] == (
        f"sbx: run {run_id} ended completed, not needs_input: nothing to answer"
    )
    missing = CliRunner().invoke(cli, ["ask", "yes", "--continue", "run-nope",
                                       *_flags(llm, tmp_path, policy=ASK_ONLY)])
    assert missing.exit_code == 2 and "no transcript of run run-nope" in missing.stderr


def test_a_continued_run_cannot_be_continued_twice(llm, tmp_path):
    llm.script([tool_call("ask_user", question=QUESTION)])
    transcript = tmp_path / "run.jsonl"
    flags = [*_flags(llm, tmp_path, policy=ASK_ONLY), "--transcript", str(transcript)]
    paused = json.loads(CliRunner().invoke(cli, ["ask", "Total?", "--json", *flags]).stdout)
    llm.script([assistant("Then it is sixty.")])
    assert CliRunner().invoke(cli, ["ask", "yes", "--continue", paused["run_id"],
                                    *flags]).exit_code == 0
    again = CliRunner().invoke(cli, ["ask", "yes", "--continue", paused["run_id"], *flags])
    assert again.exit_code == 2 and "is not the last run" in again.stderr


def test_a_terminal_prompts_the_operator_and_the_answer_is_the_observation(llm, tmp_path):
    llm.script([tool_call("ask_user", question="Which year?\x1b[31m"),
                assistant("For 2024 the total is sixty.")])
    sbx = str(Path(sys.executable).with_name("sbx"))
    terminal = Terminal([sbx, "ask", "What is the total?", *_flags(llm, tmp_path, policy=ASK_ONLY),
                         "--transcript", str(tmp_path / "run.jsonl")], cwd=tmp_path)
    prompt = terminal.expect(b"your answer> ")
    assert b"the model asks you: Which year?\\x1b[31m" in prompt  # the model's text, escaped
    terminal.type("2024")
    terminal.expect(b"For 2024 the total is sixty.")
    assert terminal.wait() == 0
    assert llm.requests[1].last_tool_message == "The user answered: 2024"
    ends = [line for line in _lines(tmp_path / "run.jsonl") if line["type"] == "run_end"]
    assert [e["status"] for e in ends] == ["completed"]


def test_chat_without_a_terminal_takes_the_next_line_as_the_answer(llm, tmp_path):
    llm.script([tool_call("ask_user", question=QUESTION), assistant("Then it is sixty.")])
    sbx = str(Path(sys.executable).with_name("sbx"))
    chat = subprocess.run(
        [sbx, "chat", *_flags(llm, tmp_path, policy=ASK_ONLY),
         "--transcript", str(tmp_path / "chat.jsonl")],
        input="What is the total?\nYes, count them.\n/exit\n", capture_output=True, text=True,
        timeout=120, cwd=tmp_path,
    )
    assert chat.returncode == 0, chat.stderr
    assert f"the model asks you: {QUESTION}" in chat.stderr
    assert "Then it is sixty." in chat.stdout
    assert "The user answered your question" in llm.requests[1].messages[-1]["content"]
    lines = _lines(tmp_path / "chat.jsonl")
    starts = [line for line in lines if line["type"] == "run_start"]
    assert starts[1]["continues"] == starts[0]["run_id"]


def test_ask_user_is_offered_only_where_someone_can_answer(tmp_path):
    policy = policy_from({"tools": {"ask_user": {"enabled": True}}})
    nobody, _ = make_gate(tmp_path, policy)
    assert nobody.enabled_names() == []
    assert nobody.call(name="ask_user", arguments='{"question": "x"}', call_id="c").status == (
        "unknown"
    )
    context = ToolContext(run_id="r2", runner=None, defer_questions=True)
    later = build_gate(policy, context=context, audit=open_log(tmp_path / "a2.jsonl"))
    assert later.enabled_names() == ["ask_user"]
    assert later.call(name="ask_user", arguments='{"question": "  "}', call_id="c").status == (
        "error"  # a blank question is no question
    )
    closed = build_gate(policy_from({}), context=context, audit=open_log(tmp_path / "a3.jsonl"))
    assert closed.enabled_names() == []  # the policy still decides


def test_ctrl_c_at_the_answer_prompt_leaves_no_stray_line_and_a_timeout_says_so(llm, tmp_path):
    llm.script([tool_call("ask_user", question=QUESTION)])
    sbx = str(Path(sys.executable).with_name("sbx"))
    terminal = Terminal([sbx, "chat", *_flags(llm, tmp_path, policy=ASK_ONLY),
                         "--transcript", str(tmp_path / "chat.jsonl")], cwd=tmp_path)
    terminal.expect(b"you> ")
    terminal.type("What is the total?")
    terminal.expect(b"your answer> ")
    os.write(terminal.fd, b"\x03")  # Ctrl-C: the run is cancelled, the chat goes on
    terminal.expect(b"sbx: cancelled")
    terminal.expect(b"you> ")
    time.sleep(ASKER_POLL_S * 5)  # the asker's thread has seen the cancel and ended by now
    terminal.type("/exit")
    assert terminal.wait() == 0
    assert b"(no answer)" not in terminal.seen and b"no answer" not in terminal.seen

    llm.script([tool_call("ask_user", question=QUESTION), assistant("Then I cannot say.")])
    quick = ASK_ONLY.replace("[tools.ask_user]\n", "[tools.ask_user]\ntimeout = \"1s\"\n")
    terminal = Terminal([sbx, "ask", "What is the total?", *_flags(llm, tmp_path, policy=quick),
                         "--transcript", str(tmp_path / "run.jsonl")], cwd=tmp_path)
    terminal.expect(b"your answer> ")
    terminal.expect(b"\r\nsbx: no answer within 1 s\r\n")
    terminal.expect(b"Then I cannot say.")
    assert terminal.wait() == 0
