"""Find and remove sandbox containers whose owning process is gone.

Every container carries `sbx.owner = host:pid`. A container is an orphan when
its owner label names this host and that process no longer runs. Containers
of other hosts (a shared remote engine) are left alone unless `everything` is
asked for, since their liveness cannot be checked from here. The runner already exits when
its owner's stream closes, and the engine auto-removes it; this is the net
under that net, run by `sbx gc` and at pool start.

The per-container `/data` directories (`sandbox.datadir`) are named after their
owner the same way (`host.pid.token`) and are removed by the same rule, after
the containers: a directory of a live process is never touched.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
from pathlib import Path

from sbx.sandbox.config import OWNER_LABEL, RUN_ID_LABEL
from sbx.sandbox.datadir import default_data_root, host_label, parse_dir_name
from sbx.sandbox.engine import Engine

logger = logging.getLogger(__name__)


def owner_tag(pid: int | None = None) -> str:
    """`host:pid` of a process on this host (this one by default), for the owner label."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


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


def collect_orphans(
    engine: Engine, *, everything: bool = False, data_root: Path | None = None
) -> list[dict[str, str]]:
    """Remove orphaned (or, with `everything`, all) managed containers; return what was removed.

    Then the per-container data directories of dead owners below `data_root`
    (default: `default_data_root()`), all of them with `everything`.
    """
    removed = _collect_containers(engine, everything=everything)
    gone = collect_orphan_data(data_root or default_data_root(), everything=everything)
    if gone:
        logger.info("removed %d orphaned data directory(ies)", len(gone))
    return removed


def collect_orphan_data(root: Path, *, everything: bool = False) -> list[str]:
    """Remove the data directories below `root` whose owner is gone; return their names."""
    try:
        names = sorted(os.listdir(root))
    except OSError:  # no root yet: nothing was ever delivered
        return []
    here = host_label()
    gone: list[str] = []
    for name in names:
        parsed = parse_dir_name(name)
        if parsed is None:
            continue  # not ours: never removed
        host, pid = parsed
        if not everything and (host != here or owner_alive(f"{socket.gethostname()}:{pid}")):
            continue
        path = root / name
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            shutil.rmtree(path)
        except OSError as exc:
            logger.warning("could not remove data directory %s: %s", name, exc.strerror)
            continue
        gone.append(name)
    return gone


def _collect_containers(engine: Engine, *, everything: bool) -> list[dict[str, str]]:
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
