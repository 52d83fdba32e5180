"""Acceptance 2: no key or a revoked key is 401; each quota is 429 with Retry-After, named.

The per-key overrides are what `sbx keys create --max-conversations ...` stores.
"""

from __future__ import annotations

import subprocess

import pytest

import service_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import SBX, stream, upload, wait_for

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

CSV = b"a,b\n" + b"1,2\n" * 1000  # 4 KiB


def _quota_problem(response, quota: str) -> dict:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    assert body["quota"] == quota and body["status"] == 429
    assert body["detail"].startswith(f"{quota}: ")
    return body


@pytest.mark.docker
def test_no_key_an_unknown_key_and_a_revoked_key_get_401(store, serve):
    server = serve(store)
    key = server.key("carol")
    carol = server.client(key)
    assert carol.get("/v1/datasets").status_code == 200
    for client in (server.client(), server.client("sbx_not-a-key"), server.client("Basic x")):
        refused = client.get("/v1/datasets")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.headers["content-type"] == "application/problem+json"
    revoked = subprocess.run([*SBX, "keys", "revoke", "carol", "--database", server.database],
                             capture_output=True, text=True, timeout=60)
    assert revoked.returncode == 0, revoked.stderr
    # The server had looked the key up: it asks the store again within `key_cache` (2 s)
    wait_for(lambda: carol.get("/v1/datasets").status_code == 401, timeout=2.0 + 5.0,
             what="the revoked key refused")
    assert server.client().get("/healthz").status_code == 200  # health needs no key


@pytest.mark.docker
def test_conversations_at_once_and_stored_and_uploaded_bytes(store, serve):
    server = serve(store)
    client = server.client(server.key("dave", max_conversations=1, dataset_bytes=6000,
                                      upload_bytes=5000))
    first = client.post("/v1/conversations", json={})
    assert first.status_code == 201, first.text
    _quota_problem(client.post("/v1/conversations", json={}), "max_conversations")
    assert client.delete(f"/v1/conversations/{first.json()['id']}").status_code == 204
    assert client.post("/v1/conversations", json={}).status_code == 201  # the slot came back

    stored = upload(client, "one.csv", CSV)
    assert stored.status_code == 201, stored.text
    _quota_problem(upload(client, "two.csv", CSV), "dataset_bytes")
    too_big = upload(client, "big.csv", CSV * 2)
    assert too_big.status_code == 413  # retrying the same file cannot help: not 429
    assert too_big.json()["quota"] == "upload_bytes"
    names = sorted(p.name for p in (server.data_dir / "datasets").iterdir())
    assert names == [stored.json()["id"]]  # no partial file of the refused uploads is left


@pytest.mark.docker
def test_runs_per_hour_and_cpu_seconds_per_day(store, serve, llm):
    server = serve(store)
    hourly = server.client(server.key("erin", runs_per_hour=1))
    conversation = hourly.post("/v1/conversations", json={}).json()["id"]
    llm.script([assistant("One.")])
    run = hourly.post(f"/v1/conversations/{conversation}/questions", json={"question": "1?"})
    assert run.status_code == 202
    assert stream(hourly, run.json()["run_id"])[-1]["data"]["status"] == "completed"
    body = _quota_problem(hourly.post(f"/v1/conversations/{conversation}/questions",
                                      json={"question": "2?"}), "runs_per_hour")
    assert 3000 < body["retry_after"] <= 3600  # when the first run leaves the hour
    _quota_problem(hourly.post("/v1/execute", json={"code": "print(1)"}), "runs_per_hour")

    thrifty = server.client(server.key("frank", cpu_seconds_per_day=0.001))
    conversation = thrifty.post("/v1/conversations", json={}).json()["id"]
    llm.script([tool_call("execute_python", code="print(sum(range(3_000_000)))"),
                assistant("Summed.")])
    run = thrifty.post(f"/v1/conversations/{conversation}/questions", json={"question": "sum"})
    assert stream(thrifty, run.json()["run_id"])[-1]["data"]["status"] == "completed"
    used = thrifty.get(f"/v1/runs/{run.json()['run_id']}").json()["result"]["sandbox"]
    assert used["cpu_seconds"] > 0.001
    _quota_problem(thrifty.post(f"/v1/conversations/{conversation}/questions",
                                json={"question": "again"}), "cpu_seconds_per_day")
