"""The container's create arguments as one pure function of `Limits`: what a reviewer reads.

Nothing here talks to Docker. `container_config` returns the keyword arguments
for `docker.api.create_container` plus its host config, so a golden test can
pin the whole hardened configuration, and an acceptance test proves it against
a real engine.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.limits import Limits

DEFAULT_IMAGE = "sbx-python:latest"
SANDBOX_USER = "1000:1000"
"""The uid:gid model-written code runs as: the runner drops each interpreter to it."""
CONTAINER_USER = "0:0"
"""Who the container starts as. Init stays root and the runner drops itself to uid 999
at once (images/runner.py), so code (uid 1000) can neither reach their descriptors
through /proc nor signal them: the runner protocol stays the runner's alone."""
CAPABILITIES = ["KILL", "SETGID", "SETPCAP", "SETUID"]
"""All a root start keeps (everything else is dropped). The runner uses SETPCAP once, to
empty the bounding set, then keeps KILL (end stray processes) and SETUID/SETGID (drop each
interpreter to uid 1000 with no capability, and take the code's effective uid while it
reads `/output`); `no-new-privileges` holds throughout."""
RUNNER_COMMAND = ["python3", "-I", "-u", "/opt/sbx/runner.pyc"]
"""The runner, compiled at image build (images/Dockerfile): no compile at every start."""
MANAGED_LABEL = "sbx.managed"
RUN_ID_LABEL = "sbx.run_id"
MODE_LABEL = "sbx.mode"
OWNER_LABEL = "sbx.owner"
TMPFS_OPTIONS = "rw,nosuid,nodev,noexec"
SHIPPED_SECCOMP = Path(__file__).with_name("seccomp.json")


DATA_TARGET = "/data"
"""Where input data appears: `/data/<name>` per path, or a warm container's whole directory."""


@dataclass(frozen=True, kw_only=True)
class DataMount:
    """One host path shown read-only inside the container."""

    source: Path
    """Absolute, resolved host path (file or directory)."""
    target: str
    """Where it appears: `/data/<name>` (or `/data` itself for a per-container directory)."""


def container_environment(limits: Limits, *, preimport: bool = False,
                          also_import: tuple[str, ...] = ()) -> dict[str, str]:
    """The container's whole environment: ours only, nothing inherited from the host.

    `SBX_PREIMPORT` tells the runner whether its zygote imports the data stack, and
    `SBX_PREIMPORT_MORE` (a restore-ready container's only) which modules past it,
    comma-separated, module names only.
    """
    threads = str(max(1, math.ceil(limits.cpus)))
    more = module_names(also_import)
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
        "SBX_PREIMPORT": "1" if preimport else "0",
        **({"SBX_PREIMPORT_MORE": ",".join(more)} if preimport and more else {}),
    }


MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
"""A dotted module name and nothing else (the runner checks the same again)."""


def module_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` that are dotted module names, in order: what a container may be told to import."""
    return tuple(name for name in names if MODULE_NAME.fullmatch(name))


def seccomp_profile(choice: str) -> str:
    """The seccomp profile's JSON text: the shipped allowlist, or an operator's file.

    The shipped profile denies by default and allows what Python data analysis
    uses; `sandbox/seccomp.py` documents what it leaves out and why.
    """
    path = SHIPPED_SECCOMP if choice == "sbx" else Path(choice)
    try:
        text = path.read_text()
        json.loads(text)
    except (OSError, ValueError) as exc:
        message = f"seccomp profile {str(path)!r} is unreadable or not JSON: {exc}"
        raise InvalidInput(message) from None
    return json.dumps(json.loads(text), separators=(",", ":"))


def security_options(limits: Limits) -> list[str]:
    """`no-new-privileges` always; our seccomp allowlist wherever the runtime loads it.

    gVisor (`runsc`) runs the code against its own user-space kernel, which sits
    under gVisor's own seccomp filter; this Debian runsc's `--oci-seccomp`
    mode refuses `pselect6` even when a profile allows it, so the profile is
    not passed there rather than shown in `docker inspect` and not enforced.
    """
    options = ["no-new-privileges:true"]
    if limits.runtime != "runsc":
        options.append(f"seccomp={seccomp_profile(limits.seccomp)}")
    return options


GVISOR_PIDS_FACTOR = 16
"""Under gVisor the pids cgroup counts the Sentry's host threads (and, on the ptrace
platform, its stub processes), not the code's processes: a pids limit sized for the
code kills the whole sandbox on harmless fork-heavy work. There the code's process
count is bounded by RLIMIT_NPROC, which gVisor enforces inside its own kernel.
Measured here: 64 sleeping children need between 256 and 512 host pids."""


def cgroup_pids_limit(limits: Limits) -> int:
    """The pids cgroup limit that fits the runtime (see GVISOR_PIDS_FACTOR)."""
    return limits.pids * GVISOR_PIDS_FACTOR if limits.runtime == "runsc" else limits.pids


def process_limits(limits: Limits) -> list[dict[str, Any]]:
    """Per-process rlimits: open files, file size, no core dumps; nproc only under gVisor.

    RLIMIT_NPROC counts every process of a uid on the host kernel, across all
    containers, so under runc it would let one sandbox starve another; gVisor
    counts only the processes inside its own sandbox.
    """
    rlimits: list[dict[str, Any]] = [
        {"name": "nofile", "soft": limits.nofile, "hard": limits.nofile},
        {"name": "fsize", "soft": limits.fsize, "hard": limits.fsize},
        {"name": "core", "soft": 0, "hard": 0},
    ]
    if limits.runtime == "runsc":
        rlimits.append({"name": "nproc", "soft": limits.pids, "hard": limits.pids})
    return rlimits


def tmpfs_mounts(limits: Limits) -> dict[str, str]:
    """Writable places: size-limited tmpfs only, no exec, no setuid, no devices.

    `/home/user` is E2B's home: code written for E2B's sandboxes writes there
    by absolute path (its face starts there); sbx's own code works in `/work`.
    """
    owned = "uid=1000,gid=1000,mode=0700"
    return {
        "/tmp": f"{TMPFS_OPTIONS},size={limits.tmp_size},mode=1777",
        "/work": f"{TMPFS_OPTIONS},size={limits.tmp_size},{owned}",
        "/home/user": f"{TMPFS_OPTIONS},size={limits.tmp_size},{owned}",
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
    preimport: bool = False,
    also_import: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Keyword arguments for the engine's create call: every hardening default in one place.

    `owner` (`host:pid` of the creating process) lets `sbx gc` tell orphans
    from containers a live process still uses; `preimport` (the warm pool's
    containers) has the runner import the data stack at start, and `also_import` past it
    (the restore-ready containers). Returns a dict with the
    container-level keys and a `host_config` dict
    (the keyword arguments of `APIClient.create_host_config`).
    """
    host_config: dict[str, Any] = {
        "network_mode": limits.network,
        "read_only": True,
        "cap_drop": ["ALL"],
        "cap_add": CAPABILITIES,
        "security_opt": security_options(limits),
        "privileged": False,
        "pids_limit": cgroup_pids_limit(limits),
        "mem_limit": limits.memory,
        "memswap_limit": limits.memory,
        "nano_cpus": int(limits.cpus * 1e9),
        "tmpfs": tmpfs_mounts(limits),
        "init": True,
        "ipc_mode": "private",
        "shm_size": min(limits.tmp_size, 64 * 1024 * 1024),
        "auto_remove": True,
        "log_config": {"type": "none", "config": {}},
        "ulimits": process_limits(limits),
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
        "user": CONTAINER_USER,
        "working_dir": "/work",
        "hostname": "sandbox",
        "environment": container_environment(limits, preimport=preimport,
                                             also_import=also_import),
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
