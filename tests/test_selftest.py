"""`sbx selftest` passes on the default configuration and fails the right checks on a weak one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.checks.selftest import run_selftest
from sbx.sandbox.limits import Limits

pytestmark = pytest.mark.docker

BATTERY = {
    "cleanup.containers", "environment.leak", "filesystem.host_paths", "filesystem.mountinfo",
    "filesystem.root", "host.responsive", "isolation.files", "isolation.next_run",
    "isolation.processes", "limits.cpu", "limits.memory", "limits.pids", "limits.time",
    "network.interfaces", "network.public", "network.gateway", "network.metadata", "network.dns",
    "output.artifacts", "output.flood", "privileges.capabilities", "privileges.escalation",
    "privileges.user", "protocol.descriptors", "protocol.memory", "protocol.signals",
    "protocol.users",
}
"""The containment battery, pinned: a check that silently stops running fails this test."""


def test_default_configuration_passes_every_check(engine, runtime) -> None:
    results = run_selftest(Limits(runtime=runtime), image=TEST_IMAGE, engine=engine)
    failed = {r.name: r.happened for r in results if not r.passed}
    assert not failed
    assert [r.name for r in results if r.name.startswith("network.")][0] == "network.interfaces"
    assert {r.name for r in results} == BATTERY  # every check ran, each once
    assert len(results) == len(BATTERY)


def test_weakened_configuration_fails_the_right_checks(engine) -> None:
    # Network on and no effective pids limit. egress=False: list interfaces, send nothing
    # off this machine (the bridge would otherwise really connect).
    weak = Limits(network="bridge", pids=8192)
    results = run_selftest(weak, image=TEST_IMAGE, engine=engine, egress=False)
    failed = sorted(r.name for r in results if not r.passed)
    assert failed == ["limits.pids", "network.interfaces"]


def test_cli_prints_one_line_per_check_and_json(engine) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from sbx.agent.cli.main import main; main()",
            "selftest",
            "--json",
            "--image",
            TEST_IMAGE,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["passed"] is True
    assert {"network.public", "limits.memory", "isolation.processes"} <= {
        check["name"] for check in report["checks"]
    }
