"""Subprocess bodies for the group-commit tests: many threads appending to one audit log.

Run through `tools_support.worker_command`, so a test can kill the process
(SIGKILL) at a moment it chooses and then check what the file holds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from sbx.tools.audit_verify import verify_log
from tools_support import open_log


def threads_until_killed(log_path: str, threads: int) -> None:
    """Append from `threads` threads as fast as possible until the process is killed."""
    log = open_log(Path(log_path))

    def body(number: int) -> None:
        i = 0
        while True:
            log.record(f"run-{number}", "outcome", {"i": i, "pad": "x" * (i * 37 % 3000)})
            i += 1

    for number in range(threads):
        threading.Thread(target=body, args=(number,), daemon=True).start()
    threading.Event().wait()


def batch_pending_then_hang(log_path: str, marker: str, threads: int) -> None:
    """Every thread writes one record while the fsync is held; say so, then wait to be killed.

    The first fsync blocks (as a slow disk would) once all the threads' records
    are in the file: the batch is written, and none of its calls has returned.
    """
    real_fsync = os.fsync
    log = open_log(Path(log_path))
    log.record("run-before", "outcome", {"synced": True})

    def held(fd: int) -> None:
        deadline = time.monotonic() + 60
        while Path(log_path).read_bytes().count(b"\n") < 1 + threads:
            if time.monotonic() > deadline:
                sys.exit("the batch never arrived")
            time.sleep(0.001)
        Path(marker).write_text("pending")
        time.sleep(600)

    os.fsync = held
    for number in range(threads):
        threading.Thread(
            target=log.record, args=(f"run-{number}", "outcome", {"n": number}), daemon=True
        ).start()
    threading.Event().wait()
    os.fsync = real_fsync


def check_records(log_path: str) -> None:
    """Answer each seq read from stdin: `ok` when the file holds it, chained from the start.

    A concurrent writer may be mid-write (a torn tail): the records before it
    must verify, up to and including the one asked about.
    """
    for line in sys.stdin:
        seq = int(line)
        report = verify_log(Path(log_path), key=None)
        fine = (report.ok or report.torn_tail) and report.records > seq
        sys.stdout.write(("ok" if fine else f"missing {seq}: {report.summary()}") + "\n")
        sys.stdout.flush()
