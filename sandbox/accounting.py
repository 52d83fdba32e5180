"""Per-execution CPU, memory and OOM figures read from the container's cgroup on the host.

The runner inside the container reports the same figures, but the code it
runs could lie to it, and under gVisor it cannot see the cgroup at all. When
the engine is local, the host's view of the cgroup is authoritative, so we
prefer it: these are the numbers ops teams bill and alert on.

Layouts understood: cgroup v1 and v2, with the `cgroupfs` driver
(`docker/<id>`) or the `systemd` driver (`system.slice/docker-<id>.scope`).
On a remote engine none of the paths exist and every figure is None.

Each file is opened once per container and re-read with `pread`: a session
reads them around every execution, and opening a cgroupfs file costs more
than reading it (measured here: about 0.2 ms of a 0.9 ms session execution).
"""

from __future__ import annotations

import os
import select
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
REMOVAL_SIGNAL_WAIT_S = 0.5
"""Most seconds waited for the signal a removed cgroup's notification still owes."""


def _first_existing(*candidates: Path) -> Path | None:
    return next((path for path in candidates if path.exists()), None)


def _open(directory: Path | None, name: str, flags: int = os.O_RDONLY) -> int:
    if directory is None:
        return -1
    try:
        return os.open(directory / name, flags | os.O_CLOEXEC)
    except OSError:
        return -1


def _read(fd: int) -> str | None:
    if fd < 0:
        return None
    try:
        return os.pread(fd, 4096, 0).decode("ascii", "replace")
    except OSError:
        return None


def _number(fd: int) -> int | None:
    text = _read(fd)
    return int(text) if text and text.strip().isdigit() else None


def _keyed(fd: int, key: str) -> int | None:
    for line in (_read(fd) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """Cumulative counters at one moment."""

    cpu_ns: int | None
    """CPU time used by the container so far, in nanoseconds."""
    oom_kills: int | None
    """Processes the OOM killer has killed in the container so far."""
    oom_notices: int | None = None
    """OOMs the kernel has told of so far (cgroup v1's notification; None without it)."""


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """Where the next execution's figures start: counters read, high-water mark restarted."""

    before: Snapshot
    """The cumulative counters when the container went idle."""
    peak_reset: bool
    """Whether the memory high-water mark was restarted (so it is the execution's own)."""


class CgroupAccounting:
    """Host-side reader for one container's cgroup; every figure may be None. Call `close()`."""

    def __init__(self, container_id: str, root: Path = CGROUP_ROOT) -> None:
        self.v2 = (root / "cgroup.controllers").exists()
        if self.v2:
            memory = cpu = _first_existing(
                root / "system.slice" / f"docker-{container_id}.scope",
                root / "docker" / container_id,
            )
        else:
            memory = _first_existing(
                root / "memory" / "docker" / container_id,
                root / "memory" / "system.slice" / f"docker-{container_id}.scope",
            )
            cpu = _first_existing(
                root / "cpuacct" / "docker" / container_id,
                root / "cpu,cpuacct" / "docker" / container_id,
                root / "cpuacct" / "system.slice" / f"docker-{container_id}.scope",
            )
        self.available = memory is not None
        """Whether this host can see the container's cgroup (a local engine)."""
        peak = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        self._cpu = _open(cpu, "cpu.stat" if self.v2 else "cpuacct.usage")
        self._oom = _open(memory, "memory.events" if self.v2 else "memory.oom_control")
        self._peak = _open(memory, peak, os.O_RDWR)
        if self._peak < 0:
            self._peak = _open(memory, peak)  # readable, not resettable (not root)
        self._memory = memory
        self._notice = -1 if self.v2 else _oom_notice(memory, self._oom)
        self._signals = 0
        self._removed = False

    def snapshot(self) -> Snapshot:
        """Read the cumulative counters now."""
        if self.v2:
            usage_us = _keyed(self._cpu, "usage_usec")
            cpu_ns = None if usage_us is None else usage_us * 1000
            return Snapshot(cpu_ns=cpu_ns, oom_kills=_keyed(self._oom, "oom_kill"))
        return Snapshot(cpu_ns=_number(self._cpu), oom_kills=_keyed(self._oom, "oom_kill"),
                        oom_notices=self._oom_notices())

    def _oom_notices(self) -> int | None:
        """The OOMs the kernel has signalled, without the one signal its removal adds.

        The counters above vanish with the cgroup, and the engine's own `oom` report can
        be lost on a loaded host (a container whose process ends at once may be removed
        first); the kernel's notification reaches us either way. The cgroup's removal is
        signalled too, after it has gone: the signals are read first and the cgroup looked
        for second, so a removal in between can only hide an OOM, never make one up.
        """
        if self._notice < 0 or self._memory is None:
            return None
        if not self._drain(0.0):
            return None
        if not self._signals:
            return 0
        if not self._removed and not self._memory.exists():
            self._removed = True  # its signal follows: wait for it, or take one off anyway
            if not self._drain(REMOVAL_SIGNAL_WAIT_S):
                return None
        return max(self._signals - self._removed, 0)

    def _drain(self, wait_s: float) -> bool:
        """Add what was signalled (waiting up to `wait_s` for a signal); False if unreadable."""
        if wait_s > 0:
            select.select([self._notice], [], [], wait_s)
        try:
            self._signals += os.eventfd_read(self._notice)
        except BlockingIOError:
            pass  # nothing signalled since the last read
        except OSError:
            return False
        return True

    def reset_peak(self) -> bool:
        """Restart the memory high-water mark, so the next peak is this execution's own."""
        if self._peak < 0:
            return False
        try:
            os.pwrite(self._peak, b"0", 0)
        except OSError:
            return False
        return True

    def peak(self) -> int | None:
        """The memory high-water mark in bytes since the last reset (or the start)."""
        return _number(self._peak)

    def close(self) -> None:
        """Release the descriptors (the cgroup goes away with its container)."""
        for fd in (self._cpu, self._oom, self._peak, self._notice):
            if fd >= 0:
                os.close(fd)
        self._cpu = self._oom = self._peak = self._notice = -1


def cpu_seconds_between(before: Snapshot, after: Snapshot) -> float | None:
    """CPU seconds used between two snapshots."""
    if before.cpu_ns is None or after.cpu_ns is None:
        return None
    return round(max(after.cpu_ns - before.cpu_ns, 0) / 1e9, 6)


def oom_between(before: Snapshot, after: Snapshot) -> bool | None:
    """Whether the OOM killer struck between two snapshots (None: cannot tell).

    Either count tells: the cgroup's kills (gone once the cgroup is removed) or the
    kernel's notifications (which outlive it).
    """
    told = [later > earlier for earlier, later in ((before.oom_kills, after.oom_kills),
                                                   (before.oom_notices, after.oom_notices))
            if earlier is not None and later is not None]
    return any(told) if told else None


def _oom_notice(memory: Path | None, oom_control: int) -> int:
    """An eventfd the kernel signals at each OOM of a cgroup v1 memory cgroup; else -1.

    Registered through the cgroup's `cgroup.event_control` on its `memory.oom_control`;
    the kernel signals it once more when the cgroup is removed.
    """
    if memory is None or oom_control < 0:
        return -1
    try:
        notice = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    except OSError:
        return -1
    try:
        with open(memory / "cgroup.event_control", "w") as control:
            control.write(f"{notice} {oom_control}")
    except OSError:
        os.close(notice)
        return -1
    return notice
