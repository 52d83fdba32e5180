"""A state snapshot in the service: counted in `storage_bytes`, removed with its conversation.

A real `sbx serve` (SQLite), the real sandbox, the scripted model; the
sandbox is released by the service's own idle release.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import service_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import ask_run, wait_for

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

CELL = "import numpy as np\nbig = np.arange(250_000)\nprint(big.size)"
"""About 2 MB of state."""


def _snapshots(root: Path) -> list[Path]:
    return [path for path in root.rglob("snapshot") if path.parent.name == "sbx-state"]


@pytest.mark.docker
def test_a_snapshot_counts_in_storage_and_goes_with_its_conversation(store, serve, llm,
                                                                      tmp_path):
    root = tmp_path / "sandbox-data"
    server = serve(store, policy={"service": {"idle_timeout": "1s"}},
                   env={"SBX_DATA_ROOT": str(root)})
    client = server.client(server.key("ada"))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([tool_call("execute_python", code=CELL), assistant("Made.")])
    assert ask_run(client, conversation, "Make it.")["status"] == "completed"
    before = client.get("/v1/usage").json()["used"]["storage_bytes"]

    wait_for(lambda: client.get(f"/v1/conversations/{conversation}").json()["sandbox"]
             == "released", what="the idle release")
    [snapshot] = wait_for(lambda: _snapshots(root), what="the snapshot")
    size = snapshot.stat().st_size
    assert size > 2_000_000
    held = client.get("/v1/usage").json()["used"]["storage_bytes"]
    assert held >= before + size

    llm.script([tool_call("execute_python", code="print(int(big[-1]))"), assistant("249999")])
    after = ask_run(client, conversation, "The last one?")
    assert after["status"] == "completed"
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n249999\n")

    assert client.delete(f"/v1/conversations/{conversation}").status_code == 204
    assert _snapshots(root) == []
    assert client.get("/v1/usage").json()["used"]["storage_bytes"] < held
