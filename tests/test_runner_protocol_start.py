"""No code runs unless the runner can keep the protocol to itself.

The container now starts as root and the runner drops privileges itself, so two
misconfigurations would run code with too much: an image whose runner predates the
separation (it would run code as root), and a container started as the code's user
(the runner could not separate, and code would share its uid). Both are refused before
any code runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sbx.sandbox.session as session_module
from conftest import TEST_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker

OLD_RUNNER = r"""
import os, sys
os.write(1, b'{"type": "ready", "protocol": VERSION}\n')
sys.stdin.read()
"""


def patch_config(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """Change the create config the session uses (the rest stays the real one)."""
    original = session_module.container_config

    def config(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {**original(*args, **kwargs), **changes}

    monkeypatch.setattr(session_module, "container_config", config)


@pytest.mark.parametrize("version", [1, 2])
def test_a_runner_of_another_protocol_version_is_refused(
    monkeypatch: pytest.MonkeyPatch, engine: Engine, tmp_path: Path, version: int
) -> None:
    """1 ran code as the container's user (root now); 2 neither streams output nor forks
    kernels with the stack imported, and its result would be read as the tail of frames it
    never sent."""
    runner = OLD_RUNNER.replace("VERSION", str(version))
    patch_config(monkeypatch, command=["python3", "-I", "-u", "-c", runner])
    expected = rf"protocol {version}, this sbx needs 3: rebuild the image"
    with pytest.raises(SandboxBroken, match=expected):
        Session.open(
            SessionSpec(limits=Limits(), image=TEST_IMAGE, output_dir=tmp_path), engine=engine
        )


def test_a_runner_that_cannot_separate_users_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, engine: Engine, runtime: str, tmp_path: Path
) -> None:
    """Started as uid 1000 (the landed configuration), the runner could not give code a
    uid of its own: it says so instead of serving."""
    patch_config(monkeypatch, user="1000:1000")
    with pytest.raises(SandboxBroken, match=r"could not start: cannot separate users.*root"):
        Session.open(
            SessionSpec(limits=Limits(runtime=runtime), image=TEST_IMAGE, output_dir=tmp_path),
            engine=engine,
        )
