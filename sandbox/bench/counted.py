"""CPU that the bench's own containers and the engine used, on a host shared with other work.

`host_busy_seconds` counts every process of the host, so on a shared host a
sample's figure holds the others' work too. `CountedEngine` creates every
container of the bench under one cgroup parent of its own (`--cgroup-parent`):
the kernel charges a container's CPU to each ancestor as it runs, so the
parent's counter keeps what its containers used after they are removed, and
the difference of two readings is what the bench's containers used in between
(a refill's imports, a question, a `docker run`). `cpu_seconds` adds the
engine's daemons (`dockerd`, `containerd`: create, start, attach, removal; they
serve every other client of the engine too, so on a shared host their part is
an upper bound) and this process (the pool's threads, the SDK's calls). What is
left out: the per-container `containerd-shim` processes, which exit with their
container (tens of ms each, for either mode).

Only the cgroupfs driver names a parent as a plain path; under the systemd
driver, or where the counter cannot be read, `cpu_seconds` is None and the
bench falls back to the host's busy CPU.
"""

from __future__ import annotations

import contextlib
import os
import resource
from pathlib import Path
from typing import Any

from sbx.sandbox.accounting import CGROUP_ROOT
from sbx.sandbox.bench.host import process_cpu_ticks
from sbx.sandbox.engine import Engine

DAEMONS = ("dockerd", "containerd")
"""The engine's long-lived processes, by their command name."""


class CountedEngine(Engine):
    """An engine whose containers all run under the cgroup parent `/sbx-bench-<pid>`."""

    parent = f"/sbx-bench-{os.getpid()}"
    cgroups: Path = CGROUP_ROOT

    @classmethod
    def open(cls, timeout: float = 30.0) -> CountedEngine:
        """`Engine.connect`, typed as this class."""
        engine = cls.connect(timeout)
        if not isinstance(engine, CountedEngine):  # pragma: no cover - connect builds cls
            raise TypeError(f"expected a CountedEngine, got {type(engine).__name__}")
        return engine

    def create(self, config: dict[str, Any]) -> str:
        """Create the container under this bench's cgroup parent."""
        host = {**config["host_config"], "cgroup_parent": self.parent}
        return super().create({**config, "host_config": host})

    def containers_cpu_seconds(self) -> float | None:
        """CPU seconds every container this engine created has used so far (None: unreadable)."""
        name = self.parent.lstrip("/")
        for path, scale in ((self.cgroups / "cpuacct" / name / "cpuacct.usage", 1e-9),
                            (self.cgroups / name / "cpu.stat", 1e-6)):
            try:
                text = path.read_text()
            except OSError:
                continue
            if path.name == "cpu.stat":
                fields = dict(line.split() for line in text.splitlines() if line.strip())
                return int(fields["usage_usec"]) * scale
            return int(text.strip()) * scale
        return None

    def cpu_seconds(self) -> float | None:
        """This bench's containers, the engine's daemons and this process, in CPU seconds."""
        parts = self.cpu_parts()
        return None if parts is None else sum(parts.values())

    def cpu_parts(self) -> dict[str, float] | None:
        """`cpu_seconds` by part: `containers`, `engine` (its daemons), `bench` (this process)."""
        containers = self.containers_cpu_seconds()
        if containers is None:
            return None
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"containers": containers, "engine": daemon_cpu_seconds(),
                "bench": usage.ru_utime + usage.ru_stime}

    def forget_parent(self) -> None:
        """Remove the parent's (empty) cgroup directories; what cannot be removed stays."""
        name = self.parent.lstrip("/")
        for directory in (*self.cgroups.glob(f"*/{name}"), self.cgroups / name):
            with contextlib.suppress(OSError):
                directory.rmdir()


def daemon_cpu_seconds(proc: Path = Path("/proc")) -> float:
    """CPU seconds the engine's daemons (`DAEMONS`) have used; 0 if unseen.

    Read in nanoseconds from each thread's `schedstat`: the process's `stat` counts
    in clock ticks (10 ms here), and a sample's part of the engine (a few tens of
    ms) would then move in steps of a fifth of itself. A thread that exited takes
    its time with it, but the daemons' threads live as long as they do (57 and 14
    here, unchanged through a bench; over 60 s of one the two readings agreed
    within a tick). Where `schedstat` cannot be read, the process's ticks count.
    """
    seconds = 0.0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in DAEMONS:
                continue
            seconds += _threads_cpu_seconds(entry)
        except OSError:
            continue
    return seconds


def _threads_cpu_seconds(process: Path) -> float:
    """The sum of the process's threads' time on a CPU (`schedstat`), else its ticks."""
    try:
        return sum(int((thread / "schedstat").read_text().split()[0])
                   for thread in (process / "task").iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        return process_cpu_ticks(process / "stat") / os.sysconf("SC_CLK_TCK")
