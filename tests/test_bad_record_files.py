"""Damaged or hand-edited record files: `sbx replay`, `sbx audit show` and `sbx audit verify`
answer with one line naming the file and line, never a traceback.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sbx.agent.cli.main import cli
from tools_support import make_gate, policy_from

RUN_START = json.dumps({"type": "run_start", "run_id": "r1", "question": "q"})


def invoke(*args: str):
    outcome = CliRunner().invoke(cli, list(args))
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), (
        outcome.exc_info
    )
    return outcome


@pytest.mark.parametrize(
    ("second_line", "why"),
    [
        (b'{"type": "message", "message": {"content": "caf\xe9"}}', "not UTF-8 text"),
        # the typed events (sbx.agent.core.events) reject a field of the wrong type...
        (b'{"type": "model_reply", "turn": 1, "message": {}, "usage": "lots"}',
         "malformed model_reply event: usage: Input should be a valid dictionary"),
        (b'{"type": "model_reply", "turn": 1, "message": {}, "usage": {"total_tokens": "x"}}',
         "malformed model_reply event: usage.total_tokens: Input should be a valid integer, "
         "unable to parse string as an integer"),
        (b'{"type": "tool_result", "turn": 1, "call_id": "c", "name": "n", "status": "ok", '
         b'"failed": false, "content": "", "duration_s": "slow"}',
         "malformed tool_result event: duration_s: Input should be a valid number, unable to "
         "parse string as a number"),
        (b'{"type": "tool_result", "turn": 1, "call_id": "c", "name": "n", "status": "ok", '
         b'"failed": false, "content": "", "artifacts": "a.png"}',
         "malformed tool_result event: artifacts: Input should be a valid list"),
        (b'{"type": "run_start", "data": 7}',
         "malformed run_start event: data: Input should be a valid list"),
        (b'{"type": "compaction", "turn": 1, "shortened": [], "estimate": []}',
         "malformed compaction event: estimate: Input should be a valid integer"),
        (b'{"type": "model_reply"}', "malformed model_reply event: turn: Field required"),
        # ...and the renderers check what the types leave open (free-form objects)
        (b'{"type": "model_reply", "turn": 1, "message": {"tool_calls": {"id": 1}}}',
         "message.tool_calls is not a list"),
        (b'{"type": "model_reply", "turn": 1, "message": {"tool_calls": ["x"]}}',
         "message.tool_calls[0] is not an object"),
        (b'{"type": "run_end", "status": "completed", "sandbox": {"executions": 1, '
         b'"cpu_seconds": "x"}}',
         "sandbox.cpu_seconds is not a number"),
        (b"[1, 2]", "not a transcript event (no 'type')"),
        (b'{"type": 5}', "not a transcript event (no 'type')"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_replay_of_a_bad_transcript_is_one_line_naming_the_line(tmp_path, second_line, why):
    path = tmp_path / "run.jsonl"
    path.write_bytes(RUN_START.encode() + b"\n" + second_line + b"\n")

    outcome = invoke("replay", str(path))

    assert outcome.exit_code == 2
    assert outcome.stderr == f"sbx: {path}:2: {why}\n"


def test_replay_of_a_missing_transcript_is_one_line(tmp_path):
    outcome = invoke("replay", str(tmp_path / "none.jsonl"))
    assert outcome.exit_code == 2
    assert outcome.stderr.startswith("sbx: cannot read") and outcome.stderr.count("\n") == 1


def _good_log(tmp_path):
    gate, log = make_gate(tmp_path, policy_from({"tools": {"calculate": {"enabled": True}}}))
    gate.call(name="calculate", arguments='{"expression": "6*7"}', call_id="call-1")
    gate.close()
    return log


@pytest.mark.parametrize(
    ("record", "why"),
    [
        ({"event": "outcome", "run_id": "r", "data": ["not", "a", "dict"]},
         "data is not an object"),
        ({"event": "outcome", "run_id": "r", "data": {"call_id": "c", "duration_s": "long"}},
         "data.duration_s is not a number"),
        ({"event": "outcome", "run_id": "r", "data": {"call_id": "c", "duration_s": None}},
         "data.duration_s is not a number"),
        ({"event": "request", "run_id": ["r"], "data": {}}, "run_id is not text"),
        ({"event": "request", "run_id": "r", "time": 5, "data": {}}, "time is not text"),
    ],
)
def test_audit_show_of_a_badly_shaped_record_is_one_line_naming_it(tmp_path, record, why):
    log = _good_log(tmp_path)
    lines = log.read_text().splitlines()
    with log.open("a") as handle:
        handle.write(json.dumps(record) + "\n")

    outcome = invoke("audit", "show", str(log))

    assert outcome.exit_code == 2
    assert outcome.stderr == f"sbx: {log}:{len(lines) + 1}: {why}\n"


@pytest.mark.parametrize(
    "line",
    [b'{"seq": NaN, "prev": "x"}', b"[" * 100_000 + b"]" * 100_000, b'{"a": "\xff\xfe"}'],
)
def test_audit_verify_and_show_of_an_odd_line_say_what_is_wrong(tmp_path, line):
    log = _good_log(tmp_path)
    count = len(log.read_bytes().splitlines())
    with log.open("ab") as handle:
        handle.write(line + b"\n")

    verified = invoke("audit", "verify", str(log))
    shown = invoke("audit", "show", str(log))

    assert verified.exit_code == 1
    assert f"FAILED at line {count + 1}:" in verified.stderr
    assert shown.exit_code == 2  # never skipped in silence: the line is named
    assert shown.stderr.startswith(f"sbx: {log}:{count + 1}: ")
    assert shown.stdout == ""


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json at all\n", "not a JSON line"),
        (b'{"a": "\xff"}\n', "not UTF-8 text"),
        (b'["a", "list"]\n', "not a JSON object"),
        (b'{"event": "req', "torn: the last line is incomplete (a writer stopped mid-write)"),
        (RUN_START.encode() + b"\n", "not an audit record (no event, seq and hash)"),
        (b'{"event": "request", "seq": true, "hash": "h", "run_id": "r"}\n',
         "not an audit record (no event, seq and hash)"),
    ],
)
def test_audit_show_of_a_damaged_or_foreign_line_exits_2_naming_it(tmp_path, line, why):
    """The README promises exit 2 naming the line; a damaged line was skipped with exit 0."""
    log = _good_log(tmp_path)
    count = len(log.read_bytes().splitlines())
    with log.open("ab") as handle:
        handle.write(line)

    shown = invoke("audit", "show", str(log))

    assert shown.exit_code == 2
    assert shown.stderr == f"sbx: {log}:{count + 1}: {why}\n"
