"""User code cannot speak the runner protocol, stop the runner or reach init.

Each test is an attack a hostile program made on the landed code (it succeeded there,
under runc and gVisor): forge the result of its own execution through init's copy of
the attach stream, or stop the runner and answer every later request itself. Both need
descriptors or signals that only the same uid may use; the code now runs as uid 1000,
the runner as 999 and init as root, so both fail under both runtimes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.session import Session

pytestmark = pytest.mark.docker

FORGE_RESULT = """
import json, os, sys
cell = int(sys._getframe().f_code.co_filename.strip('<>').split('-')[1])
frame = {"type": "result", "id": cell, "exit_code": 0, "error": None, "stdout": "forged\\n",
         "stdout_total": 7, "stdout_dropped": 0, "stderr": "", "stderr_total": 0,
         "stderr_dropped": 0, "timed_out": False, "killed_signal": None, "oom_killed": False,
         "state_reset": False, "cpu_seconds": 0.0, "peak_memory_bytes": 1, "refused": []}
zygote = os.getppid()  # the code's parent forks interpreters; its parent is the runner
runner = int(open(f"/proc/{zygote}/stat").read().rsplit(") ", 1)[1].split()[1])
for target in ("/proc/1/fd/1", f"/proc/{runner}/fd/1"):
    try:
        stream = os.open(target, os.O_WRONLY)
        os.write(stream, (json.dumps(frame) + "\\n").encode())
    except OSError as exc:
        print(target, "refused:", exc.strerror)
1 / 0
"""


def test_code_cannot_forge_its_own_result(session: Session) -> None:
    """A program that fails but writes a `result` frame to init's stdout first is still
    reported as failed, and the session goes on in turn (no forged frame is waiting)."""
    assert session.run("x = 1").ok
    result = session.run(FORGE_RESULT)
    assert "forged" not in result.stdout
    assert result.error is not None and result.error.type == "ZeroDivisionError"
    assert result.exit_code == 1 and not result.ok
    assert result.stdout.count("refused: Permission denied") == 2, result.stdout
    after = session.run("print(x)")
    assert after.stdout == "1\n" and not after.state_reset and not after.notes


TAKEOVER = """
import json, os, signal, sys, threading, time
runner = int(open(f"/proc/{os.getppid()}/stat").read().rsplit(") ", 1)[1].split()[1])
answer = {"type": "result", "exit_code": 0, "error": None, "stdout": "hijacked\\n",
          "stdout_total": 9, "stdout_dropped": 0, "stderr": "", "stderr_total": 0,
          "stderr_dropped": 0, "timed_out": False, "killed_signal": None, "oom_killed": False,
          "state_reset": False, "cpu_seconds": 0.0, "peak_memory_bytes": 1, "refused": []}
attempts = []

def hijack():
    time.sleep(1.0)  # let this execution's own result go out first
    try:
        os.kill(runner, signal.SIGSTOP)
        requests = os.open("/proc/1/fd/0", os.O_RDONLY)
        replies = os.open("/proc/1/fd/1", os.O_WRONLY)
    except OSError as exc:
        attempts.append(exc.strerror)
        return
    pending = b""
    while chunk := os.read(requests, 1 << 16):
        pending += chunk
        while b"\\n" in pending:
            line, pending = pending.split(b"\\n", 1)
            frame = dict(answer, id=json.loads(line)["id"])
            os.write(replies, (json.dumps(frame) + "\\n").encode())

threading.Thread(target=hijack, daemon=True).start()
"""


def test_a_thread_left_behind_cannot_take_the_session_over(session: Session) -> None:
    """A thread in the persistent interpreter tries to stop the runner and answer later
    requests itself: honest code's output and failures must still be its own."""
    assert session.run("kept = 'state'").ok
    assert session.run(TAKEOVER).ok
    failing = session.run("import time\ntime.sleep(2)\nprint('honest')\nraise ValueError('real')")
    assert failing.stdout == "honest\n", failing
    assert failing.error is not None and failing.error.type == "ValueError"
    after = session.run("print(kept, attempts)")
    assert after.stdout == "state ['Operation not permitted']\n", after
    assert not after.state_reset


IDENTITY = r"""
import json, os
def status(pid):
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    keys = ("Name", "Uid", "Gid", "CapEff", "CapPrm", "CapBnd")
    return {key: fields[key].split() for key in keys}
def parent(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()[1])
def attempt(action):
    try:
        action()
        return "allowed"
    except OSError as exc:
        return exc.strerror
zygote = os.getppid()
runner = parent(zygote)
tries = {}
for pid, fds in ((1, (0, 1)), (runner, (0, 1)), (zygote, (3,))):  # streams; control socket
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        tries[f"open {path}"] = attempt(lambda: os.close(os.open(path, os.O_RDWR)))
    tries[f"open {pid}/mem"] = attempt(lambda: open(f"/proc/{pid}/mem", "rb").close())
    tries[f"signal {pid}"] = attempt(lambda: os.kill(pid, 0))
print(json.dumps({"code": status("self"), "runner": status(runner), "init": status(1),
                  "zygote": status(zygote), "runner_is_child_of_init": parent(runner) == 1,
                  "tries": tries}))
"""

NO_CAPS = ["0000000000000000"]
RUNNER_CAPS = ["00000000000000e0"]  # KILL, SETGID, SETUID
ZYGOTE_CAPS = ["00000000000000c0"]  # SETGID, SETUID: its kernels drop to uid 1000 with them


def test_code_runner_zygote_and_init_run_as_three_users(session: Session) -> None:
    """Code: uid 1000, no capability in any set. Runner: uid 999, only the capabilities it
    uses, an empty bounding set. The zygote that forks each interpreter: uid 999, only the
    capabilities its kernels need to drop. Init: root. Code can neither open their
    descriptors (the protocol stream, the zygote's control socket) or memory nor signal
    them."""
    seen = json.loads(session.run(IDENTITY).stdout)
    code, runner, init, zygote = seen["code"], seen["runner"], seen["init"], seen["zygote"]
    assert code["Uid"] == ["1000"] * 4 and code["Gid"] == ["1000"] * 4
    assert code["CapEff"] == code["CapPrm"] == code["CapBnd"] == NO_CAPS
    assert runner["Uid"] == ["999"] * 4 and runner["Gid"] == ["999"] * 4
    assert runner["CapEff"] == runner["CapPrm"] == RUNNER_CAPS and runner["CapBnd"] == NO_CAPS
    assert zygote["Name"] == ["sbx-zygote"] and zygote["Uid"] == ["999"] * 4
    assert zygote["CapEff"] == zygote["CapPrm"] == ZYGOTE_CAPS and zygote["CapBnd"] == NO_CAPS
    assert init["Uid"] == ["0"] * 4 and seen["runner_is_child_of_init"]
    # gVisor re-opens what a /proc fd link names with the caller's rights: a socket never.
    denied = {"Permission denied", "Operation not permitted", "No such device or address"}
    assert len(seen["tries"]) == 11 and set(seen["tries"].values()) <= denied, seen["tries"]
    reset = session.run("import os; os._exit(3)")
    assert reset.state_reset and reset.exit_code == 3  # the zygote reaped it for the runner
    again = json.loads(session.run(IDENTITY).stdout)
    assert again["code"] == code and set(again["tries"].values()) <= denied


def test_sbx_exec_exits_with_the_real_status_of_a_forging_program(runtime: str, tmp_path) -> None:
    """The CLI reported the forged frame as success (exit 0) on the landed code."""
    done = subprocess.run(
        [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
        + ["exec", "-", "--image", TEST_IMAGE, "--runtime", runtime, "--timeout", "20s"],
        input=FORGE_RESULT.encode(),
        capture_output=True,
        timeout=180,
        cwd=tmp_path,
        env=dict(os.environ),
    )
    assert done.returncode == 1, done
    assert b"forged" not in done.stdout
    assert b"ZeroDivisionError" in done.stderr
