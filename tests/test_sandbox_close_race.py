"""Closing a session from another thread while an execution is in flight ends it promptly."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("attempt", range(5))
def test_close_from_another_thread_wakes_the_reader(engine, tmp_path, attempt) -> None:
    session = Session.open(
        limits=Limits(timeout="60s"), image=TEST_IMAGE, engine=engine, output_dir=tmp_path
    )
    outcome = {}
    worker = threading.Thread(
        target=lambda: outcome.setdefault("r", session.run("import time\ntime.sleep(60)"))
    )
    worker.start()
    time.sleep(0.5 + attempt * 0.1)
    started = time.monotonic()
    session.close()
    engine.managed_containers()  # open new engine connections: a reused fd must not matter
    worker.join(15)
    assert not worker.is_alive(), "the reading thread did not wake up"
    assert time.monotonic() - started < 10
    assert outcome["r"].state_reset and not outcome["r"].ok
