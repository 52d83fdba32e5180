"""A container's memory, as the benches read it, wherever the engine put its cgroup."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.bench.memory import container_memory_bytes
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

HELD = 64 << 20


@pytest.mark.docker
def test_a_containers_memory_is_read_from_the_engine_or_the_cgroup_its_process_names(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SessionSpec(limits=Limits(timeout="20s"), image=TEST_IMAGE, output_dir=tmp_path / "o")
    with Session.open(spec, engine=engine) as live:
        assert live.run(f"held = b'x' * {HELD}\nprint(len(held))").stdout.strip() == str(HELD)
        container_id = live.container_id
        assert container_id is not None
        assert container_memory_bytes(engine, container_id) > HELD
        # An engine whose stats leave memory out: the cgroup its first process names.
        monkeypatch.setattr(engine.api, "stats", lambda *_, **__: {"memory_stats": {}})
        assert container_memory_bytes(engine, container_id) > HELD
        # Wherever that cgroup is mounted and named (a Kubernetes node's, v1 and v2).
        pid = engine.api.inspect_container(container_id)["State"]["Pid"]
        nested = f"/kubepods/burstable/pod1/{container_id}"
        for version, line, charged in (
            (1, f"4:memory:{nested}", Path("memory") / nested[1:] / "memory.usage_in_bytes"),
            (2, f"0::{nested}", Path(nested[1:]) / "memory.current"),
        ):
            proc, root = tmp_path / f"proc{version}", tmp_path / f"cgroup{version}"
            (proc / str(pid)).mkdir(parents=True)
            (proc / str(pid) / "cgroup").write_text(f"9:pids:/elsewhere\n{line}\n")
            (root / charged).parent.mkdir(parents=True)
            (root / charged).write_text(f"{123456 + version}\n")
            found = container_memory_bytes(engine, container_id, root=root, proc=proc)
            assert found == 123456 + version
    monkeypatch.undo()
    assert container_memory_bytes(engine, container_id) == 0  # gone: a figure, not a failure
