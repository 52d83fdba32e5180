"""`sbx selftest` re-proves the protocol walls and reports the mount table honestly.

The protocol checks must pass on the default configuration and fail on a weakened one:
here, the landed arrangement, where the container starts as the code's user and the
runner (outside sandbox mode) cannot separate, so code shares its uid and init's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sbx.sandbox.session as session_module
from conftest import TEST_IMAGE
from sbx.sandbox.checks.common import Probe
from sbx.sandbox.checks.protocol import check_mountinfo, check_protocol
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits

pytestmark = pytest.mark.docker

PROTOCOL_CHECKS = ["protocol.descriptors", "protocol.memory", "protocol.signals", "protocol.users"]


def probe_for(engine: Engine, runtime: str, scratch: Path) -> Probe:
    return Probe(engine=engine, limits=Limits(runtime=runtime), image=TEST_IMAGE, scratch=scratch)


def test_protocol_checks_pass_on_the_default_configuration(
    engine: Engine, runtime: str, tmp_path: Path
) -> None:
    results = check_protocol(probe_for(engine, runtime, tmp_path))
    assert sorted(r.name for r in results) == PROTOCOL_CHECKS
    assert all(r.passed and not r.limit for r in results), results


def test_protocol_checks_fail_when_code_shares_the_runners_uid(
    monkeypatch: pytest.MonkeyPatch, engine: Engine, runtime: str, tmp_path: Path
) -> None:
    original = session_module.container_config

    def weakened(*args: Any, **kwargs: Any) -> dict[str, Any]:
        config = original(*args, **kwargs)
        environment = {k: v for k, v in config["environment"].items() if k != "SBX_SANDBOX"}
        return {**config, "user": "1000:1000", "environment": environment}

    monkeypatch.setattr(session_module, "container_config", weakened)
    results = check_protocol(probe_for(engine, runtime, tmp_path))
    failed = sorted(r.name for r in results if not r.passed)
    if runtime == "runsc":
        # gVisor's Yama ptrace scope is 1: only a descendant's memory opens, whatever the uid.
        assert failed == [name for name in PROTOCOL_CHECKS if name != "protocol.memory"], results
    else:
        assert failed == PROTOCOL_CHECKS, results


def test_mountinfo_is_a_runc_limit_and_hidden_under_gvisor(
    engine: Engine, runtime: str, tmp_path: Path
) -> None:
    """Under runc the root mount's overlay options name the engine's directories on the
    host and nothing in runc hides them (it masks paths, and /proc/self is per process);
    gVisor shows its own mount table. The check says which, without failing runc."""
    result = check_mountinfo(probe_for(engine, runtime, tmp_path))
    assert result.passed, result
    if runtime == "runc":
        assert result.limit and result.happened.startswith("runc limit; use runsc"), result
    else:
        assert not result.limit and result.happened == "no host path shown", result
