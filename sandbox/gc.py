"""Find and remove sandbox containers whose owning process is gone.

Every container carries `sbx.owner = host:pid`. A container is an orphan when
its owner label names this host and that process no longer runs. Containers
of other hosts (a shared remote engine) are left alone unless `everything` is
asked for, since their liveness cannot be checked from here. The runner already exits when
its owner's stream closes, and the engine auto-removes it; this is the net
under that net, run by `sbx gc` and at pool start.
"""

from __future__ import annotations

import os
import socket

from sbx.sandbox.config import OWNER_LABEL, RUN_ID_LABEL
from sbx.sandbox.engine import Engine


def owner_tag() -> str:
    """`host:pid` of this process, for the owner label."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(tag: str) -> bool:
    """Whether the process named by an owner label still runs on this host."""
    host, _, pid = tag.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owned_here(tag: str) -> bool:
    """Whether an owner label names this host (a shared remote engine serves many hosts)."""
    return tag.rpartition(":")[0] == socket.gethostname()


def collect_orphans(engine: Engine, *, everything: bool = False) -> list[dict[str, str]]:
    """Remove orphaned (or, with `everything`, all) managed containers; return what was removed."""
    removed: list[dict[str, str]] = []
    for container in engine.managed_containers():
        labels = container.get("Labels") or {}
        owner = labels.get(OWNER_LABEL, "")
        if not everything and (owner_alive(owner) or not owned_here(owner)):
            continue  # alive, or another host's: we cannot tell, so only --all removes it
        if container.get("State") == "removing":
            continue  # the engine is already removing it (and a stuck removal is its own)
        engine.remove(container["Id"])
        removed.append(
            {
                "id": container["Id"][:12],
                "run_id": labels.get(RUN_ID_LABEL, "?"),
                "state": container.get("State", "?"),
            }
        )
    return removed
