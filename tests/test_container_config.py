"""The whole hardened create configuration, pinned. The claims are proved live elsewhere."""

import json
from pathlib import Path

from sbx.sandbox.config import DATA_TARGET, DataMount, container_config
from sbx.sandbox.limits import Limits
from sbx.sandbox.seccomp import build_profile, render_profile

SHIPPED_PROFILE = json.dumps(build_profile(), separators=(",", ":"))


def test_default_limits_produce_closed_container() -> None:
    mount = DataMount(source=Path("/srv/sales.csv"), target="/data/sales.csv")
    cfg = container_config(Limits(), run_id="r1", mode="session", data=(mount,), owner="h:1")
    assert cfg == {
        "image": "sbx-python:latest",
        "command": ["python3", "-I", "-u", "/opt/sbx/runner.pyc"],
        "user": "0:0",  # init and the runner start as root; code runs as 1000 (runner.py)
        "working_dir": "/work",
        "hostname": "sandbox",
        "environment": {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": "/tmp/matplotlib",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "SBX_SANDBOX": "1",
            "SBX_PREIMPORT": "0",
        },
        "labels": {
            "sbx.managed": "true",
            "sbx.run_id": "r1",
            "sbx.mode": "session",
            "sbx.owner": "h:1",
        },
        "stdin_open": True,
        "use_config_proxy": False,
        "tty": False,
        "host_config": {
            "network_mode": "none",
            "read_only": True,
            "cap_drop": ["ALL"],
            "cap_add": ["KILL", "SETGID", "SETPCAP", "SETUID"],
            "security_opt": ["no-new-privileges:true", f"seccomp={SHIPPED_PROFILE}"],
            "privileged": False,
            "pids_limit": 256,
            "mem_limit": 536870912,
            "memswap_limit": 536870912,
            "nano_cpus": 1000000000,
            "tmpfs": {
                "/tmp": "rw,nosuid,nodev,noexec,size=268435456,mode=1777",
                "/work": "rw,nosuid,nodev,noexec,size=268435456,uid=1000,gid=1000,mode=0700",
                "/home/user": "rw,nosuid,nodev,noexec,size=268435456,uid=1000,gid=1000,mode=0700",
                "/output": "rw,nosuid,nodev,noexec,size=268435456,uid=1000,gid=1000,mode=0700",
            },
            "init": True,
            "ipc_mode": "private",
            "shm_size": 67108864,
            "auto_remove": True,
            "log_config": {"type": "none", "config": {}},
            "ulimits": [
                {"name": "nofile", "soft": 1024, "hard": 1024},
                {"name": "fsize", "soft": 268435456, "hard": 268435456},
                {"name": "core", "soft": 0, "hard": 0},
            ],
            "mounts": [
                {
                    "Type": "bind",
                    "Source": "/srv/sales.csv",
                    "Target": "/data/sales.csv",
                    "ReadOnly": True,
                    "BindOptions": {"Propagation": "rprivate"},
                }
            ],
            "runtime": "runc",
        },
    }


def test_a_warm_container_mounts_one_directory_of_its_own_read_only_at_data() -> None:
    """The run's files arrive in it later (sandbox/datadir.py); the shape is pinned."""
    own = Path("/var/lib/sbx/data/0a1b2c3d.42.0123456789ab")
    mount = DataMount(source=own, target=DATA_TARGET)
    cfg = container_config(
        Limits(), run_id="pool-1", mode="pool", data=(mount,), owner="h:42", preimport=True
    )
    assert cfg["environment"]["SBX_PREIMPORT"] == "1"
    assert cfg["host_config"]["mounts"] == [
        {
            "Type": "bind",
            "Source": str(own),
            "Target": "/data",
            "ReadOnly": True,
            "BindOptions": {"Propagation": "rprivate"},
        }
    ]


def test_opening_the_network_is_explicit() -> None:
    cfg = container_config(Limits(network="bridge"), run_id="r1", mode="fresh")
    assert cfg["host_config"]["network_mode"] == "bridge"
    assert (
        container_config(Limits(), run_id="r1", mode="fresh")["host_config"]["network_mode"]
        == "none"
    )


def test_cpu_threads_follow_the_quota() -> None:
    cfg = container_config(Limits(cpus="1.5"), run_id="r1", mode="fresh")
    assert cfg["host_config"]["nano_cpus"] == 1_500_000_000
    assert cfg["environment"]["OMP_NUM_THREADS"] == "2"


def test_gvisor_gets_no_unenforced_seccomp_option() -> None:
    cfg = container_config(Limits(runtime="runsc"), run_id="r1", mode="fresh")
    assert cfg["host_config"]["security_opt"] == ["no-new-privileges:true"]
    assert cfg["host_config"]["runtime"] == "runsc"


def test_shipped_seccomp_json_is_the_reviewed_generator_output() -> None:
    from sbx.sandbox.config import SHIPPED_SECCOMP

    assert SHIPPED_SECCOMP.read_text() == render_profile()
    profile = build_profile()
    allowed = set(profile["syscalls"][0]["names"])
    denied = {
        "ptrace",
        "keyctl",
        "add_key",
        "request_key",
        "userfaultfd",
        "perf_event_open",
        "bpf",
        "unshare",
        "setns",
        "mount",
        "umount2",
        "pivot_root",
        "io_uring_setup",
        "process_vm_readv",
        "kexec_load",
        "init_module",
        "open_by_handle_at",
    }
    assert not allowed & denied
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"


def test_operator_seccomp_file_must_be_json(tmp_path) -> None:
    import pytest

    from sbx.sandbox.errors import InvalidInput

    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInput, match="not JSON"):
        container_config(Limits(seccomp=str(bad)), run_id="r1", mode="fresh")
