"""`setup.sh` touches only its own engine: it honours DOCKER_HOST and signals by pid file.

It probed only /var/run/docker.sock and reloaded with `pkill -HUP -x dockerd`, which signals
every dockerd on the host. Here a second, real dockerd is started by `setup.sh`'s engine step
for a socket in a temporary directory (its own config, pid file, data and exec roots, no
bridge, no iptables), reloaded by it, and stopped by the test by its own pid; the default
engine (the one the test suite runs on) must keep its pid, answer, and hear no reload.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parent.parent / "setup.sh"
DEFAULT_SOCKET = "/var/run/docker.sock"
DEFAULT_PIDFILE = Path("/var/run/docker.pid")
DEFAULT_LOG = Path("/var/log/sbx-dockerd.log")
RELOADED = "Got signal to reload configuration"
STOP_TIMEOUT_S = 60.0

pytestmark = pytest.mark.docker


def engine_get(socket_path: str, path: str) -> dict | str:
    """GET `path` from the engine at `socket_path` (curl speaks HTTP over a unix socket)."""
    done = subprocess.run(
        ["curl", "-sf", "--max-time", "10", "--unix-socket", socket_path, f"http://engine{path}"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 0, f"the engine at {socket_path} did not answer {path}"
    return json.loads(done.stdout) if path == "/info" else done.stdout


def reloads_heard(log: Path) -> int:
    """How many reloads the default engine logged (its log, where setup.sh started it)."""
    return log.read_text(errors="replace").count(RELOADED) if log.exists() else 0


def run_engine_step(socket_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket_path}", "SBX_SETUP_ONLY": "engine"}
    return subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True,
                          timeout=180)


def stop(pidfile: Path) -> None:
    """Stop the second dockerd by the pid it wrote (never by name), and wait until it is gone."""
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text().strip())
    if Path(f"/proc/{pid}/comm").read_text().strip() != "dockerd":
        return
    handle = os.pidfd_open(pid)  # readable once the process has exited
    try:
        os.kill(pid, signal.SIGTERM)
        ended, _, _ = select.select([handle], [], [], STOP_TIMEOUT_S)
    finally:
        os.close(handle)
    assert ended, f"the second dockerd {pid} did not stop"


@pytest.fixture
def second_socket() -> Iterator[Path]:
    """A socket path for a second engine (short: unix socket paths are bounded)."""
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("curl") is None:
        pytest.skip("needs root, dockerd and curl (the machines setup.sh is for)")
    root = Path(tempfile.mkdtemp(prefix="sbx-setup-", dir="/tmp"))
    try:
        yield root / "docker.sock"
    finally:
        stop(root / "sbx-dockerd" / "dockerd.pid")
        with open("/proc/mounts") as mounts:
            assert str(root) not in mounts.read()
        shutil.rmtree(root, ignore_errors=True)


def test_docker_host_names_the_engine_setup_starts_and_reloads(second_socket: Path) -> None:
    default_pid = DEFAULT_PIDFILE.read_text().strip()
    default_reloads = reloads_heard(DEFAULT_LOG)
    state = second_socket.parent / "sbx-dockerd"

    started = run_engine_step(second_socket)  # nothing answers there: it starts its own

    assert started.returncode == 0, started.stderr + started.stdout
    assert "runsc" in engine_get(str(second_socket), "/info")["Runtimes"]
    pid = (state / "dockerd.pid").read_text().strip()
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd"

    # A config without runsc: the next run registers it and reloads that daemon by its pid.
    (state / "daemon.json").write_text(json.dumps({"runtimes": {"sbx-marker": {"path": "runc"}}}))
    reloaded = run_engine_step(second_socket)

    assert reloaded.returncode == 0, reloaded.stderr + reloaded.stdout
    runtimes = engine_get(str(second_socket), "/info")["Runtimes"]
    assert {"runsc", "sbx-marker"} <= set(runtimes)  # the reload reached the second engine
    assert (state / "dockerd.pid").read_text().strip() == pid  # reloaded, not restarted
    assert RELOADED in (state / "dockerd.log").read_text()

    # The default engine: same process, still answering, no reload heard, no marker.
    assert DEFAULT_PIDFILE.read_text().strip() == default_pid
    assert engine_get(DEFAULT_SOCKET, "/_ping") == "OK"
    assert "sbx-marker" not in engine_get(DEFAULT_SOCKET, "/info")["Runtimes"]
    assert reloads_heard(DEFAULT_LOG) == default_reloads


def test_setup_signals_no_process_by_name() -> None:
    text = SETUP.read_text()
    assert "pkill" not in text and "killall" not in text


def test_a_tcp_engine_that_does_not_answer_is_not_started() -> None:
    env = {**os.environ, "DOCKER_HOST": "tcp://127.0.0.1:9", "SBX_SETUP_ONLY": "engine"}
    if os.geteuid() != 0:
        pytest.skip("setup.sh runs as root")
    done = subprocess.run(["bash", str(SETUP)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    assert "does not answer; setup.sh starts only a local engine" in done.stderr
