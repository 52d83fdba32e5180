"""The host's own figures for `sbx bench`: CPU time used by every process, or by one (`/proc`)."""

from __future__ import annotations

import os
from pathlib import Path


def host_busy_seconds(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds all processes of this host have used since boot (None off Linux)."""
    try:
        fields = stat.read_text().splitlines()[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def process_cpu_ticks(stat: Path, *, reaped: bool = False) -> int:
    """Clock ticks (user + system) of the process whose `/proc/<pid>/stat` is `stat`.

    `reaped`: with those of its children it waited for. The command name (field 2) may
    hold spaces and parentheses, so the fields are counted after its last `)`. Raises
    `OSError` when the process is gone.
    """
    fields = stat.read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks + int(fields[13]) + int(fields[14]) if reaped else ticks
