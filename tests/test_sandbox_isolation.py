"""Acceptance (issue 6) 4: concurrent sessions cannot see each other's files or processes."""

from __future__ import annotations

import threading

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session

pytestmark = pytest.mark.docker


def test_two_live_sessions_are_isolated_and_nothing_carries_over(engine, runtime, tmp_path) -> None:
    limits = Limits(runtime=runtime, timeout="20s")
    holder = (
        "open('/tmp/secret-a', 'w').write('a')\nimport subprocess\n"
        "subprocess.run(['sleep', '3.777'])"
    )
    peek = (
        "import os, time\ntime.sleep(1)\nprint(os.path.exists('/tmp/secret-a'))\n"
        "print([p for p in os.listdir('/proc') if p.isdigit()\n"
        "       and b'3.777' in open(f'/proc/{p}/cmdline', 'rb').read()])\n"
        "print(open('/proc/meminfo').read().count('MemTotal'))"
    )
    with (
        Session.open(
            limits=limits, image=TEST_IMAGE, engine=engine, output_dir=tmp_path / "a"
        ) as a,
        Session.open(
            limits=limits, image=TEST_IMAGE, engine=engine, output_dir=tmp_path / "b"
        ) as b,
    ):
        busy = threading.Thread(target=a.run, args=(holder,))
        busy.start()
        seen = b.run(peek)
        busy.join()
        assert a.run("import os; print(os.path.exists('/tmp/secret-a'))").stdout == "True\n"
    assert seen.stdout.splitlines()[:2] == ["False", "[]"]
    with Session.open(
        limits=limits, image=TEST_IMAGE, engine=engine, output_dir=tmp_path / "c"
    ) as c:
        assert c.run("import os; print(os.path.exists('/tmp/secret-a'))").stdout == "False\n"
