"""Every way a sandbox fails to start gives its host lease back; limits the engine refuses never
reach it (a clear error, the minimum named, on every face)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.errors import SandboxError
from sbx.sandbox.host_caps import HostCaps
from sbx.sandbox.limits import MIN_CPUS, MIN_MEMORY, Limits, memory_floor
from sbx.sandbox.pool import Pool, PoolConfig
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

GIB = 1 << 30


def capacity(tmp_path: Path) -> HostCapacity:
    caps = HostCaps(sandboxes=2, memory=16 * GIB, cpus=32.0)
    return HostCapacity(directory=tmp_path / "ledger", caps=caps, wait_s=5.0)


def refused_by_engine() -> Limits:
    """Limits the engine refuses at create (built without validation, as a bypass would be)."""
    return Limits.model_construct(**{**Limits().__dict__, "memory": 1024})


@pytest.mark.docker
@pytest.mark.parametrize("limits", [
    pytest.param(Limits(timeout="10s", runtime="no-such-runtime"), id="unknown-runtime"),
    pytest.param(refused_by_engine(), id="engine-refuses-create"),
])
def test_a_refused_start_gives_the_lease_back(engine, tmp_path, limits) -> None:
    ledger = capacity(tmp_path)
    with Pool.start(engine=engine, capacity=ledger, config=PoolConfig(size=0)) as pool:
        for _ in range(3):  # more attempts than the cap: each one's lease must come back
            with pytest.raises(SandboxError):
                pool.session(SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path))
            assert pool.reaper.wait_idle(60)
            assert ledger.usage().sandboxes == 0, ledger.usage()
        fine = pool.session(SessionSpec(limits=Limits(timeout="10s"), image=TEST_IMAGE,
                                        output_dir=tmp_path))
        with fine:
            assert fine.run("print(1)").stdout == "1\n"


@pytest.mark.parametrize(("field", "value", "named"), [
    ("memory", "1", "24 MiB"), ("memory", "6m", "24 MiB"), ("memory", "24575k", "24 MiB"),
    ("cpus", "0.001", "0.01"), ("pids", 8, "16"),
])
def test_limits_below_the_engines_minimum_are_refused_with_the_minimum_named(
        field, value, named) -> None:
    with pytest.raises(ValueError, match=named):
        Limits(**{field: value})
    assert Limits(memory=MIN_MEMORY, cpus=MIN_CPUS).memory == MIN_MEMORY


def test_gvisor_needs_more_memory_and_says_so() -> None:
    with pytest.raises(ValueError, match="48 MiB with runtime runsc"):
        Limits(memory="32m", runtime="runsc")
    assert Limits(memory="48m", runtime="runsc").memory == memory_floor("runsc")


@pytest.mark.docker
def test_the_memory_floor_is_where_a_sandbox_starts(engine, runtime, tmp_path) -> None:
    """At the floor a sandbox starts and runs; at the engine's own 6 MiB it dies at its start."""
    floor = Limits(memory=memory_floor(runtime), runtime=runtime, timeout="20s")
    with Session.open(SessionSpec(limits=floor, image=TEST_IMAGE, output_dir=tmp_path / "a"),
                      engine=engine) as session:
        assert session.run("print(1)").stdout == "1\n"
        assert session.run("1 + 1").stdout == "2\n"  # a shown value imports IPython's display
    below = Limits.model_construct(**{**floor.__dict__, "memory": 6 * 1024**2})
    with pytest.raises(SandboxError):
        Session.open(SessionSpec(limits=below, image=TEST_IMAGE, output_dir=tmp_path / "b"),
                     engine=engine).close()
