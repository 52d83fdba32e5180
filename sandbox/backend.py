"""The sandbox seam: what a container backend must do for `Session`, `Pool` and `sbx gc`.

Everything above this interface (sessions, the pool, the runner protocol, the
tools, the agent, every face) is the same whatever runs the containers. Today
one backend implements it: `sbx.sandbox.engine.Engine`, a thin adapter over the
local Docker engine. Another backend (a Kubernetes pod per sandbox with a
gVisor RuntimeClass and a deny-all NetworkPolicy, say) implements these nine
calls and nothing above changes:

    require_image(image)      the image exists locally; never pulls (pulls are not audited)
    runtimes()                the OCI runtimes available (runc, runsc, ...)
    require_runtime(name)     that one is available, else RuntimeUnavailable
    create(config)            a container from `sandbox.config.container_config` (the whole
                              hardened configuration as one pure dict), not yet started
    attach(id)                the runner's stdin/stdout as one bidirectional byte stream
                              (Docker's multiplexed attach framing; `sandbox.channel` reads it)
    start(id)                 start it; the runner then says `ready` on the stream
    inspect(id)               its state (`State.OOMKilled` at least)
    remove(id)                kill it now (no grace period) and delete it; idempotent
    managed_containers()      every container carrying the `sbx.managed` label (for gc)

The backend must keep the promises `security.md` lists for the container
(no network, read-only root, no capabilities, the limits) by honouring every
key of the configuration it is given, and must refuse what it cannot honour
rather than drop it. Errors leave as `sbx.sandbox.errors.SandboxError`
subclasses whose message says what to do.
"""

from __future__ import annotations

import socket
from typing import Any, Protocol


class ContainerBackend(Protocol):
    """The calls the sandbox layer makes on whatever runs its containers."""

    def require_image(self, image: str) -> dict[str, Any]:
        """The image's attributes; `ImageMissing` when absent (never pull)."""
        ...

    def runtimes(self) -> set[str]:
        """Names of the OCI runtimes the backend can run containers with."""
        ...

    def require_runtime(self, runtime: str) -> None:
        """Refuse (`RuntimeUnavailable`) a runtime the backend does not have."""
        ...

    def create(self, config: dict[str, Any]) -> str:
        """Create a container from `container_config(...)`; its id."""
        ...

    def attach(self, container_id: str) -> tuple[socket.socket, Any]:
        """The runner's stdin/stdout stream, and an object to close with it."""
        ...

    def start(self, container_id: str) -> None:
        """Start a created container."""
        ...

    def inspect(self, container_id: str) -> dict[str, Any]:
        """The container's state as the engine reports it."""
        ...

    def remove(self, container_id: str) -> None:
        """Kill and delete the container at once; no error if it is already gone."""
        ...

    def managed_containers(self) -> list[dict[str, Any]]:
        """Every container labelled `sbx.managed`, with its labels."""
        ...
