"""Resident memory of an idle pooled container, measured three ways for `sbx bench`.

* `cgroup_usage`: what the kernel charges the container's memory cgroup (the
  figure that counts against `Limits.memory`; includes page cache it touched).
* `rss_sum`: the sum of VmRSS over the container's processes. Pages shared
  by the supervisor and the kernel (the interpreter, libraries) count twice,
  so this is the most conservative figure.
* `pss_sum`: the sum of proportional set sizes: shared pages divided among
  everything mapping them, host-wide.

The process figures need the engine on this host (the PIDs `top` reports are
host PIDs); elsewhere only the cgroup figure is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker.errors

from sbx.sandbox.accounting import CGROUP_ROOT
from sbx.sandbox.engine import Engine

MIB = 1024 * 1024


def idle_memory_mib(engine: Engine, container_ids: list[str]) -> dict[str, float]:
    """Memory figures (MiB) of the first container in `container_ids`; empty if none."""
    if not container_ids:
        return {}
    container_id = container_ids[0]
    figures: dict[str, float] = {}
    stats: dict[str, Any] = engine.api.stats(container_id, stream=False, one_shot=True)
    memory = stats.get("memory_stats") or {}
    if "usage" in memory:
        figures["cgroup_usage"] = memory["usage"] / MIB
    if "rss" in (memory.get("stats") or {}):
        figures["cgroup_anon_rss"] = memory["stats"]["rss"] / MIB
    rss, pss = _process_totals(engine, container_id)
    if rss is not None:
        figures["rss_sum"] = rss / MIB
    if pss is not None:
        figures["pss_sum"] = pss / MIB
    return figures


def _process_totals(engine: Engine, container_id: str) -> tuple[int | None, int | None]:
    """Summed VmRSS and Pss (bytes) of the container's processes, read from the host's /proc."""
    top: dict[str, Any] = engine.api.top(container_id)
    column = top["Titles"].index("PID")
    rss = pss = 0
    try:
        for process in top["Processes"]:
            pid = int(process[column])
            rss += _kib_field(f"/proc/{pid}/status", "VmRSS:")
            pss += _kib_field(f"/proc/{pid}/smaps_rollup", "Pss:")
    except (OSError, ValueError):
        return None, None
    return rss * 1024, pss * 1024


def _kib_field(path: str, name: str) -> int:
    """A `Name:   1234 kB` field of a /proc file, in KiB."""
    with open(path) as handle:
        for line in handle:
            if line.startswith(name):
                return int(line.split()[1])
    raise ValueError(f"{name} not in {path}")


def container_memory_bytes(
    engine: Engine, container_id: str, *, root: Path = CGROUP_ROOT, proc: Path = Path("/proc")
) -> int:
    """Bytes the container's memory cgroup is charged now, wherever the engine put that cgroup.

    The engine's stats API reads the cgroup it made (cgroupfs or systemd
    driver, v1 or v2, nested under another container's); when it reports no
    usage (some engines leave memory stats out), the cgroup named in the
    container's first process's `/proc/<pid>/cgroup` is read. 0 when the
    container is gone or neither is readable: a figure, not a failure.
    """
    try:
        stats: dict[str, Any] = engine.api.stats(container_id, stream=False, one_shot=True)
        usage = (stats.get("memory_stats") or {}).get("usage")
        if usage:
            return int(usage)
        pid = int(engine.api.inspect_container(container_id)["State"]["Pid"])
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except (docker.errors.APIError, OSError, KeyError, ValueError):
        return 0
    for line in lines:  # "4:memory:/docker/<id>" (v1) or "0::/system.slice/..." (v2)
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            candidate = root / "memory" / path.lstrip("/") / "memory.usage_in_bytes"
        elif controllers == "":
            candidate = root / path.lstrip("/") / "memory.current"
        else:
            continue
        try:
            return int(candidate.read_text().strip())
        except (OSError, ValueError):
            continue
    return 0
