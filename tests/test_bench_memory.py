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
        # Wherever that cgroup is mounted and named, not at a default path.
        pid = engine.api.inspect_container(container_id)["State"]["Pid"]
        named = {line.split(":", 2)[1]: line.split(":", 2)[2]
                 for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()}
        elsewhere = tmp_path / "cgroup"
        if "memory" in named:
            target = elsewhere / "memory" / named["memory"].lstrip("/") / "memory.usage_in_bytes"
        else:
            target = elsewhere / named[""].lstrip("/") / "memory.current"
        target.parent.mkdir(parents=True)
        target.write_text("123456789\n")
        assert container_memory_bytes(engine, container_id, root=elsewhere) == 123456789
    monkeypatch.undo()
    assert container_memory_bytes(engine, container_id) == 0  # gone: a figure, not a failure
