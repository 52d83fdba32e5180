"""The host's own figures for `sbx bench`: CPU time used by every process (moved from run.py)."""

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
