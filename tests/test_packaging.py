"""One import namespace: `sbx.*` works from a directory full of same-named modules of a user's.

The folders stay at the top level of the repository, and setuptools' `package-dir` maps
them under `sbx`. A user's own `agent.py`, `tools.py` or `sandbox.py` beside their script
must never shadow ours.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import TEST_IMAGE

ROOT = Path(__file__).resolve().parents[1]
SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]


@pytest.fixture
def shadowing_dir(tmp_path: Path) -> Path:
    """A working directory whose own modules carry our folders' old top-level names."""
    for name in ("agent", "tools", "sandbox", "images"):
        shadow = f"raise SystemExit('the user\\'s own {name}.py ran')\n"
        (tmp_path / f"{name}.py").write_text(shadow)
    (tmp_path / "job.py").write_text("print(6 * 7)\n")
    return tmp_path


def test_every_package_folder_is_installed_under_sbx() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        "sbx." + str(init.parent.relative_to(ROOT)).replace("/", ".")
        for top in ("agent", "sandbox", "tools", "images")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert on_disk <= listed, f"package folders missing from pyproject: {on_disk - listed}"
    assert set(config["package-dir"]) == {"sbx.agent", "sbx.sandbox", "sbx.tools", "sbx.images"}


def test_import_works_beside_a_users_own_agent_and_tools(shadowing_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sbx.agent, sbx.tools, sbx.sandbox, sbx.images; "
         "import sbx.agent.core.loop; print(sbx.agent.core.loop.__name__)"],
        cwd=shadowing_dir, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sbx.agent.core.loop"


@pytest.mark.docker
def test_exec_and_demo_work_beside_a_users_own_modules(engine: object, shadowing_dir: Path) -> None:
    env = {**os.environ, "SBX_AUDIT_LOG": str(shadowing_dir / "audit.jsonl")}
    ran = subprocess.run(
        [*SBX, "exec", "job.py", "--image", TEST_IMAGE, "--output", "out"],
        cwd=shadowing_dir, capture_output=True, text=True, timeout=120, env=env,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "42\n"
    demo = subprocess.run(
        [*SBX, "demo", "--image", TEST_IMAGE, "--quiet"],
        cwd=shadowing_dir, capture_output=True, text=True, timeout=300, env=env,
    )
    assert demo.returncode == 0, demo.stderr
    assert "South grew fastest in 2024" in demo.stdout
