"""What reaches a terminal: model-, program- and file-controlled text is shown, never obeyed.

Every renderer is driven with the protocol's hostile strings (OSC 52 clipboard
writes, title changes, cursor movement that hides lines and fakes
`== completed`, 8-bit C1 controls, bidi overrides, lone surrogates) and its
output must hold none of them, only their visible escapes. The `sbx ask` test
is end to end: real CLI, real SDK over HTTP, real gate and data tools; only
the model is scripted.
"""

from __future__ import annotations

import io
import json
import unicodedata

from click.testing import CliRunner

import scripted_llm
from sbx.agent.cli import doctor as doctor_cli
from sbx.agent.cli.display import Progress
from sbx.agent.cli.main import cli
from sbx.agent.cli.selftest import print_check
from sbx.agent.testing.scripted_model import assistant, call, tool_calls
from sbx.sandbox.checks.common import Check
from scripted_llm import FAKE_KEY
from tools_support import make_gate, policy_from

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

OSC52 = "\x1b]52;c;cm0gLXJmIH4vKg==\x07"
TITLE = "\x1b]0;root@prod\x07"
HIDE = "\x1b[1A\x1b[2K\r== completed: 1 turn(s)"
C1 = "\x9b31m\x9d0;t\x9c"
BIDI = "invoice_\u202efdp.exe"
MODEL_SAYS = OSC52 + TITLE + HIDE + C1 + BIDI + "\u200b"
"""What an endpoint can send (a lone surrogate in a reply is the transcript writer's case)."""
HOSTILE = MODEL_SAYS + "\ud800"
UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def assert_inert(text: str) -> None:
    """Nothing a terminal would obey or hide: only newlines and tabs for layout."""
    found = {hex(ord(c)) for c in text if unicodedata.category(c) in UNSAFE and c not in "\n\t"}
    assert not found, f"raw control or format characters reached the terminal: {sorted(found)}"


def assert_shown(text: str) -> None:
    """The hostile text is still there to read, as escapes."""
    for visible in ("\\x1b]52;c;", "\\x1b[1A", "\\x9b31m", "invoice_\\u202efdp.exe"):
        assert visible in text, visible


def test_ask_progress_answer_json_and_replay_show_hostile_text_inert(llm, tmp_path):
    data = tmp_path / "invoice_\u202efdp.csv"
    data.write_text(f"name,amount\n{OSC52}evil{C1},1\n{BIDI},2\n")
    code = f"print('{OSC52}')\n# {HIDE}\nx = '{BIDI}'"
    llm.script([
        tool_calls(
            call("list_data_files", "call_\x1b[2Kls"),
            call("preview_data_file", f"call_{BIDI}", name=data.name, rows=5),
            call("execute_python", "call_code", code=code),
            content=f"Looking {TITLE}{HIDE}",
        ),
        assistant(f"The answer {MODEL_SAYS}\nsecond line\twith a tab"),
    ])
    policy = tmp_path / "sbx.toml"
    policy.write_text(
        "[tools.list_data_files]\nenabled = true\n[tools.preview_data_file]\nenabled = true\n"
    )
    args = ["--data", str(data), "--policy", str(policy), "--base-url", llm.base_url,
            "--api-key", FAKE_KEY, "--model", "scripted",
            "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out")]

    live = CliRunner().invoke(cli, ["ask", "Which?", *args])

    assert live.exit_code == 0, live.output
    for shown in (live.stdout, live.stderr):
        assert_inert(shown)
    assert_shown(live.stdout + live.stderr)
    assert "second line\twith a tab" in live.stdout  # the answer keeps its layout
    assert not any(line.startswith("== completed: 1 turn") for line in live.stderr.splitlines())
    assert "invoice_\\u202efdp.csv" in live.stderr  # the data file's name and the tool output

    replay = CliRunner().invoke(cli, ["replay", str(tmp_path / "run.jsonl")])
    assert replay.exit_code == 0, replay.output
    assert_inert(replay.stdout)
    assert_shown(replay.stdout)


def test_ask_json_output_keeps_the_values_and_loses_the_controls(llm, tmp_path):
    llm.script([assistant(f"Done {MODEL_SAYS}")])
    policy = tmp_path / "sbx.toml"
    policy.write_text("[tools.calculate]\nenabled = true\n")
    outcome = CliRunner().invoke(cli, [
        "ask", "q", "--json", "-q", "--policy", str(policy), "--base-url", llm.base_url,
        "--api-key", FAKE_KEY, "--model", "scripted", "--audit-log", str(tmp_path / "a.jsonl"),
        "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out"),
    ])
    assert outcome.exit_code == 0, outcome.output
    assert_inert(outcome.stdout)
    assert json.loads(outcome.stdout)["answer"] == f"Done {MODEL_SAYS}"


def test_progress_escapes_every_field_of_every_event():
    stream = io.StringIO()
    render = Progress(stream, show_answer=True)
    render({"type": "run_start", "label": HOSTILE, "run_id": HOSTILE, "model": HOSTILE,
            "base_url": HOSTILE, "prompt_version": HOSTILE, "question": HOSTILE,
            "data": [HOSTILE]})
    render({"type": "message", "turn": 1, "message": {"role": "user", "content": HOSTILE}})
    arguments = json.dumps({"code": f"a = 1\n{HOSTILE}\n\tb = 2"})
    render({"type": "model_reply", "turn": HOSTILE, "usage": {}, "total_usage": {},
            "message": {"content": HOSTILE, "tool_calls": [
                {"id": HOSTILE, "function": {"name": HOSTILE, "arguments": arguments}},
                {"id": "c2", "function": {"name": "x", "arguments": json.dumps({"q": HOSTILE})}},
                {"id": "c3", "function": {"name": "x", "arguments": "not json " + HOSTILE}},
            ]}})
    render({"type": "tool_result", "status": HOSTILE, "content": f"[stdout]\n{HOSTILE}\n",
            "artifacts": [HOSTILE]})
    render({"type": "run_end", "status": HOSTILE, "message": HOSTILE, "artifacts": [HOSTILE],
            "answer": HOSTILE, "turns": HOSTILE, "tool_calls": HOSTILE})
    render({"type": "run_error", "error": HOSTILE})

    shown = stream.getvalue()
    assert_inert(shown)
    assert_shown(shown)
    assert "   | \\tb = 2" not in shown and "   | \tb = 2" in shown  # code keeps its tabs
    assert not any(line.startswith("== completed") for line in shown.splitlines())


def test_a_live_event_of_the_wrong_shape_is_one_line_not_a_crash():
    stream = io.StringIO()
    Progress(stream)({"type": "model_reply", "usage": "lots", "duration_s": "slow"})
    assert stream.getvalue() == "   (event not shown: usage is not an object)\n"


def test_audit_show_escapes_every_cell(tmp_path):
    policy = policy_from({"tools": {"calculate": {"enabled": True}}})
    gate, log = make_gate(tmp_path, policy, run_id=f"run-{BIDI}")
    gate.call(name="calculate", arguments=json.dumps({"expression": HOSTILE}), call_id=HOSTILE)
    gate.call(name=f"http_get{OSC52}", arguments="{}", call_id=f"c_{C1}")
    gate.close()

    outcome = CliRunner().invoke(cli, ["audit", "show", str(log)])

    assert outcome.exit_code == 0, outcome.output
    assert_inert(outcome.output)
    assert "\\x1b]52;c;" in outcome.output and "run-invoice_\\u202efdp.exe" in outcome.output


def test_sbx_error_lines_quote_names_escaped(tmp_path):
    missing = tmp_path / f"policy{TITLE}{BIDI}.toml"
    outcome = CliRunner().invoke(cli, ["ask", "q", "--policy", str(missing), "--model", "m",
                                       "--api-key", "k"])
    assert outcome.exit_code == 125
    assert_inert(outcome.stderr)
    assert "\\x1b]0;root@prod\\x07invoice_\\u202efdp.exe" in outcome.stderr


def test_selftest_and_doctor_lines_escape_what_the_sandbox_said(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr("sys.stdout", stream)
    print_check(Check(name="probe", passed=False, tried=HOSTILE, happened=HOSTILE))
    assert_inert(stream.getvalue())
    assert_shown(stream.getvalue())

    checks = [Check(name="image", passed=False, happened=HOSTILE, fix=HOSTILE)]
    monkeypatch.setattr(doctor_cli, "run_checks", lambda limits, image: checks)  # not under test
    outcome = CliRunner().invoke(cli, ["doctor"])
    assert outcome.exit_code == 1
    assert_inert(outcome.stdout)
    assert_shown(outcome.stdout)
