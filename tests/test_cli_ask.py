"""`sbx ask`, `sbx replay`, `sbx demo` end to end: real CLI, real SDK over HTTP, real sandbox.

Acceptance 4: the transcript and the audit log of one run agree (same run id,
same calls, same observations), and no container remains after a run, Ctrl-C
included (a real SIGINT to a real `sbx ask` process mid-execution).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE, wait_for_file_in_container
from sbx.agent.cli.demo import demo_data
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import HttpFailure, assistant, call, tool_call, tool_calls
from sbx.sandbox.config import RUN_ID_LABEL
from sbx.tools.audit_verify import verify_log
from sbx.tools.outcome import CANCELLED_TEXT
from scripted_llm import FAKE_KEY
from tools_support import records

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

CALC_ONLY = "[tools.calculate]\nenabled = true\n"


def _args(llm, tmp_path, *extra, policy: str | None = None):
    """Flags that keep every file of the run under tmp_path."""
    args = ["--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted",
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"),
            "--output", str(tmp_path / "out"), "--image", TEST_IMAGE]
    if policy is not None:
        path = tmp_path / "sbx.toml"
        path.write_text(policy)
        args += ["--policy", str(path)]
    return [*args, *extra]


def _transcript(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]


def _containers_of(engine, run_id):
    return engine.api.containers(all=True, filters={"label": f"{RUN_ID_LABEL}={run_id}"})


@pytest.mark.docker
def test_ask_shows_progress_answers_and_its_transcript_and_audit_log_agree(
    llm, tmp_path, engine
):
    data = tmp_path / "numbers.csv"
    data.write_text("n\n10\n20\n30\n")
    code = (
        "import csv\n"
        "rows = list(csv.DictReader(open('/data/numbers.csv')))\n"
        "open('/output/total.txt', 'w').write(str(sum(int(r['n']) for r in rows)))\n"
        "print('total', sum(int(r['n']) for r in rows))"
    )
    llm.script([
        tool_calls(call("execute_python", "call_exec", code=code),
                   call("calculate", "call_calc", expression="10 + 20 + 30")),
        assistant("The total is 60."),
    ])

    outcome = CliRunner().invoke(
        cli, ["ask", "What is the total?", "--data", str(data), *_args(llm, tmp_path)]
    )

    assert outcome.exit_code == 0, outcome.output
    artifact = tmp_path / "out" / "total.txt"
    assert outcome.stdout == (
        "The total is 60.\n\n"
        "Verified: every number checked was printed by an output (1 traced)\n"
        "  60  <- calculate [call_calc], line 1: 60\n\n"
        f"Artifacts:\n  {artifact}\n"
    )
    assert artifact.read_text() == "60"
    for shown in ("-- turn 1", "-> execute_python [call_exec]", "   | rows = list(csv.DictReader",
                  "<- ok", "total 60", "-> calculate [call_calc]", "== completed: 2 turn(s)"):
        assert shown in outcome.stderr
    transcript = _transcript(tmp_path)
    audit = records(tmp_path / "audit.jsonl")
    assert transcript[0]["type"] == "conversation_start"
    run_id = transcript[1]["run_id"]
    assert {e["run_id"] for e in transcript[1:]} == {r["run_id"] for r in audit} == {run_id}
    assert len({e["conversation_id"] for e in transcript}) == 1
    asked = [c["id"] for e in transcript if e["type"] == "model_reply"
             for c in e["message"].get("tool_calls", [])]
    answered = {e["audit_id"]: e["content"] for e in transcript if e["type"] == "tool_result"}
    requested = [r["data"]["model_call_id"] for r in audit if r["event"] == "request"]
    outcomes = {r["data"]["call_id"]: r["data"]["text"] for r in audit if r["event"] == "outcome"}
    assert asked == requested == ["call_exec", "call_calc"]
    assert answered == outcomes
    assert [r["event"] for r in audit][0] == "run_start" and audit[-1]["event"] == "run_end"
    assert audit[-1]["data"]["reason"] == transcript[-1]["status"] == "completed"
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok
    assert FAKE_KEY not in (tmp_path / "run.jsonl").read_text()
    assert _containers_of(engine, run_id) == []
    totals = transcript[-1]["sandbox"]  # the run's accounting: what ops teams bill
    assert totals["executions"] == 1 and totals["cpu_seconds"] > 0
    assert totals["peak_memory_bytes"] > 1 << 20
    assert "   sandbox: 1 execution(s)" in outcome.stderr


def test_json_output_and_the_exit_status_of_a_budget_end(llm, tmp_path):
    llm.script([tool_call("calculate", expression="2 * 21")])

    outcome = CliRunner().invoke(
        cli, ["ask", "q", "--json", "--max-turns", "1", *_args(llm, tmp_path, policy=CALC_ONLY)]
    )

    assert outcome.exit_code == 3
    document = json.loads(outcome.stdout)
    assert document["status"] == "step_limit" and document["answer"] is None
    assert document["message"] == "The next request would exceed max_turns of 1 (--max-turns)"
    assert (document["turns"], document["tool_calls"]) == (1, 1)
    assert document["transcript"] == str(tmp_path / "run.jsonl")
    assert "sbx: no answer, limit reached (steps): The next request would exceed" in outcome.stderr


def test_a_failing_endpoint_exits_4_with_one_clear_line(llm, tmp_path):
    llm.script([HttpFailure(status=500, message="model crashed")])

    outcome = CliRunner().invoke(
        cli, ["ask", "q", "--max-retries", "0", "-q", *_args(llm, tmp_path, policy=CALC_ONLY)]
    )

    assert outcome.exit_code == 4
    assert outcome.stdout == ""
    assert "sbx: no answer, model error: Model request failed: the model endpoint " in (
        outcome.stderr
    )
    assert "answered HTTP 500 (not retried: --max-retries is 0): model crashed" in outcome.stderr
    assert "Traceback" not in outcome.output


def test_configuration_errors_are_one_line(llm, tmp_path):
    runner = CliRunner()
    no_model = runner.invoke(cli, ["ask", "q", "--api-key", "k"])
    bad_budget = runner.invoke(cli, ["ask", "q", "--max-time", "soon", "--model", "m"])
    bad_policy = runner.invoke(
        cli, ["ask", "q", *_args(llm, tmp_path, policy="[agent]\nmodle = 'x'\n")]
    )

    assert no_model.exit_code == 2
    assert no_model.stderr.startswith("sbx: no model configured: pass --model, set SBX_MODEL")
    assert bad_budget.exit_code == 2
    assert bad_budget.stderr.startswith("sbx: invalid value for --max-time: 'soon' is not a")
    assert bad_policy.exit_code == 125  # the policy file is an operator's error, like any other
    assert bad_policy.stderr.endswith("sbx.toml:2: agent.modle: unknown key\n")


def test_replay_re_renders_the_progress_and_the_answer(llm, tmp_path):
    llm.script([tool_call("calculate", expression="6 * 7"), assistant("It is 42.")])
    live = CliRunner().invoke(cli, ["ask", "q", *_args(llm, tmp_path, policy=CALC_ONLY)])
    assert live.exit_code == 0

    replay = CliRunner().invoke(cli, ["replay", str(tmp_path / "run.jsonl")])

    assert replay.exit_code == 0
    progress = [line for line in live.stderr.splitlines() if not line.startswith("sbx:")]
    assert replay.stdout.splitlines() == [*progress, "", "It is 42."]


def test_replay_of_a_damaged_transcript_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "run_start"}\nnot json\n')
    outcome = CliRunner().invoke(cli, ["replay", str(bad)])
    assert outcome.exit_code == 2
    assert outcome.stderr.endswith(f"sbx: {bad}:2: not a JSON line\n")


@pytest.mark.docker
def test_demo_fails_first_fixes_itself_and_answers_with_computed_numbers(tmp_path, engine):
    outcome = CliRunner().invoke(cli, [
        "demo", "--json", "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl"),
        "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out"),
    ])

    assert outcome.exit_code == 0, outcome.output
    assert "the model is a SCRIPT (no LLM)" in outcome.stderr
    document = json.loads(outcome.stdout)
    assert document["status"] == "completed"
    assert document["answer"].startswith(
        "(scripted demo model) South grew fastest in 2024: revenue 609,667 vs 432,268 in 2023 "
        "(+41.0%)."
    )
    # The years are not checked claims, although the program printed them: not traced.
    assert [s["number"] for s in document["sources"]] == ["609,667", "432,268", "+41.0%"]
    assert "(3 traced)" in outcome.stderr
    results = [e for e in _transcript(tmp_path) if e["type"] == "tool_result"]
    assert [r["failed"] for r in results] == [True, False]
    assert results[0]["content"].startswith(
        "Error: AttributeError: 'list' object has no attribute 'mean'"
    )
    assert document["artifacts"] == [str(tmp_path / "out" / "growth_by_region.png")]
    assert Path(document["artifacts"][0]).read_bytes().startswith(b"\x89PNG")
    assert _containers_of(engine, document["run_id"]) == []


def test_the_demo_writes_its_own_table_when_the_example_is_absent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = demo_data(tmp_path)
    lines = path.read_text().splitlines()
    assert lines[0] == "period,year,quarter,region,product,units,revenue"
    assert len(lines) == 1 + 2 * 4 * 4 * 3


@pytest.mark.docker
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_mid_execution_removes_the_container_and_closes_the_audit_log(
    llm, tmp_path, engine, signum
):
    code = "open('/tmp/started', 'w').close()\nimport time\ntime.sleep(60)"
    llm.script([tool_call("execute_python", code=code)])
    policy = CALC_ONLY + "[tools.execute_python]\nenabled = true\n"
    command = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()",
               "ask", "Wait a minute", *_args(llm, tmp_path, policy=policy)]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            run_id = _wait_for_execution(process, tmp_path, engine)
            (container,) = _containers_of(engine, run_id)
            wait_for_file_in_container(engine, container["Id"], "/tmp/started")
            process.send_signal(signum)
            _, stderr = process.communicate(timeout=20)  # not the execution's 30 s timeout
        finally:
            process.kill()
    assert process.returncode == 130, stderr
    assert "sbx: cancelled; the sandbox was removed and the audit log closed" in stderr
    assert "Traceback" not in stderr
    assert _containers_of(engine, run_id) == []
    transcript = _transcript(tmp_path)
    assert transcript[-1]["type"] == "run_end" and transcript[-1]["status"] == "cancelled"
    assert transcript[-1]["answer"] is None
    audit = records(tmp_path / "audit.jsonl")
    assert [r["event"] for r in audit] == ["run_start", "request", "decision", "outcome", "run_end"]
    assert audit[-1]["data"]["reason"] == "cancelled"
    outcome = audit[3]["data"]  # the interrupted call: cancelled, not "ok, container replaced"
    assert (outcome["status"], outcome["text"]) == ("cancelled", CANCELLED_TEXT)
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok


def _wait_for_execution(process, tmp_path, engine) -> str:
    """The run id, once its container exists and the audit log shows the call allowed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        log = tmp_path / "audit.jsonl"
        allowed = log.exists() and any(
            r["event"] == "decision" and r["data"]["decision"] == "allowed" for r in records(log)
        )
        if allowed:
            run_id = records(log)[0]["run_id"]
            assert _containers_of(engine, run_id), "the run's container should be running"
            return run_id
        time.sleep(0.1)
    raise AssertionError("the execution never started")
