"""Per-execution CPU, memory and OOM figures read from the container's cgroup on the host.

The runner inside the container reports the same figures, but the code it
runs could lie to it, and under gVisor it cannot see the cgroup at all. When
the engine is local, the host's view of the cgroup is authoritative, so we
prefer it: these are the numbers ops teams bill and alert on.

Layouts understood: cgroup v1 and v2, with the `cgroupfs` driver
(`docker/<id>`) or the `systemd` driver (`system.slice/docker-<id>.scope`).
On a remote engine none of the paths exist and every figure is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _read_int(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _read_key(path: Path | None, key: str) -> int | None:
    if path is None:
        return None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def _first_existing(*candidates: Path) -> Path | None:
    return next((path for path in candidates if path.exists()), None)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """Cumulative counters at one moment."""

    cpu_ns: int | None
    """CPU time used by the container so far, in nanoseconds."""
    oom_kills: int | None
    """Processes the OOM killer has killed in the container so far."""


class CgroupAccounting:
    """Host-side reader for one container's cgroup; every figure may be None."""

    def __init__(self, container_id: str, root: Path = CGROUP_ROOT) -> None:
        self.v2 = (root / "cgroup.controllers").exists()
        if self.v2:
            group = _first_existing(
                root / "system.slice" / f"docker-{container_id}.scope",
                root / "docker" / container_id,
            )
            self.memory = self.cpu = group
        else:
            self.memory = _first_existing(
                root / "memory" / "docker" / container_id,
                root / "memory" / "system.slice" / f"docker-{container_id}.scope",
            )
            self.cpu = _first_existing(
                root / "cpuacct" / "docker" / container_id,
                root / "cpu,cpuacct" / "docker" / container_id,
                root / "cpuacct" / "system.slice" / f"docker-{container_id}.scope",
            )

    @property
    def available(self) -> bool:
        """Whether this host can see the container's cgroup (a local engine)."""
        return self.memory is not None

    def snapshot(self) -> Snapshot:
        """Read the cumulative counters now."""
        if self.v2:
            usage_us = _read_key(self.cpu / "cpu.stat" if self.cpu else None, "usage_usec")
            cpu_ns = None if usage_us is None else usage_us * 1000
            events = self.memory / "memory.events" if self.memory else None
            return Snapshot(cpu_ns=cpu_ns, oom_kills=_read_key(events, "oom_kill"))
        return Snapshot(
            cpu_ns=_read_int(self.cpu / "cpuacct.usage" if self.cpu else None),
            oom_kills=_read_key(
                self.memory / "memory.oom_control" if self.memory else None, "oom_kill"
            ),
        )

    def reset_peak(self) -> bool:
        """Restart the memory high-water mark, so the next peak is this execution's own."""
        if self.memory is None:
            return False
        target = self.memory / ("memory.peak" if self.v2 else "memory.max_usage_in_bytes")
        try:
            target.write_text("0")
        except OSError:
            return False
        return True

    def peak(self) -> int | None:
        """The memory high-water mark in bytes since the last reset (or the start)."""
        if self.memory is None:
            return None
        return _read_int(self.memory / ("memory.peak" if self.v2 else "memory.max_usage_in_bytes"))


def cpu_seconds_between(before: Snapshot, after: Snapshot) -> float | None:
    """CPU seconds used between two snapshots."""
    if before.cpu_ns is None or after.cpu_ns is None:
        return None
    return round(max(after.cpu_ns - before.cpu_ns, 0) / 1e9, 6)


def oom_between(before: Snapshot, after: Snapshot) -> bool | None:
    """Whether the OOM killer struck between two snapshots (None: cannot tell)."""
    if before.oom_kills is None or after.oom_kills is None:
        return None
    return after.oom_kills > before.oom_kills
