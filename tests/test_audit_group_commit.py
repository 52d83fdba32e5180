"""Concurrent appends share fsyncs, and a returned call's record is on disk.

The promise of `AuditLog.record` is unchanged by group commit: when it
returns, its record is in the file, chained, and covered by an fsync that
started after it was written. These tests watch the real `os.fsync` (a spy
that calls it), read the file from a second process at the moment a call
returns, and kill writers mid-batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sbx.tools.audit import AuditError
from sbx.tools.audit_verify import verify_log
from tools_support import open_log, records, worker_command


class FsyncSpy:
    """Calls the real fsync; remembers how many ran and how much of the log each covered."""

    def __init__(self, log_path: Path, *, hold_first_until_lines: int = 0) -> None:
        self.real = os.fsync
        self.log_path = log_path
        self.hold_until = hold_first_until_lines
        self.lock = threading.Lock()
        self.calls = 0
        self.covered = 0
        """File size that a completed fsync (started at that size or later) covers."""

    def __call__(self, fd: int) -> None:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first and self.hold_until:
            deadline = time.monotonic() + 20  # only stops a hung test: the code under test
            while self._lines() < self.hold_until and time.monotonic() < deadline:
                time.sleep(0.001)  # waits on the others' writes, which it must not block
        size = os.fstat(fd).st_size
        self.real(fd)
        with self.lock:
            self.covered = max(self.covered, size)

    def _lines(self) -> int:
        return self.log_path.read_bytes().count(b"\n")


def line_ends(path: Path) -> dict[int, int]:
    """Seq -> the file offset just past its line."""
    ends, offset = {}, 0
    for line in path.read_bytes().splitlines(keepends=True):
        offset += len(line)
        ends[json.loads(line)["seq"]] = offset
    return ends


def test_appends_written_during_an_fsync_share_the_next_one(tmp_path, monkeypatch) -> None:
    path = tmp_path / "audit.jsonl"
    spy = FsyncSpy(path, hold_first_until_lines=8)
    monkeypatch.setattr(os, "fsync", spy)
    log = open_log(path)
    start = threading.Barrier(8)

    def one(number: int) -> None:
        start.wait()
        log.record(f"run-{number}", "outcome", {"n": number})

    workers = [threading.Thread(target=one, args=(n,)) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    log.close()
    # the first fsync covers its own record; the seven written while it ran share the next
    assert spy.calls == 2
    report = verify_log(path, key=None)
    assert report.ok and report.records == 8, report.summary()


def test_every_call_returns_durable_and_chained_as_a_second_process_sees(
    tmp_path, monkeypatch
) -> None:
    path = tmp_path / "audit.jsonl"
    spy = FsyncSpy(path)
    monkeypatch.setattr(os, "fsync", spy)
    log = open_log(path)
    checker = subprocess.Popen(
        worker_command(
            f"from audit_workers import check_records; check_records({str(path)!r})"
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert checker.stdin is not None and checker.stdout is not None
    ask = threading.Lock()
    returned: list[tuple[int, int]] = []
    answers: list[str] = []
    threads, calls = 8, 12

    def body(number: int) -> None:
        for i in range(calls):
            seq = log.record(f"run-{number}", "outcome", {"n": number, "i": i})
            with spy.lock:
                covered = spy.covered  # at the moment the call returned
            with ask:  # the second process reads the file now, while others keep writing
                checker.stdin.write(f"{seq}\n")
                checker.stdin.flush()
                answers.append(checker.stdout.readline().strip())
                returned.append((seq, covered))

    try:
        workers = [threading.Thread(target=body, args=(n,)) for n in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        checker.stdin.close()
        checker.wait(timeout=30)
        checker.stdout.close()
    log.close()
    assert answers == ["ok"] * threads * calls
    ends = line_ends(path)
    late = [(seq, covered, ends[seq]) for seq, covered in returned if covered < ends[seq]]
    assert late == [], "a call returned before an fsync covering its record completed"
    # Sharing is proved by the test above, where the overlap is forced; here the checker's
    # lock can serialize the writers, so only the bound holds: never more fsyncs than calls.
    assert 0 < spy.calls <= threads * calls
    report = verify_log(path, key=None)
    assert report.ok and report.records == threads * calls, report.summary()


def test_sixteen_threads_make_one_chain_in_each_threads_order(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    log = open_log(path)

    def body(number: int) -> None:
        for i in range(50):
            log.record_many(
                f"run-{number}", [("request", {"i": i}), ("outcome", {"i": i, "ok": True})]
            )

    workers = [threading.Thread(target=body, args=(n,)) for n in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    log.close()
    report = verify_log(path, key=None)
    assert report.ok and report.records == 16 * 50 * 2, report.summary()
    recs = records(path)
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    for number in range(16):
        mine = [r for r in recs if r["run_id"] == f"run-{number}"]
        assert [(r["event"], r["data"]["i"]) for r in mine] == [
            (event, i) for i in range(50) for event in ("request", "outcome")
        ]
    owners = [r["run_id"] for r in recs]
    assert sum(a != b for a, b in zip(owners, owners[1:], strict=False)) > 16


def test_a_kill_while_a_batch_waits_for_its_fsync_leaves_a_valid_prefix(tmp_path) -> None:
    path = tmp_path / "audit.jsonl"
    marker = tmp_path / "pending"
    proc = subprocess.Popen(
        worker_command(
            "from audit_workers import batch_pending_then_hang",
            f"batch_pending_then_hang({str(path)!r}, {str(marker)!r}, 8)",
        )
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    report = verify_log(path, key=None)
    assert report.ok and report.records == 9, report.summary()  # written, never confirmed
    log = open_log(path)
    log.record("run-next", "outcome", {"after": "crash"})
    log.close()
    report = verify_log(path, key=None)
    assert report.ok and report.records == 10, report.summary()


def test_a_kill_at_a_random_moment_of_many_threads_verifies_up_to_the_last_line(
    tmp_path,
) -> None:
    path = tmp_path / "audit.jsonl"
    proc = subprocess.Popen(
        worker_command(
            f"from audit_workers import threads_until_killed; "
            f"threads_until_killed({str(path)!r}, 8)"
        )
    )
    while not path.exists() or path.stat().st_size < 300_000:
        assert proc.poll() is None
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    complete = path.read_bytes().count(b"\n")
    report = verify_log(path, key=None)
    if report.ok:
        assert report.records == complete
    else:
        assert report.torn_tail and report.records == complete, report.summary()
    log = open_log(path)
    log.record("run-next", "outcome", {"after": "crash"})
    log.close()
    assert verify_log(path, key=None).ok


def test_a_failed_fsync_stops_the_log(tmp_path, monkeypatch) -> None:
    """After a failed fsync the kernel may have dropped the pages: nothing may pretend."""
    path = tmp_path / "audit.jsonl"
    log = open_log(path)
    log.record("run-a", "outcome", {"n": 0})

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(AuditError, match="cannot sync audit log"):
        log.record("run-a", "outcome", {"n": 1})
    monkeypatch.undo()
    with pytest.raises(AuditError, match="records since the last sync may be lost"):
        log.record("run-a", "outcome", {"n": 2})
    log.close()
