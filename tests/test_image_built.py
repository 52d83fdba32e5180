"""The built sandbox image keeps its contract: labels, user, runner, and an offline data stack.

These tests inspect the image that `sbx image build` produced (CI builds it
first); they never build it themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest

from sbx.images.build import REPOSITORY, current_recipe
from sbx.sandbox.config import MANAGED_LABEL, OWNER_LABEL
from sbx.sandbox.gc import owner_tag

pytestmark = pytest.mark.docker

IMAGE = f"{REPOSITORY}:latest"
STACK = "numpy, pandas, pyarrow, scipy, matplotlib, seaborn, sklearn, statsmodels, openpyxl"


@pytest.fixture(scope="module")
def client() -> docker.DockerClient:
    try:
        found = docker.from_env(timeout=30)
        found.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"needs a running Docker engine (`dockerd &`): {exc}")
    return found


@pytest.fixture(scope="module")
def image(client: docker.DockerClient) -> Any:
    try:
        return client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{IMAGE} is missing: run `sbx image build` first")


@pytest.fixture
def run(client: docker.DockerClient, image: Any) -> Iterator[Any]:
    """Run a command in a throw-away, offline, read-only container; return (exit code, output)."""
    created: list[Any] = []

    def _run(*command: str) -> tuple[int, str]:
        container = client.containers.create(
            image.id, list(command), network_mode="none", read_only=True,
            tmpfs={"/tmp": "size=64m"},
            labels={MANAGED_LABEL: "true", OWNER_LABEL: owner_tag()},  # not an orphan to `sbx gc`
        )
        created.append(container)
        container.start()
        status = container.wait(timeout=300)
        return int(status["StatusCode"]), container.logs().decode()

    yield _run
    for container in created:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass


def test_labels_name_the_current_recipe(image: Any) -> None:
    assert image.labels["sbx.image"] == "true"
    recipe_hash = current_recipe().recipe_hash()
    assert image.labels["sbx.recipe"] == recipe_hash, "image is stale: run `sbx image build`"
    assert f"{REPOSITORY}:r-{recipe_hash[:12]}" in image.tags


def test_config_runs_the_runner_as_user_1000(image: Any) -> None:
    config = image.attrs["Config"]
    assert config["User"] == "1000:1000"
    assert config["WorkingDir"] == "/work"
    assert config["Cmd"] == ["python3", "-I", "-u", "/opt/sbx/runner.pyc"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["LANG"] == "C.UTF-8"
    assert env["MPLBACKEND"] == "Agg"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_filesystem_layout_and_identity(run: Any) -> None:
    code, out = run("python3", "-c", """
import os, pwd
assert os.getuid() == 1000 and os.getgid() == 1000, (os.getuid(), os.getgid())
assert pwd.getpwuid(1000).pw_name == "sandbox" and pwd.getpwuid(1000).pw_dir == "/tmp"
for path in ("/data", "/output", "/work"):
    info = os.stat(path)
    assert (info.st_uid, info.st_gid) == (1000, 1000), path
for name in ("runner.py", "runner.pyc"):
    runner = os.stat("/opt/sbx/" + name)
    assert runner.st_mode & 0o004 and runner.st_uid == 0 and not runner.st_mode & 0o022, name
assert any(n.startswith("fontlist") for n in os.listdir("/opt/sbx/matplotlib"))
print("layout ok")
""")
    assert code == 0, out
    assert "layout ok" in out


def test_data_stack_imports_offline_from_a_read_only_root(run: Any) -> None:
    code, out = run("python3", "-c", f"import {STACK}; print('stack ok')")
    assert code == 0, out
    assert "stack ok" in out


def test_no_pip_and_no_compiler_in_the_image(run: Any) -> None:
    code, out = run("python3", "-c", """
import importlib.util, shutil
assert importlib.util.find_spec("pip") is None
assert not any(shutil.which(tool) for tool in ("gcc", "cc", "pip", "pip3")), "toolchain found"
print("lean")
""")
    assert code == 0, out
