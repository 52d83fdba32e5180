"""A restore's replay in the service: the run that caused it pays, in every figure a tenant sees.

A real `sbx serve` (SQLite and PostgreSQL), the real sandbox, the scripted
model. A key of a team with a daily money budget and its own CPU quota runs a
cell that burns half a CPU second and writes two files; its sandbox is
released for idleness, and the next question's replay alone crosses both: that
run stops `budget_exceeded` before the model is asked, its CPU, cost and kept
artifact are stored with it and shown by `/v1/usage`, the next question is
refused at the CPU quota, and every file the replay left on disk is recorded.
"""

from __future__ import annotations

import anyio
import pytest

import service_support
from mcp_http_support import connect, session_ids, text_of
from sbx.agent.core.hosting.store.models import ArtifactRow, Run
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import ask_run, wait_for

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

POLICY = {
    "service": {"idle_timeout": "1s"},
    "restore": {"snapshot_bytes": 0},  # the replay is what this test charges: no snapshot
    "agent.prices": {"currency": "EUR"},
    "agent.prices.sandbox": {"cpu_second": 1.0},
    "service.teams.thrift": {"cost_per_day": 1.0},
}
CELL = ("import os, time\nend = time.process_time() + 0.5\n"
        "while time.process_time() < end:\n    pass\n"
        "open('/output/table.csv', 'w').write('x,y\\n1,2\\n')\n"
        "open('/output/noise.bin', 'wb').write(os.urandom(64))\nprint('written')")


@pytest.mark.docker
def test_a_replay_is_charged_budgeted_quota_counted_and_its_files_recorded(store, serve, llm):
    server = serve(store, policy=POLICY)
    client = server.client(server.key("gus", team="thrift", cpu_seconds_per_day=1.0))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([tool_call("execute_python", code=CELL), assistant("Written.")])
    first = ask_run(client, conversation, "Write the files.")
    assert first["status"] == "completed", first
    spent = first["cost"]["total"]
    assert 0.5 <= first["result"]["sandbox"]["cpu_seconds"] < 1.0 and spent < 1.0
    before = client.get("/v1/usage").json()
    assert before["used"]["cpu_seconds_per_day"] < 1.0

    wait_for(lambda: client.get(f"/v1/conversations/{conversation}").json()["sandbox"]
             == "released", what="the idle release")
    asked = len(llm.requests)
    second = ask_run(client, conversation, "And now?")  # the model is never asked: no turn scripted

    assert len(llm.requests) == asked
    assert second["status"] == "budget_exceeded", second
    assert "team 'thrift' per day (1 EUR)" in second["message"]
    used = second["result"]["sandbox"]
    assert used["executions"] == 1 and used["cpu_seconds"] >= 0.5  # the replayed cell
    assert second["cost"]["total"] == pytest.approx(used["cpu_seconds"], abs=1e-3)
    kept = [artifact["name"] for artifact in second["artifacts"]]
    assert len(kept) == 1 and kept[0].startswith("restored-") and kept[0].endswith("/noise.bin")

    usage = client.get("/v1/usage").json()
    assert usage["used"]["cpu_seconds_per_day"] == pytest.approx(
        first["result"]["sandbox"]["cpu_seconds"] + used["cpu_seconds"], abs=1e-2)
    team_day = next(b for b in usage["spend"]["budgets"]
                    if (b["scope"], b["period"]) == ("team", "day"))
    assert team_day["spent"] == pytest.approx(spent + second["cost"]["total"], abs=1e-3)
    assert usage["used"]["storage_bytes"] >= before["used"]["storage_bytes"] + 64

    refused = client.post(f"/v1/conversations/{conversation}/questions",
                          json={"question": "Once more?"})
    assert refused.status_code == 429, refused.text
    assert refused.json()["quota"] == "cpu_seconds_per_day"

    files = [path for path in server.data_dir.rglob("*")
             if path.is_file() and path.name in ("table.csv", "noise.bin")]
    assert sorted(path.name for path in files) == ["noise.bin", "noise.bin", "table.csv"]
    with server.stored() as session:
        recorded = {row.path for row in session.query(ArtifactRow).all()}
    assert {str(path) for path in files} <= recorded


@pytest.mark.docker
def test_an_mcp_execution_pays_for_the_replay_before_it_and_records_its_files(
    tmp_path, serve, engine
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}",
                   policy={"service": {"idle_timeout": "1s"}})
    key = server.key("ivy")
    sessions = server.client(key)

    async def scenario():
        async with connect(server, key) as client:
            await client.call_tool("execute_python", {"code": CELL})
            [first] = session_ids(server)
            wait_for(lambda: {c["id"]: c["status"] for c in sessions.get(
                "/v1/conversations").json()["items"]}.get(first) == "closed",
                what="the idle session's end")
            after = await client.call_tool("execute_python", {"code": "print('again')"})
            on_disk = [path for path in (server.data_dir / "mcp").rglob("*") if path.is_file()]
        return after, on_disk

    after, on_disk = anyio.run(scenario)

    assert "restored 1 cell" in text_of(after) and "[stdout]\nagain" in text_of(after)
    with server.stored() as session:
        runs = session.query(Run).filter(Run.kind == "mcp").order_by(Run.created_at).all()
        artifacts = {row.path: row.run_id for row in session.query(ArtifactRow).all()}
        cpu = [run.cpu_seconds for run in runs]
        last, restore = runs[-1].id, (runs[-1].result or {}).get("restore")
    assert len(cpu) == 2 and cpu[0] >= 0.5 and cpu[1] >= 0.5  # the replayed cell's CPU too
    assert restore is not None and restore["executions"] == 1 and restore["cpu_seconds"] >= 0.5
    assert on_disk and {str(path) for path in on_disk} <= set(artifacts)
    assert all("/restored-" in str(path) for path in on_disk)  # the first session's dir is gone
    assert {artifacts[str(path)] for path in on_disk} == {last}  # recorded on the execution
