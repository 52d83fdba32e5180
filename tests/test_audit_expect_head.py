"""What a hash chain cannot see alone: records cut from the end, an emptied file.

`sbx audit verify` prints the head hash and record count and says it did not
check truncation; given back with `--expect-head` and `--expect-records`, they
catch exactly that, while later appends still verify.
"""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from sbx.agent.cli.main import cli
from tools_support import run_calls

ENV = {"SBX_AUDIT_KEY": ""}


def verify(path: Path, *flags: str):
    return CliRunner().invoke(cli, ["audit", "verify", str(path), *flags], env=ENV)


def kept_head(path: Path) -> tuple[str, str]:
    """The head hash and the record count as an operator copies them from the output."""
    output = verify(path).output
    found = re.search(r"OK: (\d+) records, .* head seq \d+ ([0-9a-f]{64})", output)
    assert found, output
    return found.group(2), found.group(1)


def make_log(tmp_path: Path, calls: int = 3) -> Path:
    path = tmp_path / "audit.jsonl"
    run_calls(str(path), "run-a", calls)  # 1 start + 3 per call + 1 end
    return path


def test_without_an_expected_head_verify_says_what_it_did_not_check(tmp_path):
    log = make_log(tmp_path)
    head, count = kept_head(log)

    outcome = verify(log)

    assert outcome.exit_code == 0
    assert "not checked: records cut from the end, or an emptied file" in outcome.output
    assert f"--expect-head {head} --expect-records {count}" in outcome.output
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    emptied = verify(empty)
    assert emptied.exit_code == 0 and "an emptied file verifies as an empty log" in emptied.output


def test_a_truncated_or_emptied_log_fails_against_the_kept_head(tmp_path):
    log = make_log(tmp_path)
    head, count = kept_head(log)
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:-2]))
    emptied = tmp_path / "emptied.jsonl"
    emptied.write_bytes(b"")

    for damaged in (truncated, emptied):
        by_head = verify(damaged, "--expect-head", head)
        by_count = verify(damaged, "--expect-records", count)
        assert verify(damaged).exit_code == 0  # the chain alone cannot tell
        assert by_head.exit_code == 1
        assert f"FAILED: the expected head {head} is not in the log" in by_head.output
        assert by_count.exit_code == 1
        assert f"FAILED: expected at least {count} records" in by_count.output


def test_appends_after_the_kept_head_still_verify(tmp_path):
    log = make_log(tmp_path)
    head, count = kept_head(log)
    run_calls(str(log), "run-b", 2)

    outcome = verify(log, "--expect-head", head.upper(), "--expect-records", count)

    assert outcome.exit_code == 0, outcome.output
    assert "expected head found; 8 record(s) appended after it" in outcome.output


def test_a_replaced_log_with_the_same_count_fails(tmp_path):
    log = make_log(tmp_path)
    head, count = kept_head(log)
    other = tmp_path / "other"
    other.mkdir()
    rewritten = make_log(other)  # a fresh, valid chain of the same length

    outcome = verify(rewritten, "--expect-head", head, "--expect-records", count)

    assert outcome.exit_code == 1 and "is not in the log" in outcome.output


def test_the_head_must_be_at_the_kept_count(tmp_path):
    log = make_log(tmp_path)
    head, count = kept_head(log)

    outcome = verify(log, "--expect-head", head, "--expect-records", str(int(count) - 1))

    assert outcome.exit_code == 1
    assert f"the expected head is record {count}, not record {int(count) - 1}" in outcome.output


def test_a_malformed_head_is_a_usage_error(tmp_path):
    outcome = verify(make_log(tmp_path), "--expect-head", "abc")
    assert outcome.exit_code == 2 and "64 hex digits" in outcome.output
