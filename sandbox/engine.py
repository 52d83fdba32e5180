"""A thin adapter over the `docker` SDK: connect, check, create, attach, start, remove.

Everything Docker-specific that the rest of `sandbox/` needs goes through
here, and every engine failure leaves as a `SandboxError` whose message says
what to do. Containers are removed with `force=True` (a SIGKILL, never a
10-second stop) and are tracked so that interpreter exit removes any a caller
forgot.
"""

from __future__ import annotations

import atexit
import logging
import socket
import threading
import time
from typing import Any

import docker
import docker.errors
from docker.types import LogConfig, Mount, Ulimit

from sbx.sandbox.config import MANAGED_LABEL
from sbx.sandbox.engine_http import share_one_pool
from sbx.sandbox.errors import (
    DockerUnavailable,
    ImageMissing,
    RuntimeUnavailable,
    SandboxBroken,
    first_line,
)
from sbx.sandbox.oom_watch import OomWatch, watch_for

logger = logging.getLogger(__name__)

START_DOCKER_HINT = (
    "start it with `dockerd &` (or `systemctl start docker`); "
    "install it with `apt-get install -y docker.io`"
)
REMOVAL_WAIT_S = 30
"""How long `remove` waits for a removal the engine already started (then `sbx gc`'s)."""
OOM_EVENTS = {"type": "container", "event": "oom"}
"""The engine's filter for memory kills (the watch's stream and the replay)."""
OOM_REPORT_WAIT_S = 1.0
"""How long a dead container's `oom` may take to reach the watch (the engine reports it late)."""


class Engine:
    """One connection to the Docker engine, shared by sessions and pools."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.api: docker.APIClient = client.api
        self._live: set[str] = set()
        self._lock = threading.Lock()
        self._runtimes: set[str] | None = None
        self._ooms: OomWatch | None = None
        atexit.register(self.remove_all)

    @classmethod
    def connect(cls, timeout: float = 30.0) -> Engine:
        """Connect to the engine from the environment (DOCKER_HOST or the default socket)."""
        try:
            client = docker.from_env(timeout=int(timeout))
            share_one_pool(client.api)
            client.ping()
        except docker.errors.DockerException as exc:
            raise DockerUnavailable(
                f"cannot reach the Docker engine ({first_line(exc)}); {START_DOCKER_HINT}"
            ) from None
        return cls(client)

    def require_image(self, image: str) -> dict[str, Any]:
        """The image's attributes; never pulls (there is no registry, and pulls are not audited)."""
        try:
            attrs: dict[str, Any] = self.api.inspect_image(image)
        except docker.errors.ImageNotFound:
            raise image_missing(image) from None
        except docker.errors.DockerException as exc:
            raise DockerUnavailable(
                f"engine error inspecting {image!r}: {first_line(exc)}"
            ) from None
        return attrs

    def runtimes(self) -> set[str]:
        """OCI runtimes registered with the engine (`runc`, maybe `runsc`)."""
        if self._runtimes is None:
            info = self.api.info()
            self._runtimes = set(info.get("Runtimes", {})) | {info.get("DefaultRuntime", "runc")}
        return self._runtimes

    def require_runtime(self, runtime: str) -> None:
        """Refuse an unregistered runtime: never fall back silently to a weaker one."""
        if runtime not in self.runtimes():
            known = ", ".join(sorted(self.runtimes()))
            raise RuntimeUnavailable(
                f"runtime {runtime!r} is not registered with the engine (it has: {known}); "
                "see security.md, 'gVisor', to install and register runsc"
            )

    def create(self, config: dict[str, Any]) -> str:
        """Create a container from `sandbox.config.container_config` output; return its id."""
        kwargs = dict(config)
        host = dict(kwargs.pop("host_config"))
        host["log_config"] = LogConfig(**host["log_config"])
        host["ulimits"] = [Ulimit(**u) for u in host["ulimits"]]
        host["mounts"] = [
            Mount(
                target=m["Target"],
                source=m["Source"],
                type="bind",
                read_only=True,
                propagation=m["BindOptions"]["Propagation"],
            )
            for m in host["mounts"]
        ]
        try:
            host_config = self.api.create_host_config(**host)
            created = self.api.create_container(host_config=host_config, **kwargs)
        except docker.errors.ImageNotFound:
            raise image_missing(kwargs["image"]) from None  # removed since require_image
        except (docker.errors.DockerException, OSError) as exc:
            raise engine_failure("create the sandbox", exc) from None
        container_id: str = created["Id"]
        with self._lock:
            self._live.add(container_id)
        self.watch_ooms()  # the engine answers: its memory kills are read from now on
        return container_id

    def attach(self, container_id: str) -> tuple[socket.socket, Any]:
        """Open the container's stdin/stdout/stderr stream (before start, so nothing is missed).

        Returns the raw socket and the SDK's wrapper, which must be closed with it.
        """
        try:
            raw = self.api.attach_socket(
                container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        except (docker.errors.DockerException, OSError) as exc:
            raise engine_failure("attach to the sandbox", exc) from None
        sock: socket.socket = getattr(raw, "_sock", raw)
        return sock, raw

    def start(self, container_id: str) -> None:
        """Start a created container."""
        try:
            self.api.start(container_id)
        except (docker.errors.DockerException, OSError) as exc:
            raise engine_failure("start the sandbox", exc) from None

    def remove(self, container_id: str) -> None:
        """Kill and remove at once; a container already gone is not an error.

        A removal the engine is slow to confirm (a loaded host, a gVisor sandbox
        that just held many processes) is asked again once; if it still times out,
        the engine goes on removing it, the id stays tracked for `remove_all` at
        exit, and `sbx gc` finds it should it survive. Never raised: this runs on
        every clean-up path, Ctrl-C's included.
        """
        for attempt in (1, 2):
            try:
                self.api.remove_container(container_id, force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "already in progress" in str(exc):  # its auto-removal: see it through
                    self._wait_removed(container_id)
                else:
                    logger.warning(
                        "could not remove sandbox %s: %s", container_id[:12], first_line(exc)
                    )
            except OSError as exc:  # requests' timeouts and connection errors
                if attempt == 1:
                    continue
                logger.warning("removal of sandbox %s not confirmed: %s", container_id[:12],
                               first_line(exc))
                return
            break
        with self._lock:
            self._live.discard(container_id)

    def _wait_removed(self, container_id: str) -> None:
        """Block until a removal the engine already started is done (bounded; never raised).

        A container whose process ended is removed by the engine itself
        (auto-remove), and a removal asked meanwhile is refused as "already in
        progress" at once: without this wait the container would still be listed
        after `remove` returned, and its lease given back before it was gone.
        """
        try:
            self.api.wait(container_id, condition="removed", timeout=REMOVAL_WAIT_S)
        except docker.errors.NotFound:
            pass  # gone before we asked
        except (docker.errors.DockerException, OSError) as exc:
            logger.warning("removal of sandbox %s not confirmed: %s", container_id[:12],
                           first_line(exc))

    def watch_ooms(self) -> None:
        """Read the engine's `oom` events as they happen, from now on (`sandbox.oom_watch`)."""
        if self._ooms is None:
            adapter = self.api.adapters.get("http+docker://")
            socket_path = getattr(adapter, "socket_path", None)
            self._ooms = watch_for(str(socket_path or self.api.base_url), self._oom_events)
        self._ooms.start()

    def _oom_events(self, since: int) -> Any:
        """The engine's `oom` events from `since` (epoch s) on, streamed as they come."""
        return self.api.events(since=since, decode=True, filters=OOM_EVENTS)

    def saw_oom(self, container_id: str, *, since: float) -> bool:
        """Whether the engine reported an `oom` of the container since `since` (epoch s).

        For a container already removed, whose `State.OOMKilled` is gone with it. The
        watch (`watch_ooms`) answers when it has read the engine's events since `since`;
        otherwise the engine's log is replayed, which holds only its recent events (the
        replay ends a second from now).
        """
        ooms = self._ooms
        if ooms is not None and ooms.covers(since):
            return ooms.saw(container_id, wait_s=OOM_REPORT_WAIT_S)
        if ooms is not None and ooms.saw(container_id, wait_s=0):
            return True  # seen before the watch's stream broke
        return self.logged_oom(container_id, since=since)

    def logged_oom(self, container_id: str, *, since: float) -> bool:
        """Whether the engine's own log still has an `oom` of the container since `since`.

        A replay of the log, which holds only the engine's recent events (it ends a
        second from now); False when the engine cannot be asked.
        """
        try:
            stream = self.api.events(
                since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                filters={**OOM_EVENTS, "container": container_id},
            )
        except (docker.errors.DockerException, OSError):
            return False
        try:
            return any(True for _ in stream)
        except (docker.errors.DockerException, OSError):
            return False
        finally:
            stream.close()

    def inspect(self, container_id: str) -> dict[str, Any]:
        """The container's attributes as the engine reports them."""
        attrs: dict[str, Any] = self.api.inspect_container(container_id)
        return attrs

    def managed_containers(self) -> list[dict[str, Any]]:
        """Every container carrying our label, running or not."""
        found: list[dict[str, Any]] = self.api.containers(
            all=True, filters={"label": f"{MANAGED_LABEL}=true"}
        )
        return found

    def remove_all(self) -> None:
        """Remove every container this process created and has not removed yet."""
        with self._lock:
            live = list(self._live)
        for container_id in live:
            self.remove(container_id)


def image_missing(image: str) -> ImageMissing:
    """The one message for a missing image: we never pull, so say how to build it."""
    return ImageMissing(f"sandbox image {image!r} not found; build it with `sbx image build`")


def engine_failure(action: str, exc: BaseException) -> SandboxBroken:
    """One line for an engine call that failed: refused by the engine, or the connection lost.

    `requests` raises its connection errors and timeouts as `OSError`s, not as the
    SDK's `DockerException`: dockerd going away mid-call is an error of the sandbox,
    never a traceback.
    """
    if isinstance(exc, docker.errors.DockerException):
        return SandboxBroken(f"the engine refused to {action}: {first_line(exc)}")
    return SandboxBroken(f"lost the engine while trying to {action}: {first_line(exc)}")


