"""Closing a session from another thread while an execution is in flight ends it promptly."""

from __future__ import annotations

import threading

import pytest

from conftest import TEST_IMAGE, wait_for_file_in_container
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("attempt", range(5))
def test_close_from_another_thread_wakes_the_reader(engine, tmp_path, attempt) -> None:
    session = Session.open(
        SessionSpec(limits=Limits(timeout="60s"), image=TEST_IMAGE, output_dir=tmp_path),
        engine=engine,
    )
    outcome = {}
    code = (
        f"open('/tmp/started', 'w').close()\nsum(range({attempt} * 10**6))\n"
        "import time\ntime.sleep(60)"
    )
    worker = threading.Thread(target=lambda: outcome.setdefault("r", session.run(code)))
    worker.start()
    assert session.container_id is not None
    wait_for_file_in_container(engine, session.container_id, "/tmp/started")
    session.close()
    engine.managed_containers()  # open new engine connections: a reused fd must not matter
    worker.join(15)  # a deadline, far below the execution's own 60 s timeout
    assert not worker.is_alive(), "the reading thread did not wake up"
    assert outcome["r"].state_reset and not outcome["r"].ok
