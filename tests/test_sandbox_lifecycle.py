"""Containers go away on success, error, Ctrl-C, and when their owner process is killed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.gc import collect_orphans
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session

pytestmark = pytest.mark.docker


def _wait_until_gone(engine, run_id: str, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ids = [c for c in engine.managed_containers() if c["Labels"].get("sbx.run_id") == run_id]
        if not ids:
            return True
        time.sleep(0.2)
    return False


def test_ctrl_c_during_an_execution_removes_the_container(engine, runtime, tmp_path) -> None:
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    timer = threading.Timer(1.5, lambda: signal.pthread_kill(main_thread, signal.SIGINT))
    session = Session.open(
        limits=Limits(runtime=runtime, timeout="30s"),
        image=TEST_IMAGE,
        engine=engine,
        output_dir=tmp_path,
    )
    timer.start()
    with pytest.raises(KeyboardInterrupt), session:
        session.run("import time\ntime.sleep(60)")
    assert _wait_until_gone(engine, session.run_id, 5)


OWNER = f"""
import sys, time
from pathlib import Path
from sbx.sandbox.session import Session
s = Session.open(image={TEST_IMAGE!r}, output_dir=Path(sys.argv[1]))
print(s.run_id, flush=True)
s.run("x = 1")
time.sleep(300)
"""


def test_container_of_a_killed_owner_disappears_without_gc(engine, runtime, tmp_path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    run_id = owner.stdout.readline().strip()
    time.sleep(0.5)
    assert any(c["Labels"].get("sbx.run_id") == run_id for c in engine.managed_containers())
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    assert _wait_until_gone(engine, run_id), "runner did not exit when its owner died"


def test_gc_removes_orphans_and_spares_live_sessions(engine, runtime, tmp_path) -> None:
    from sbx.sandbox.config import container_config

    orphan = engine.create(
        container_config(
            Limits(runtime=runtime),
            run_id="orphan-test",
            mode="fresh",
            image=TEST_IMAGE,
            owner=f"{socket.gethostname()}:4194305",  # a pid above pid_max: dead,
        )
    )
    with Session.open(image=TEST_IMAGE, engine=engine, output_dir=tmp_path) as live:
        removed = collect_orphans(engine)
        assert [item["run_id"] for item in removed] == ["orphan-test"]
        assert live.run("print(1)").ok
    assert orphan[:12] == removed[0]["id"]


def test_gc_leaves_other_hosts_containers_unless_told(engine, runtime, tmp_path) -> None:
    from sbx.sandbox.config import container_config

    foreign = engine.create(
        container_config(
            Limits(runtime=runtime),
            run_id="foreign-host",
            mode="fresh",
            image=TEST_IMAGE,
            owner="another-host:1",
        )
    )
    try:
        assert "foreign-host" not in [item["run_id"] for item in collect_orphans(engine)]
        assert any(c["Id"] == foreign for c in engine.managed_containers())
    finally:
        engine.remove(foreign)
