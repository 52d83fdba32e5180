"""Acceptance 4: concurrent sessions cannot see each other's files or processes."""

from __future__ import annotations

import threading

import pytest

from conftest import TEST_IMAGE, wait_for_file_in_container
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


def test_two_live_sessions_are_isolated_and_nothing_carries_over(engine, runtime, tmp_path) -> None:
    limits = Limits(runtime=runtime, timeout="20s")
    # A's code holds its secret file and a marked process until the test has peeked from B
    holder = (
        "import os, subprocess, time\n"
        "marked = subprocess.Popen(['sleep', '300.777'])\n"
        "open('/tmp/secret-a', 'w').write('a')\n"
        "while not os.path.exists('/tmp/peeked'):\n"
        "    time.sleep(0.02)\n"
        "marked.kill()\n"
    )
    peek = (
        "import os\nprint(os.path.exists('/tmp/secret-a'))\n"
        "print([p for p in os.listdir('/proc') if p.isdigit()\n"
        "       and b'300.777' in open(f'/proc/{p}/cmdline', 'rb').read()])\n"
        "print(open('/proc/meminfo').read().count('MemTotal'))"
    )
    with (
        Session.open(
            SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path / "a"), engine=engine
        ) as a,
        Session.open(
            SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path / "b"), engine=engine
        ) as b,
    ):
        held = {}
        busy = threading.Thread(target=lambda: held.setdefault("r", a.run(holder)))
        busy.start()
        assert a.container_id is not None
        wait_for_file_in_container(engine, a.container_id, "/tmp/secret-a")  # A is holding
        seen = b.run(peek)
        _touch(engine, a.container_id, "/tmp/peeked")
        busy.join(60)  # only stops a hung test
        assert held["r"].ok, held["r"]
        assert a.run("import os; print(os.path.exists('/tmp/secret-a'))").stdout == "True\n"
    assert seen.stdout.splitlines()[:2] == ["False", "[]"]
    with Session.open(
        SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path / "c"), engine=engine
    ) as c:
        assert c.run("import os; print(os.path.exists('/tmp/secret-a'))").stdout == "False\n"


def _touch(engine, container_id: str, path: str) -> None:
    """Create `path` in the container from the host (through `docker exec`)."""
    exec_id = engine.api.exec_create(container_id, ["touch", path])["Id"]
    engine.api.exec_start(exec_id)
    assert engine.api.exec_inspect(exec_id)["ExitCode"] == 0
