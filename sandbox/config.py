"""The container's create arguments as one pure function of `Limits`: what a reviewer reads.

Nothing here talks to Docker. `container_config` returns the keyword arguments
for `docker.api.create_container` plus its host config, so a golden test can
pin the whole hardened configuration, and an acceptance test proves it against
a real engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.limits import Limits

DEFAULT_IMAGE = "sbx-python:latest"
SANDBOX_USER = "1000:1000"
RUNNER_COMMAND = ["python3", "-I", "-u", "/opt/sbx/runner.py"]
MANAGED_LABEL = "sbx.managed"
RUN_ID_LABEL = "sbx.run_id"
MODE_LABEL = "sbx.mode"
OWNER_LABEL = "sbx.owner"
TMPFS_OPTIONS = "rw,nosuid,nodev,noexec"


@dataclass(frozen=True, kw_only=True)
class DataMount:
    """One host path shown read-only inside the container."""

    source: Path
    """Absolute, resolved host path (file or directory)."""
    target: str
    """Where it appears: `/data/<name>`."""


def container_environment(limits: Limits) -> dict[str, str]:
    """The container's whole environment: ours only, nothing inherited from the host."""
    threads = str(max(1, math.ceil(limits.cpus)))
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/matplotlib",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "SBX_SANDBOX": "1",
    }


def tmpfs_mounts(limits: Limits) -> dict[str, str]:
    """Writable places: size-limited tmpfs only, no exec, no setuid, no devices."""
    owned = "uid=1000,gid=1000,mode=0700"
    return {
        "/tmp": f"{TMPFS_OPTIONS},size={limits.tmp_size},mode=1777",
        "/work": f"{TMPFS_OPTIONS},size={limits.tmp_size},{owned}",
        "/output": f"{TMPFS_OPTIONS},size={limits.output_size},{owned}",
    }


def container_config(
    limits: Limits,
    *,
    run_id: str,
    mode: str,
    image: str = DEFAULT_IMAGE,
    data: tuple[DataMount, ...] = (),
    owner: str = "",
) -> dict[str, Any]:
    """Keyword arguments for the engine's create call: every hardening default in one place.

    `owner` (`host:pid` of the creating process) lets `sbx gc` tell orphans
    from containers a live process still uses. Returns a dict with the
    container-level keys and a `host_config` dict
    (the keyword arguments of `APIClient.create_host_config`).
    """
    host_config: dict[str, Any] = {
        "network_mode": limits.network,
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "privileged": False,
        "pids_limit": limits.pids,
        "mem_limit": limits.memory,
        "memswap_limit": limits.memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "tmpfs": tmpfs_mounts(limits),
        "init": True,
        "ipc_mode": "private",
        "shm_size": min(limits.tmp_size, 64 * 1024 * 1024),
        "auto_remove": True,
        "log_config": {"type": "none", "config": {}},
        "ulimits": [
            {"name": "nofile", "soft": limits.nofile, "hard": limits.nofile},
            {"name": "fsize", "soft": limits.fsize, "hard": limits.fsize},
            {"name": "core", "soft": 0, "hard": 0},
        ],
        "mounts": [
            {
                "Type": "bind",
                "Source": str(m.source),
                "Target": m.target,
                "ReadOnly": True,
                "BindOptions": {"Propagation": "rprivate"},
            }
            for m in data
        ],
        "runtime": limits.runtime,
    }
    return {
        "image": image,
        "command": RUNNER_COMMAND,
        "user": SANDBOX_USER,
        "working_dir": "/work",
        "hostname": "sandbox",
        "environment": container_environment(limits),
        "labels": {
            MANAGED_LABEL: "true",
            RUN_ID_LABEL: run_id,
            MODE_LABEL: mode,
            OWNER_LABEL: owner,
        },
        "stdin_open": True,  # docker-py sets StdinOnce with it: our detach closes stdin
        "use_config_proxy": False,
        "tty": False,
        "host_config": host_config,
    }
