"""What `sbx bench` compares sbx against: the floors and the raw `docker run` baseline.

* `host_floor`: `python3 -c` on the host, no container at all.
* `PersistentFloor`: a bare Python loop (`FLOOR_SOURCE`) in an already-running
  container with our hardened configuration, fed over the attach stream: the
  least any design with a container boundary can cost per execution.
* `docker_run`: a hardened `docker run --rm` done through the SDK the way the
  CLI does it: create (engine-side auto-remove), attach, start, read the
  output to its end, wait until the engine has removed the container. Run
  with the command `true`, it is the engine's own floor per container (the
  `bare container` throughput row): no design that never reuses a container
  can spend less host CPU per execution.

None of these take a host-capacity lease: they are the yardsticks, not sbx.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import subprocess
import threading
import time
from typing import Any

import docker.errors

from sbx.sandbox.bench.workloads import FLOOR_SOURCE, SHIP_OUTPUT
from sbx.sandbox.config import SANDBOX_USER, DataMount, container_config
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.limits import Limits

_HEADER = struct.Struct(">BxxxI")
READ_TIMEOUT_S = 120.0


def host_floor(python: str, program: str) -> str:
    """Run `python -c program` on the host; return its stdout."""
    done = subprocess.run(
        [python, "-c", program],
        capture_output=True,
        text=True,
        timeout=READ_TIMEOUT_S,
        check=True,
    )
    return done.stdout


class _Demux:
    """Split Docker's multiplexed attach stream into stdout bytes (stderr is dropped)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.raw = bytearray()
        self.stdout = bytearray()

    def fill(self, deadline: float) -> bool:
        """Read once; False at end of stream."""
        ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise SandboxBroken("bench: no output before the deadline")
        chunk = self.sock.recv(1 << 18)
        if not chunk:
            return False
        self.raw += chunk
        while len(self.raw) >= _HEADER.size:
            stream, size = _HEADER.unpack_from(self.raw)
            if len(self.raw) < _HEADER.size + size:
                break
            if stream == 1:
                self.stdout += self.raw[_HEADER.size : _HEADER.size + size]
            del self.raw[: _HEADER.size + size]
        return True


def _close(raw: Any, sock: socket.socket) -> None:
    for resource in (getattr(raw, "_response", None), raw, sock):
        try:
            if resource is not None:
                resource.close()
        except (OSError, ValueError):
            pass


class PersistentFloor:
    """A bare persistent Python process in a hardened, running container."""

    def __init__(self, engine: Engine, *, image: str, limits: Limits) -> None:
        self.engine = engine
        config = container_config(
            limits, run_id="bench-floor", mode="bench", image=image, owner=owner_tag()
        )
        config["command"] = ["python3", "-I", "-u", "-c", FLOOR_SOURCE]
        config["user"] = SANDBOX_USER  # no runner to drop privileges: start as the code's user
        self.container_id = engine.create(config)
        self.sock, self._raw = engine.attach(self.container_id)
        engine.start(self.container_id)
        self._demux = _Demux(self.sock)

    def run(self, code: str) -> dict[str, Any]:
        """Send one program and return `{"stdout", "files"}`."""
        self.sock.sendall(json.dumps(code).encode() + b"\n")
        deadline = time.monotonic() + READ_TIMEOUT_S
        while True:
            newline = self._demux.stdout.find(b"\n")
            if newline >= 0:
                line = bytes(self._demux.stdout[:newline])
                del self._demux.stdout[: newline + 1]
                reply: dict[str, Any] = json.loads(line)
                return reply
            if not self._demux.fill(deadline):
                raise SandboxBroken("bench: the floor process exited")

    def close(self) -> None:
        """Close the stream and remove the container."""
        _close(self._raw, self.sock)
        self.engine.remove(self.container_id)


def docker_run(
    engine: Engine,
    program: str,
    *,
    image: str,
    limits: Limits,
    command: list[str] | None = None,
    data: tuple[DataMount, ...] = (),
) -> tuple[str, str]:
    """One hardened `docker run --rm` of `python3 -c program`; return (stdout, container id).

    Like the CLI, it asks the engine to report the removal before starting the
    container (asking afterwards can miss it). The caller forgets the id
    afterwards, outside the timed section. `command` replaces the program
    (the bare-container floor runs `true`); `data` is bind-mounted read-only.
    """
    config = container_config(
        limits, run_id="bench-baseline", mode="bench", image=image, owner=owner_tag(), data=data
    )
    config["command"] = command or ["python3", "-I", "-c", program + SHIP_OUTPUT]
    config["user"] = SANDBOX_USER  # no runner to drop privileges: start as the code's user
    config["stdin_open"] = False
    container_id = engine.create(config)
    raw = engine.api.attach_socket(container_id, params={"stdout": 1, "stderr": 1, "stream": 1})
    sock: socket.socket = getattr(raw, "_sock", raw)
    removed = threading.Thread(target=_wait_removed, args=(engine, container_id), daemon=True)
    removed.start()
    try:
        engine.start(container_id)
        demux = _Demux(sock)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while demux.fill(deadline):
            pass
    finally:
        _close(raw, sock)
    removed.join(READ_TIMEOUT_S)
    return demux.stdout.decode("utf-8", "replace"), container_id


def _wait_removed(engine: Engine, container_id: str) -> None:
    """Block until the engine has removed the container (what `--rm` waits for)."""
    try:
        engine.api.wait(container_id, condition="removed", timeout=READ_TIMEOUT_S)
    except docker.errors.NotFound:
        pass
