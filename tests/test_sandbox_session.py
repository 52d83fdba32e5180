"""Acceptance 5: state persists in a session; a timeout resets it and says so."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session, new_run_id, run_fresh
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


def test_session_keeps_variables_between_executions(session: Session) -> None:
    assert session.run("x = 41").ok
    result = session.run("x + 1")
    assert result.stdout == "42\n" and not result.state_reset


def test_after_a_timeout_the_next_execution_works_and_reports_the_reset(
    engine, runtime, tmp_path
) -> None:
    with Session.open(
        SessionSpec(
            limits=Limits(runtime=runtime, timeout="2s"), image=TEST_IMAGE, output_dir=tmp_path
        ),
        engine=engine,
    ) as session:
        session.run("x = 41")
        stuck = session.run("import time\ntime.sleep(60)")
        assert stuck.timed_out and stuck.state_reset
        assert any("variables were reset" in note for note in stuck.notes)
        after = session.run("print('alive'); print('x' in globals())")
    assert after.ok and after.stdout == "alive\nFalse\n"


def test_traceback_is_trimmed_to_the_users_frames(session: Session) -> None:
    result = session.run("def f():\n    return [1, 2].mean()\n\nf()")
    assert result.error is not None and result.error.type == "AttributeError"
    assert "runner.py" not in result.error.traceback
    assert '<cell-1>", line 4' in result.error.traceback
    assert "return [1, 2].mean()" in result.error.traceback


def test_sys_exit_and_os_exit(session: Session) -> None:
    assert session.run("import sys; sys.exit(3)").exit_code == 3
    died = session.run("import os; os._exit(7)")
    assert died.exit_code == 7 and died.state_reset
    assert session.run("print('still here')").ok


def test_fresh_mode_uses_a_new_container_each_time(engine, runtime, tmp_path) -> None:
    ids = [new_run_id(), new_run_id()]
    first = run_fresh(
        "y = 1",
        SessionSpec(
            image=TEST_IMAGE, limits=Limits(runtime=runtime), run_id=ids[0], output_dir=tmp_path
        ),
        engine=engine,
    )
    second = run_fresh(
        "print('y' in globals())",
        SessionSpec(
            image=TEST_IMAGE, run_id=ids[1], limits=Limits(runtime=runtime), output_dir=tmp_path
        ),
        engine=engine,
    )
    assert first.ok and second.stdout == "False\n"
    left = [c for c in engine.managed_containers() if c["Labels"].get("sbx.run_id") in ids]
    assert not left


def test_bad_code_is_refused_before_any_container(engine, runtime, tmp_path) -> None:
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        run_fresh(
            b"print('\xff')", SessionSpec(image=TEST_IMAGE, output_dir=tmp_path), engine=engine
        )
    with pytest.raises(InvalidInput, match="max_code_bytes"):
        run_fresh(
            "x = 1\n" * 300_000, SessionSpec(image=TEST_IMAGE, output_dir=tmp_path), engine=engine
        )


PROBE_DESCRIPTORS = """
import json, os
fds = {}
for fd in sorted(int(n) for n in os.listdir('/proc/self/fd')):
    try:
        fds[fd] = os.readlink(f'/proc/self/fd/{fd}')
    except OSError:
        pass  # the descriptor listdir itself used, closed by now
try:
    os.listdir(f'/proc/{os.getppid()}/fd')
    runner = 'readable'
except PermissionError:
    runner = 'denied'
print(json.dumps({'fds': fds, 'runner': runner}))
"""


def test_user_code_holds_only_its_own_pipes_and_cannot_reach_the_runners(
    session: Session, runtime: str
) -> None:
    """C16: the interpreter keeps no descriptor of the protocol stream or the cgroup files,
    and under runc cannot even list the runner's descriptors through /proc.

    gVisor's /proc lists them (names only) to another uid; opening one is denied there
    too (test_runner_protocol_walls.py::test_code_runner_and_init_run_as_three_users).
    """
    seen = json.loads(session.run(PROBE_DESCRIPTORS).stdout)
    fds = {int(fd): target for fd, target in seen["fds"].items()}
    assert set(fds) <= {0, 1, 2, 3, 4}, fds
    assert fds[0] == "/dev/null"
    assert all(fds[fd].startswith("pipe:") for fd in (1, 2, 3, 4)), fds
    assert seen["runner"] == ("denied" if runtime == "runc" else "readable")
    reset = session.run("import os; os._exit(1)")
    assert reset.state_reset  # a new kernel after a reset is just as bare
    again = json.loads(session.run(PROBE_DESCRIPTORS).stdout)
    assert {int(fd) for fd in again["fds"]} <= {0, 1, 2, 3, 4}


def test_each_forked_interpreter_seeds_its_own_random_state(session: Session) -> None:
    """Interpreters are forked from the runner: none may inherit a seeded `random` state."""
    draw = "import random; print(random.getrandbits(64))"
    first = session.run(draw).stdout
    assert session.run("import os; os._exit(1)").state_reset
    second = session.run(draw).stdout
    assert first and second and first != second


def test_the_interpreter_is_the_oom_killers_first_choice(session: Session) -> None:
    """C6: the forked interpreter (made dumpable again) sets its own oom_score_adj to 1000."""
    result = session.run("print(open('/proc/self/oom_score_adj').read().strip())")
    assert result.stdout == "1000\n"
