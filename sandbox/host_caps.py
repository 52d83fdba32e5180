"""The host-wide caps and what one sandbox takes from them (the figures `sandbox.capacity` keeps).

Defaults come from this host's size: `SBX_MAX_SANDBOXES` (default 32),
`SBX_MAX_MEMORY` (default 75% of the host's RAM; memory is never
over-committed), `SBX_MAX_CPUS` (default 4x the host's cores: CPU quotas are
ceilings that time-share, so some overlap only slows).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sbx.sandbox.errors import SandboxError
from sbx.sandbox.limits import Limits
from sbx.sandbox.units import format_size, parse_cpus, parse_size

ENV_MAX_SANDBOXES = "SBX_MAX_SANDBOXES"
ENV_MAX_MEMORY = "SBX_MAX_MEMORY"
ENV_MAX_CPUS = "SBX_MAX_CPUS"
DEFAULT_MAX_SANDBOXES = 32
CPU_OVERLAP = 4
"""Default `SBX_MAX_CPUS` as a multiple of the host's cores."""
MEMORY_SHARE = 0.75
"""Default `SBX_MAX_MEMORY` as a share of the host's RAM."""


def host_memory_bytes() -> int:
    """Physical memory of the host (MemTotal), from /proc/meminfo or sysconf."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True, kw_only=True)
class HostCaps:
    """The host-wide ceilings: every running sandbox of every sbx process counts."""

    sandboxes: int
    """Most sandbox containers alive at once (`SBX_MAX_SANDBOXES`)."""
    memory: int
    """Most bytes of summed `Limits.memory` (`SBX_MAX_MEMORY`)."""
    cpus: float
    """Most summed `Limits.cpus` (`SBX_MAX_CPUS`)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> HostCaps:
        """Caps from the environment, with defaults derived from this host's size."""
        cores = os.cpu_count() or 1
        try:
            return cls(
                sandboxes=int(environ.get(ENV_MAX_SANDBOXES, DEFAULT_MAX_SANDBOXES)),
                memory=parse_size(
                    environ.get(ENV_MAX_MEMORY, int(host_memory_bytes() * MEMORY_SHARE))
                ),
                cpus=parse_cpus(environ.get(ENV_MAX_CPUS, float(cores * CPU_OVERLAP))),
            )
        except ValueError as exc:
            raise SandboxError(f"bad host cap in the environment: {exc}") from None

    def describe(self) -> str:
        """One line for reports: `32 sandboxes, 17.7 GiB, 8 CPUs`."""
        return f"{self.sandboxes} sandboxes, {format_size(self.memory)}, {self.cpus:g} CPUs"


@dataclass(frozen=True, kw_only=True)
class Need:
    """What one sandbox takes from the host's caps."""

    memory: int
    """Bytes: the container's memory limit (tmpfs counts against it)."""
    cpus: float
    """The container's CPU quota."""

    @classmethod
    def of(cls, limits: Limits) -> Need:
        """The need of a container created with these limits."""
        return cls(memory=limits.memory, cpus=limits.cpus)


@dataclass(kw_only=True)
class HostUsage:
    """The ledger's totals at one moment."""

    sandboxes: int = 0
    """Leases held (containers being created, running, or being removed)."""
    memory: int = 0
    """Summed memory of the leases, in bytes."""
    cpus: float = 0.0
    """Summed CPUs of the leases."""
    waiting: int = 0
    """Callers in the queue."""
