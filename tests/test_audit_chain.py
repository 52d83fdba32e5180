"""Acceptance 3: one valid chain from many processes; every tampering found at the right record."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sbx.agent.cli.main import cli
from sbx.tools.audit import AuditError, AuditLog
from sbx.tools.audit_chain import seal
from sbx.tools.audit_verify import verify_log
from sbx.tools.redact import Redactor
from tools_support import records, run_calls, worker_command

KEY = "k" * 32


def audit_verify(path: Path, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, ["audit", "verify", str(path)], env=env or {"SBX_AUDIT_KEY": ""})


@pytest.fixture(scope="module")
def clean_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log of one run with 10 calls: 1 start + 30 call records + 1 end = 32 lines."""
    path = tmp_path_factory.mktemp("log") / "audit.jsonl"
    run_calls(str(path), "run-a", 10)
    return path


@pytest.fixture
def log_copy(clean_log: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy.jsonl"
    shutil.copy(clean_log, copy)
    return copy


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_thousand_calls_from_four_processes_make_one_chain(tmp_path) -> None:
    path = tmp_path / "shared.jsonl"
    procs = [
        subprocess.Popen(
            worker_command(
                f"from tools_support import run_calls; run_calls({str(path)!r}, 'run-{n}', 250)"
            )
        )
        for n in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    report = verify_log(path, key=None)
    assert report.ok, report.summary()
    assert report.records == 4 * (1 + 250 * 3 + 1)
    assert report.runs == 4 and report.open_runs == ()
    recs = records(path)
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert len({r["pid"] for r in recs}) == 4
    pids_in_order = [r["pid"] for r in recs]
    switches = sum(1 for a, b in zip(pids_in_order, pids_in_order[1:], strict=False) if a != b)
    assert switches > 10, "the writers did not actually interleave"
    result = audit_verify(path)
    assert result.exit_code == 0 and result.output.startswith("OK: 3008 records, 4 runs")


def test_clean_log_verifies(clean_log) -> None:
    result = audit_verify(clean_log)
    assert result.exit_code == 0, result.output
    assert "OK: 32 records, 1 runs, SHA-256 chain" in result.output


@pytest.mark.parametrize("where", ["string value", "json structure", "hash field", "seq digit"])
def test_editing_one_byte_fails_at_that_record(log_copy, where) -> None:
    lines = lines_of(log_copy)
    line = bytearray(lines[9])
    index = {
        "string value": line.index(b'"run-a') + 2,
        "json structure": line.index(b":"),
        "hash field": line.index(b'"hash":"') + 12,
        "seq digit": line.index(b'"seq":') + 6,
    }[where]
    line[index] = ord("0") if line[index] != ord("0") else ord("1")
    if where == "json structure":
        line[index] = ord(";")
    lines[9] = bytes(line)
    log_copy.write_bytes(b"".join(lines))
    result = audit_verify(log_copy)
    assert result.exit_code == 1
    assert "FAILED at line 10:" in result.output
    assert ("edited" in result.output) or ("not valid JSON" in result.output)
    assert "9 records before it verify" in result.output


def test_deleting_a_line_fails_at_its_place(log_copy) -> None:
    lines = lines_of(log_copy)
    del lines[14]
    log_copy.write_bytes(b"".join(lines))
    result = audit_verify(log_copy)
    assert result.exit_code == 1
    assert "FAILED at line 15: missing record: expected seq 14, found 15" in result.output


def test_deleting_the_first_line_fails_at_line_one(log_copy) -> None:
    log_copy.write_bytes(b"".join(lines_of(log_copy)[1:]))
    result = audit_verify(log_copy)
    assert "FAILED at line 1: missing record: expected seq 0, found 1" in result.output


def test_swapping_two_lines_fails_at_the_first(log_copy) -> None:
    lines = lines_of(log_copy)
    lines[20], lines[21] = lines[21], lines[20]
    log_copy.write_bytes(b"".join(lines))
    result = audit_verify(log_copy)
    assert result.exit_code == 1
    assert (
        "FAILED at line 21: out of order: expected seq 20, found 21 (seq 20 is at line 22)"
        in result.output
    )


def test_truncating_mid_record_reports_the_torn_tail(log_copy) -> None:
    data = log_copy.read_bytes()
    cut = sum(len(line) for line in lines_of(log_copy)[:25]) + 40
    log_copy.write_bytes(data[:cut])
    result = audit_verify(log_copy)
    assert result.exit_code == 1
    assert "FAILED at line 26: torn tail: last line incomplete (40 bytes)" in result.output
    assert "25 records before it verify" in result.output


def test_truncating_whole_records_shows_in_the_head_not_the_chain(log_copy) -> None:
    """A documented limit: dropping whole records from the end keeps a valid chain.

    The run then lacks its end record, and the head (seq, hash) no longer matches
    an externally kept copy: that comparison is how an auditor detects it.
    """
    before = verify_log(log_copy, key=None)
    log_copy.write_bytes(b"".join(lines_of(log_copy)[:20]))
    after = verify_log(log_copy, key=None)
    assert after.ok and after.head_seq == 19 and after.head_hash != before.head_hash
    assert after.open_runs == ("run-a",)
    assert "runs without an end record: run-a" in audit_verify(log_copy).output


def test_duplicated_record_is_found(log_copy) -> None:
    lines = lines_of(log_copy)
    lines.insert(5, lines[5])
    log_copy.write_bytes(b"".join(lines))
    result = audit_verify(log_copy)
    assert "FAILED at line 7: out of order or duplicated: expected seq 6, found 5" in result.output


def _rewrite_chain(path: Path, key: bytes | None, edit_line: int) -> None:
    """What an attacker with write access does: edit a record, then reseal everything after it."""
    import json

    from sbx.tools.audit_chain import algorithm, canonical

    recs = records(path)
    recs[edit_line]["data"]["text"] = "forged"
    prev = recs[0]["prev"]
    out = []
    for rec in recs:
        rec["prev"] = prev
        rec["alg"] = algorithm(key)
        rec["hash"] = seal(rec, key)
        prev = rec["hash"]
        out.append(canonical(rec) + b"\n")
    path.write_bytes(b"".join(out))
    json.loads(out[0])


def test_hmac_key_detects_a_rewritten_chain(tmp_path) -> None:
    path = tmp_path / "keyed.jsonl"
    run_calls(str(path), "run-k", 5, key=KEY)
    keyed_env = {"SBX_AUDIT_KEY": KEY}
    assert audit_verify(path, keyed_env).exit_code == 0
    assert "HMAC-SHA256 chain" in audit_verify(path, keyed_env).output
    assert "set SBX_AUDIT_KEY to verify" in audit_verify(path).output
    downgraded = tmp_path / "downgraded.jsonl"
    shutil.copy(path, downgraded)
    _rewrite_chain(downgraded, None, edit_line=4)
    assert audit_verify(downgraded).exit_code == 0  # without the key, a full rewrite is invisible
    result = audit_verify(downgraded, keyed_env)
    assert "FAILED at line 1: record sealed with 'sha256', expected 'hmac-sha256'" in result.output
    forged = tmp_path / "forged.jsonl"
    shutil.copy(path, forged)
    _rewrite_chain(forged, b"w" * 32, edit_line=4)
    result = audit_verify(forged, keyed_env)
    assert "FAILED at line 1: edited: the content does not match the record's HMAC" in result.output


def test_short_key_is_refused(tmp_path, clean_log) -> None:
    result = audit_verify(clean_log, {"SBX_AUDIT_KEY": "short"})
    assert result.exit_code == 1
    assert result.output.strip() == "Error: SBX_AUDIT_KEY must be at least 16 bytes long"


def test_kill_9_mid_write_leaves_a_torn_tail_that_the_next_writer_acknowledges(tmp_path) -> None:
    path = tmp_path / "torn.jsonl"
    torn = _kill_after_word(
        worker_command(
            "from tools_support import write_forever_then_tear",
            f"write_forever_then_tear({str(path)!r})",
        ),
        "torn",
    )
    assert torn
    report = verify_log(path, key=None)
    assert not report.ok and report.torn_tail
    assert (report.bad_line, report.records) == (21, 20)
    cli_result = audit_verify(path)
    assert "FAILED at line 21: torn tail" in cli_result.output
    # the next writer keeps the fragment, terminates it and accounts for it
    log = AuditLog.open(path, key=None, redact=Redactor())
    log.record("run-next", "outcome", {"after": "crash"})
    log.close()
    report = verify_log(path, key=None)
    assert report.ok, report.summary()
    assert report.recovered_lines == (21,)
    assert report.records == 22  # 20 + recover + the new record
    assert records_event(path, -2) == "recover"


def _kill_after_word(command: list[str], word: str) -> bool:
    """Start a writer, wait for the line `word` on its stdout (its own sign that it got there),
    then SIGKILL it. False when it ended without saying it."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        said = proc.stdout.readline() == f"{word}\n"  # EOF ("") if the writer died first
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)  # only stops a hung test
        proc.stdout.close()
    return said


def records_event(path: Path, index: int) -> str:
    lines = [
        line
        for line in path.read_text().splitlines()
        if line.startswith("{") and line.endswith("}")
    ]
    import json

    return str(json.loads(lines[index])["event"])


def test_kill_9_at_a_random_moment_verifies_up_to_the_last_complete_record(tmp_path) -> None:
    path = tmp_path / "killed.jsonl"
    command = worker_command(
        f"from tools_support import write_until_killed; write_until_killed({str(path)!r})"
    )
    assert _kill_after_word(command, "going")  # mid-stream: it keeps writing after the word
    report = verify_log(path, key=None)
    complete = path.read_bytes().count(b"\n")
    if report.ok:
        assert report.records == complete
    else:
        assert report.torn_tail and report.bad_line == complete + 1 and report.records == complete


def test_damaged_tail_stops_writers(tmp_path) -> None:
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b'{"seq": 0, "hash": "x"}\nnot json at all\n')
    log = AuditLog.open(path, key=None, redact=Redactor())
    with pytest.raises(AuditError, match="last record is damaged"):
        log.record("r", "outcome", {})
    log.close()


def test_real_cli_exit_codes(clean_log, tmp_path) -> None:
    sbx = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
    env = {k: v for k, v in os.environ.items() if k != "SBX_AUDIT_KEY"}
    ok = subprocess.run(
        [*sbx, "audit", "verify", str(clean_log)], capture_output=True, text=True, env=env
    )
    assert ok.returncode == 0 and ok.stdout.startswith("OK: 32 records")
    missing = subprocess.run(
        [*sbx, "audit", "verify", str(tmp_path / "nope.jsonl")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().count("\n") == 0 and "cannot read" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_records_larger_than_the_tail_window_chain_correctly(tmp_path) -> None:
    path = tmp_path / "big.jsonl"
    first = AuditLog.open(path, key=None, redact=Redactor())
    second = AuditLog.open(path, key=None, redact=Redactor())  # no cache: reads the tail
    first.record("r", "request", {"code": "x = 1\n" * 100_000})  # ~700 KB, > the 64 KiB window
    second.record("r", "outcome", {"ok": True})
    first.record("r", "outcome", {"again": True})  # size moved: first re-reads too
    first.close()
    second.close()
    report = verify_log(path, key=None)
    assert report.ok and report.records == 3, report.summary()


def test_audit_path_precedence(tmp_path) -> None:
    from sbx.tools.audit import DEFAULT_AUDIT_PATH, resolve_audit_path

    option, env, policy = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    environ = {"SBX_AUDIT_LOG": str(env)}
    assert resolve_audit_path(option, policy, environ) == option
    assert resolve_audit_path(None, policy, environ) == env
    assert resolve_audit_path(None, policy, {}) == policy
    assert resolve_audit_path(None, None, {}) == DEFAULT_AUDIT_PATH == Path("sbx-audit.jsonl")
