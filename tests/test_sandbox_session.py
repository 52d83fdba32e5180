"""Acceptance 5: state persists in a session; a timeout resets it and says so."""

from __future__ import annotations

import pytest

from conftest import TEST_IMAGE
from sandbox.errors import InvalidInput
from sandbox.limits import Limits
from sandbox.session import Session, new_run_id, run_fresh

pytestmark = pytest.mark.docker


def test_session_keeps_variables_between_executions(session: Session) -> None:
    assert session.run("x = 41").ok
    result = session.run("x + 1")
    assert result.stdout == "42\n" and not result.state_reset


def test_after_a_timeout_the_next_execution_works_and_reports_the_reset(
    engine, runtime, tmp_path
) -> None:
    with Session.open(
        limits=Limits(runtime=runtime, timeout="2s"),
        image=TEST_IMAGE,
        engine=engine,
        output_dir=tmp_path,
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
        image=TEST_IMAGE,
        limits=Limits(runtime=runtime),
        run_id=ids[0],
        engine=engine,
        output_dir=tmp_path,
    )
    second = run_fresh(
        "print('y' in globals())",
        image=TEST_IMAGE,
        run_id=ids[1],
        limits=Limits(runtime=runtime),
        engine=engine,
        output_dir=tmp_path,
    )
    assert first.ok and second.stdout == "False\n"
    left = [c for c in engine.managed_containers() if c["Labels"].get("sbx.run_id") in ids]
    assert not left


def test_bad_code_is_refused_before_any_container(engine, runtime, tmp_path) -> None:
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        run_fresh(b"print('\xff')", image=TEST_IMAGE, engine=engine, output_dir=tmp_path)
    with pytest.raises(InvalidInput, match="max_code_bytes"):
        run_fresh("x = 1\n" * 300_000, image=TEST_IMAGE, engine=engine, output_dir=tmp_path)
