"""Shared fixtures: a real Docker engine, the real image, and a leak check over the whole run.

Sandbox tests never mock Docker. Without an engine they fail in CI (CI=true)
and skip elsewhere with a reason that names what is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker.errors
import openai
import pytest

from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import SandboxError
from sbx.sandbox.gc import owned_here, owner_alive, owner_tag
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

TEST_IMAGE = os.environ.get("SBX_TEST_IMAGE", DEFAULT_IMAGE)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
ORPHAN_GRACE_S = 30.0
_PROXY_VARS = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
RUNTIMES = [name for name in os.environ.get("SBX_TEST_RUNTIMES", "runc,runsc").split(",") if name]


def pytest_configure(config: pytest.Config) -> None:
    """Each xdist worker gets a host-cap ledger of its own, and Ctrl-C reaches the tests.

    Tests count leases, queues and pool refills, and a refill takes a lease only
    when nobody is queued: another worker's sandboxes in the same ledger would
    change those counts. A ledger the caller set (`SBX_CAPACITY_DIR`) is kept.

    The Ctrl-C tests send a real SIGINT. A shell without job control starts a
    background command with SIGINT ignored (bash does), and an ignored signal is
    inherited by every process started since, so those tests failed in a run
    started that way. With Python's own handler back, the tests and the sbx
    processes they start (an exec resets a handler, not an ignore) see Ctrl-C
    as a terminal sends it.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and not os.environ.get("SBX_CAPACITY_DIR"):
        ledger = Path(f"/tmp/sbx-test-capacity-{os.getuid()}-{worker}")
        ledger.mkdir(mode=0o700, exist_ok=True)
        os.environ["SBX_CAPACITY_DIR"] = str(ledger)


SERVER_LOG_TAIL = 6000
"""Characters of each `sbx serve` log shown under a failed test."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test's report ends with the logs of the servers it started (`serve`).

    An intermittent failure on CI is seen once: what the server said then is the clue.
    """
    report = yield
    if report.failed:
        for number, server in enumerate(getattr(item, "sbx_servers", [])):
            report.sections.append((f"sbx serve #{number} log", server.log[-SERVER_LOG_TAIL:]))
    return report


def _engine_or_skip() -> Engine:
    try:
        engine = Engine.connect(timeout=10)
        engine.require_image(TEST_IMAGE)
    except SandboxError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"sandbox tests need Docker and the image in CI: {exc}")
        pytest.skip(f"needs a running Docker engine and image {TEST_IMAGE}: {exc}")
    return engine


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The real engine, with the sandbox image present."""
    return _engine_or_skip()


@pytest.fixture(scope="session", params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, engine: Engine) -> str:
    """Each OCI runtime the security tests must pass under: runc, and gVisor's runsc."""
    name: str = request.param
    require_runtime(engine, name)
    return name


def require_runtime(engine: Engine, name: str) -> None:
    """Skip (fail in CI) when the engine does not have the OCI runtime `name`."""
    if name not in engine.runtimes():
        message = f"runtime {name} is not registered with the engine (setup.sh registers runsc)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session", autouse=True)
def no_leaked_containers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the whole run, no container labelled sbx.managed may remain.

    Ours, or an orphan of this host (a dead owner: a subprocess that leaked). With
    xdist the other worker's gc and pool tests make orphans on purpose and remove
    them within seconds, so an orphan counts only once it outlived ORPHAN_GRACE_S.
    """
    yield
    if not any(item.get_closest_marker("docker") for item in request.session.items):
        return
    try:
        engine = Engine.connect(timeout=10)
    except SandboxError:
        return
    mine = owner_tag()

    def ours_or_orphaned(container: dict[str, Any]) -> bool:
        owner = container["Labels"].get("sbx.owner", "")
        return owner in (mine, "") or (owned_here(owner) and not owner_alive(owner))

    left = [
        c
        for c in engine.managed_containers()
        if ours_or_orphaned(c) and c.get("State") != "removing"  # the engine removes those
    ]
    for container in left:  # another xdist worker's test may be removing its deliberate orphan
        if container["Labels"].get("sbx.owner", "") != mine:
            with contextlib.suppress(AssertionError):
                wait_until_removed(engine, container["Id"], seconds=ORPHAN_GRACE_S)
    left = [c for c in left if engine_knows(engine, c["Id"])]
    for container in left:  # other live sbx processes' containers are not ours to judge
        engine.remove(container["Id"])
    assert not left, f"containers leaked: {[c['Id'][:12] for c in left]}"


def engine_knows(engine: Engine, container_id: str) -> bool:
    """Whether the engine can still inspect a container it lists.

    After a removal that failed half-way (runsc, "unlinkat ...: directory not empty") dockerd
    can keep listing a container as "Removal In Progress" that it can no longer inspect or
    remove, until it restarts: nothing a test left running, and nothing a test can remove.
    """
    try:
        engine.inspect(container_id)
    except docker.errors.NotFound:
        return False
    return True


def wait_for_file_in_container(engine: Engine, container_id: str, path: str) -> None:
    """Wait until the sandboxed code has created `path` (its own sign that it is running).

    Asked through `docker exec test -e`, so a test waits on the event itself rather than
    sleeping and hoping; the deadline only stops a hung test.
    """
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        exec_id = engine.api.exec_create(container_id, ["test", "-e", path])["Id"]
        engine.api.exec_start(exec_id)
        if engine.api.exec_inspect(exec_id)["ExitCode"] == 0:
            return
    raise AssertionError(f"{path} never appeared in container {container_id[:12]}")


def wait_until(condition, seconds: float = 60.0) -> bool:
    """Poll a condition no event announces (a container's age, a database session, a
    cache's expiry): whether it held within `seconds`; the deadline stops a hung test."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def wait_until_removed(engine: Engine, container_id: str, seconds: float = 120) -> None:
    """Wait for the engine's own `destroy` event of `container_id` (at once if it is gone).

    The events are read from a moment taken before the existence check, so a removal that
    lands between the two is still seen; `seconds` only stops a hung test.
    """
    since = int(time.time()) - 1
    try:
        engine.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return
    stream = engine.api.events(
        since=since,
        until=int(time.time() + seconds),
        filters={"type": "container", "event": "destroy", "container": container_id},
        decode=True,
    )
    try:
        for _ in stream:
            return
    finally:
        stream.close()
    raise AssertionError(f"container {container_id[:12]} was not removed within {seconds:g} s")


@pytest.fixture
def output_dir(tmp_path: Path) -> Path:
    """A host directory for artifacts."""
    return tmp_path / "out"


@pytest.fixture
def session(engine: Engine, runtime: str, output_dir: Path) -> Iterator[Session]:
    """A session with default limits except a short timeout, under each runtime."""
    limits = Limits(timeout="5s", runtime=runtime)
    with Session.open(
        SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=output_dir), engine=engine
    ) as live:
        yield live


@pytest.fixture(autouse=True)
def no_real_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches a real model: OPENAI_*, SBX_MODEL and proxies are removed, and any
    SDK client whose base URL is not loopback fails the test."""
    for name in list(os.environ):
        if name.startswith("OPENAI_") or name == "SBX_MODEL" or name.lower() in _PROXY_VARS:
            monkeypatch.delenv(name)
    original = openai.OpenAI.__init__

    def guarded(self: openai.OpenAI, *args: Any, **kwargs: Any) -> None:
        base_url = kwargs.get("base_url")
        host = urlsplit(str(base_url)).hostname if base_url else None
        if host not in LOOPBACK:
            pytest.fail(f"a test tried to reach a model at {base_url!r}: loopback only")
        original(self, *args, **kwargs)

    monkeypatch.setattr(openai.OpenAI, "__init__", guarded)
