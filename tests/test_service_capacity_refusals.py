"""`sbx serve`: limits the engine would refuse are a 422 naming the minimum (no lease taken, no
engine text shown), and a dataset a running execution mounts cannot be deleted under it."""

from __future__ import annotations

import pytest

import service_support
from service_support import sse_events, upload

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster


@pytest.mark.docker
def test_limits_below_the_engines_minimum_are_422_and_take_no_capacity(store, serve):
    server = serve(store, env={"SBX_MAX_SANDBOXES": "2", "SBX_HOST_WAIT": "5"})
    client = server.client(server.key("quinn"))
    for limits, named in [({"memory": "1"}, "24 MiB"), ({"cpus": "0.001"}, "0.01")] * 3:
        refused = client.post("/v1/execute", json={"code": "print(1)", "limits": limits})
        assert refused.status_code == 422, refused.text
        problem = refused.json()
        assert named in problem["detail"] and "limits." in problem["detail"]
        assert "Minimum memory limit" not in refused.text  # the engine's own words never
    # more refusals than the host cap (2) happened: the next execution still gets a sandbox
    done = client.post("/v1/execute", json={"code": "print(6)", "limits": {"memory": "64m"}})
    assert done.status_code == 200, done.text
    assert done.json()["execution"]["stdout"] == "6\n"


@pytest.mark.docker
def test_a_dataset_a_running_execution_mounts_cannot_be_deleted(store, serve):
    server = serve(store)
    client = server.client(server.key("quinn"))
    dataset = upload(client, "sales.csv", b"a\n1\n").json()["id"]
    code = ("import time\nprint(open('/data/sales.csv').read().split()[1], flush=True)\n"
            "time.sleep(4)")
    with client.stream("POST", "/v1/execute", json={"code": code, "datasets": [dataset]},
                       headers={"Accept": "text/event-stream"}) as response:
        events = sse_events(response)
        first = next(events)
        assert first["event"] == "output" and first["data"]["text"].startswith("1"), first
        refused = client.delete(f"/v1/datasets/{dataset}")  # while the code runs
        assert refused.status_code == 409, refused.text
        assert "running execution run-" in refused.json()["detail"]
        result = [event for event in events if event["event"] == "result"]
    assert result and result[0]["data"]["status"] == "ok", result
    assert client.delete(f"/v1/datasets/{dataset}").status_code == 204  # free once it ended
