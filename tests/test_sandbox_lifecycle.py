"""Containers go away on success, error, Ctrl-C, and when their owner process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from conftest import TEST_IMAGE, engine_knows, wait_for_file_in_container, wait_until_removed
from sbx.sandbox.gc import collect_orphans, owner_tag
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


def _containers_of(engine, run_id: str) -> list[str]:
    return [c["Id"] for c in engine.managed_containers() if c["Labels"].get("sbx.run_id") == run_id]


def test_ctrl_c_during_an_execution_removes_the_container(engine, runtime, tmp_path) -> None:
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    session = Session.open(
        SessionSpec(
            limits=Limits(runtime=runtime, timeout="30s"), image=TEST_IMAGE, output_dir=tmp_path
        ),
        engine=engine,
    )
    container_id = session.container_id
    assert container_id is not None

    def interrupt_once_running() -> None:
        wait_for_file_in_container(engine, container_id, "/tmp/started")
        signal.pthread_kill(main_thread, signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_running, daemon=True)
    watcher.start()
    with pytest.raises(KeyboardInterrupt), session:
        session.run("open('/tmp/started', 'w').close()\nimport time\ntime.sleep(60)")
    watcher.join(60)  # only stops a hung test
    assert session.container_id is None
    wait_until_removed(engine, container_id)
    assert _containers_of(engine, session.run_id) == []


OWNER = f"""
import sys, time
from pathlib import Path
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec
s = Session.open(SessionSpec(image={TEST_IMAGE!r}, output_dir=Path(sys.argv[1])))
s.run("x = 1")
print(s.run_id, flush=True)  # the session is up and has served a run
time.sleep(300)  # until the test kills it
"""


def test_container_of_a_killed_owner_disappears_without_gc(engine, runtime, tmp_path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    run_id = owner.stdout.readline().strip()
    assert run_id, "the owner process did not open its session"
    (container_id,) = _containers_of(engine, run_id)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    wait_until_removed(engine, container_id)  # the runner exits when its owner dies


def test_gc_removes_orphans_and_spares_live_sessions(engine, runtime, tmp_path) -> None:
    from sbx.sandbox.config import container_config

    orphan = engine.create(
        container_config(
            Limits(runtime=runtime),
            run_id="orphan-test",
            mode="fresh",
            image=TEST_IMAGE,
            owner=owner_tag(4194305),  # a pid above pid_max: dead,
        )
    )
    with Session.open(SessionSpec(image=TEST_IMAGE, output_dir=tmp_path), engine=engine) as live:
        removed = collect_orphans(engine)
        # Another xdist worker's collector (gc, or any pool start) may have taken ours first,
        # and ours may take its orphan: the orphan is gone, the live session is untouched.
        assert not engine_knows(engine, orphan)
        assert live.container_id is not None
        assert live.container_id[:12] not in {item["id"] for item in removed}
        assert live.run("print(1)").ok


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
