"""Acceptance 1 and 2: the running container is hardened, and code inside can feel it."""

from __future__ import annotations

import json

import pytest

from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


def test_running_container_shows_every_hardening_default(session: Session, tmp_path) -> None:
    attrs = session.engine.inspect(session.container_id or "")
    host, config = attrs["HostConfig"], attrs["Config"]
    assert attrs["State"]["Running"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert sorted(cap.removeprefix("CAP_") for cap in host["CapAdd"]) == [
        "KILL",
        "SETGID",
        "SETPCAP",
        "SETUID",
    ]  # the runner's, dropped before any code runs (test_runner_protocol_walls.py)
    assert host["SecurityOpt"][0] == "no-new-privileges:true"
    if host["Runtime"] == "runc":
        assert host["SecurityOpt"][1].startswith('seccomp={"defaultAction":"SCMP_ACT_ERRNO"')
    else:
        assert host["Runtime"] == "runsc" and len(host["SecurityOpt"]) == 1
    assert host["Privileged"] is False
    assert host["PidsLimit"] == (256 if host["Runtime"] == "runc" else 4096)
    assert host["Memory"] == 512 * 1024**2 and host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] == 1_000_000_000
    assert set(host["Tmpfs"]) == {"/tmp", "/work", "/home/user", "/output"}
    assert all("size=" in opts and "noexec" in opts for opts in host["Tmpfs"].values())
    assert host["Init"] is True
    assert host["AutoRemove"] is True
    assert host["LogConfig"]["Type"] == "none"
    assert not host.get("Binds") and not host.get("Mounts") and not attrs["Mounts"]
    assert config["User"] == "0:0"
    assert config["Labels"]["sbx.managed"] == "true"
    assert config["Labels"]["sbx.run_id"] == session.run_id
    names = {entry.split("=", 1)[0] for entry in config["Env"]}
    assert not names & {"OPENAI_API_KEY", "HOSTNAME_OF_HOST", "DOCKER_HOST", "HTTP_PROXY"}


def test_data_is_the_only_host_mount_and_it_is_read_only(engine, runtime, tmp_path) -> None:
    from conftest import TEST_IMAGE

    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,1\n")
    data.chmod(0o666)  # only the read-only mount may stop the write
    with Session.open(
        SessionSpec(
            image=TEST_IMAGE,
            data=(data,),
            output_dir=tmp_path / "o",
            limits=Limits(runtime=runtime),
        ),
        engine=engine,
    ) as s:
        mounts = s.engine.inspect(s.container_id or "")["Mounts"]
        assert [(m["Destination"], m["RW"]) for m in mounts] == [("/data/sales.csv", False)]
        result = s.run("print(open('/data/sales.csv').read())\nopen('/data/sales.csv', 'a')")
    assert "north,1" in result.stdout
    assert result.error is not None and "Read-only file system" in result.error.message


INSIDE = r"""
import ctypes, json, os, socket
status = dict(line.split(':', 1) for line in open('/proc/self/status'))
no_new_privs = ctypes.CDLL(None).prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS
facts = {"uid": os.getuid(), "gid": os.getgid(),
         "capeff": status['CapEff'].strip(), "capprm": status['CapPrm'].strip(),
         "nonewprivs": no_new_privs, "env": dict(os.environ),
         "interfaces": sorted(os.listdir('/sys/class/net'))}
try:  # /data is owned by the sandbox user in the image: only the read-only root stops this
    open('/data/evil', 'w'); facts["root_write"] = "ok"
except OSError as exc:
    facts["root_write"] = exc.strerror
root = [line.split() for line in open('/proc/mounts') if line.split()[1] == '/']
facts["root_mount_options"] = root[-1][3].split(',') if root else []
tcp = {}
TARGETS = [("1.1.1.1", 80), ("172.17.0.1", 2375), ("10.0.0.1", 80), ("169.254.169.254", 80)]
for host, port in TARGETS:
    try:
        socket.create_connection((host, port), timeout=2).close(); tcp[host] = "connected"
    except OSError as exc:
        tcp[host] = type(exc).__name__
facts["tcp"] = tcp
try:
    socket.getaddrinfo("example.com", 80); facts["dns"] = "resolved"
except OSError as exc:
    facts["dns"] = type(exc).__name__
print(json.dumps(facts))
"""


def test_code_inside_is_confined(session: Session, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-host-secret-123")
    result = session.run(INSIDE)
    assert result.ok, result
    facts = json.loads(result.stdout)
    assert facts["uid"] == 1000 and facts["gid"] == 1000
    assert facts["capeff"] == "0000000000000000" and facts["capprm"] == "0000000000000000"
    assert facts["nonewprivs"] == 1
    assert facts["root_write"] == "Read-only file system"
    assert "ro" in facts["root_mount_options"]
    assert set(facts["tcp"].values()) <= {"OSError", "TimeoutError", "ConnectionRefusedError"}
    assert "connected" not in facts["tcp"].values()
    assert facts["dns"] != "resolved"
    assert facts["interfaces"] == ["lo"]
    assert "OPENAI_API_KEY" not in facts["env"]
    assert "sk-test-host-secret-123" not in result.stdout


def test_host_environment_absent_in_fresh_mode(engine, runtime, tmp_path, monkeypatch) -> None:
    from conftest import TEST_IMAGE
    from sbx.sandbox.session import run_fresh

    monkeypatch.setenv("OPENAI_API_KEY", "sk-fresh-secret-456")
    result = run_fresh(
        "import os; print(sorted(os.environ))",
        SessionSpec(image=TEST_IMAGE, limits=Limits(runtime=runtime), output_dir=tmp_path),
        engine=engine,
    )
    assert "OPENAI_API_KEY" not in result.stdout and result.exit_code == 0
