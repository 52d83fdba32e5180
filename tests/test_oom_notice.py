"""An OOM is known from the kernel itself, after its cgroup is gone too (cgroup v1).

The engine's `oom` report can be lost on a loaded host: containerd reads it from the
cgroup after the fact, and a container whose process ends at once may be removed
first (a CI run reported a gVisor sandbox killed by its memory limit as its runner
stopping). A session's cgroup reader registers for the kernel's own notification, which
is signalled once more when the cgroup is removed: that signal is not an OOM.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_engine_gone import MEMORY_BOMB, started

from conftest import TEST_IMAGE, wait_until
from sbx.sandbox.accounting import CgroupAccounting
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import run_fresh
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


def test_the_kernel_tells_of_an_oom_and_still_does_once_the_cgroup_is_gone(engine) -> None:
    limits = {"mem_limit": "64m", "memswap_limit": "64m"}
    killing, quiet = (started(engine, ["sleep", "600"], **limits) for _ in range(2))
    meters = {container_id: CgroupAccounting(container_id) for container_id in (killing, quiet)}
    try:
        if meters[quiet].snapshot().oom_notices is None:
            pytest.skip("the kernel's OOM notification is read on cgroup v1 with a local engine")
        assert meters[killing].snapshot().oom_notices == 0
        bomb = engine.api.exec_create(killing, ["python3", "-c", MEMORY_BOMB])["Id"]
        engine.api.exec_start(bomb)  # returns when its limit has killed it; the container goes on
        assert engine.api.exec_inspect(bomb)["ExitCode"] == 137
        assert wait_until(lambda: meters[killing].snapshot().oom_notices == 1, 60)
        assert meters[quiet].snapshot().oom_notices == 0
        for container_id in (killing, quiet):
            engine.remove(container_id)  # their cgroups go with them, and signal it
        assert meters[killing].snapshot().oom_notices == 1
        assert meters[quiet].snapshot().oom_notices == 0
    finally:
        for container_id, meter in meters.items():
            meter.close()
            engine.remove(container_id)


def test_a_memory_kill_is_reported_when_the_engine_lost_its_report(engine, runtime, tmp_path,
                                                                     monkeypatch) -> None:
    """What the loaded host does to the engine's report, done here: the kill is still known."""
    inspect = engine.inspect

    def without_oom_killed(container_id: str) -> dict[str, Any]:
        state = inspect(container_id)
        return {**state, "State": {**state["State"], "OOMKilled": False}}

    monkeypatch.setattr(engine, "inspect", without_oom_killed)
    monkeypatch.setattr(engine, "saw_oom", lambda container_id, *, since: False)
    result = run_fresh(
        MEMORY_BOMB,
        SessionSpec(limits=Limits(runtime=runtime, memory="128m", timeout="20s"),
                    image=TEST_IMAGE, output_dir=tmp_path),
        engine=engine,
    )
    assert result.oom_killed and not result.timed_out, result
    assert result.exit_code == 137
