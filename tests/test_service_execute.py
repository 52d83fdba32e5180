"""`POST /v1/execute` and artifact downloads: the gate, the audit, the content types, the fences."""

from __future__ import annotations

import json

import pytest

import service_support
from conftest import wait_until_removed
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.config import MODE_LABEL
from service_support import server_containers, sse_events, stream, upload, wait_for

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

CHART = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
df = pd.read_csv("/data/sales.csv")
df.plot(x="region", y="revenue", kind="bar").figure.savefig("/output/chart.png")
open("/output/page.svg", "w").write("<svg xmlns='http://www.w3.org/2000/svg'><script>x</script></svg>")
print(len(df))
"""


@pytest.mark.docker
def test_execute_runs_code_through_the_gate_with_the_callers_datasets(store, serve):
    server = serve(store)
    key = server.key("quinn")
    client = server.client(key)
    dataset = upload(client, "sales.csv", b"region,revenue\nNorth,10\nSouth,12\n").json()["id"]
    done = client.post("/v1/execute", json={"code": CHART, "datasets": [dataset]})
    assert done.status_code == 200, done.text
    result = done.json()
    assert result["status"] == "ok"
    assert result["execution"]["stdout"] == "2\n"
    names = {a["name"]: a for a in result["artifacts"]}
    assert set(names) == {"chart.png", "page.svg"}

    chart = client.get(names["chart.png"]["url"])
    assert chart.status_code == 200 and chart.content.startswith(b"\x89PNG")
    assert chart.headers["content-type"] == "image/png"
    assert chart.headers["content-disposition"].startswith("inline")
    svg = client.get(names["page.svg"]["url"])
    assert svg.headers["content-disposition"] == 'attachment; filename="page.svg"'
    assert svg.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in svg.headers["content-security-policy"]

    failed = client.post("/v1/execute", json={"code": "1 / 0"}).json()
    assert failed["status"] == "error"
    assert failed["execution"]["error"]["type"] == "ZeroDivisionError"
    too_long = client.post("/v1/execute", json={"code": "print(1)", "limits": {"timeout": "1h"}})
    assert too_long.status_code == 422 and "limits.timeout" in too_long.json()["detail"]
    other = server.client(server.key("rita"))
    assert other.get(f"/v1/runs/{result['run_id']}").status_code == 404
    assert other.get(names["chart.png"]["url"]).status_code == 404

    audit = [json.loads(line) for line in server.audit_log.read_text().splitlines()]
    mine = [r for r in audit if r["run_id"] == result["run_id"]]
    assert [r["event"] for r in mine] == ["run_start", "request", "decision", "outcome", "run_end"]
    assert {r["data"]["principal"] for r in mine} == {"key:quinn"}


@pytest.mark.docker
def test_an_artifact_is_served_only_from_its_own_runs_output(store, serve, llm):
    server = serve(store)
    client = server.client(server.key("sam"))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([
        tool_call("execute_python", code="import os\nos.makedirs('/output/sub')\n"
                  "open('/output/sub/table.csv', 'w').write('a,b\\n1,2\\n')"),
        assistant("Saved."),
    ])
    run = client.post(f"/v1/conversations/{conversation}/questions",
                      json={"question": "save"}).json()["run_id"]
    end = stream(client, run)[-1]["data"]
    assert end["artifacts"] == ["sub/table.csv"]  # names, not host paths
    table = client.get(f"/v1/runs/{run}/artifacts/sub/table.csv")
    assert table.status_code == 200 and table.content == b"a,b\n1,2\n"
    assert table.headers["content-disposition"] == 'attachment; filename="table.csv"'
    assert table.headers["content-type"].startswith("text/csv")
    listed = client.get(f"/v1/runs/{run}/artifacts").json()["items"]
    assert [a["name"] for a in listed] == ["sub/table.csv"]
    for trick in ("sub%2F..%2Fsub%2Ftable.csv", "..%2F..%2Ftranscript.jsonl", "sub%2F..%2F..%2F..",
                  "/etc/passwd", "table.csv"):
        refused = client.get(f"/v1/runs/{run}/artifacts/{trick}")
        assert refused.status_code == 404, trick


@pytest.mark.docker
def test_a_full_host_answers_503_with_retry_after(store, serve, llm, tmp_path):
    server = serve(store, env={"SBX_MAX_SANDBOXES": "1", "SBX_HOST_WAIT": "0.5",
                               "SBX_CAPACITY_DIR": str(tmp_path / "capacity")})
    client = server.client(server.key("uma"))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([tool_call("execute_python", code="x = 1"), assistant("Holding the sandbox.")])
    run = client.post(f"/v1/conversations/{conversation}/questions",
                      json={"question": "hold"}).json()["run_id"]
    assert stream(client, run)[-1]["data"]["status"] == "completed"  # its sandbox stays held
    busy = client.post("/v1/execute", json={"code": "print(1)"})
    assert busy.status_code == 503, busy.text
    assert int(busy.headers["retry-after"]) >= 1
    assert busy.json()["type"].endswith("/busy") and "SBX_MAX_SANDBOXES" in busy.json()["detail"]
    assert client.delete(f"/v1/conversations/{conversation}").status_code == 204


WAITS = """
import os, time
print('started', flush=True)
while not os.path.exists('/tmp/go'):
    time.sleep(0.01)
print('done')
"""


def _server_containers(engine, server) -> list[str]:
    """The server's containers but its warm pool's: the one running the execution."""
    return [c["Id"] for c in server_containers(engine, server)
            if c["Labels"].get(MODE_LABEL) != "pool"]


@pytest.mark.docker
def test_a_streamed_execute_sends_output_while_the_code_runs_then_the_result(
    store, serve, engine
):
    server = serve(store)
    client = server.client(server.key("sam"))
    events = []
    headers = {"Accept": "text/event-stream"}
    with client.stream("POST", "/v1/execute", json={"code": WAITS}, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in sse_events(response):
            events.append(event)
            if event["event"] == "output" and "started" in event["data"]["text"]:
                # The code waits for this file: the event came while it ran, not at its end.
                (container,) = _server_containers(engine, server)
                exec_id = engine.api.exec_create(container, ["touch", "/tmp/go"],
                                                 user="1000:1000")["Id"]
                engine.api.exec_start(exec_id)
    kinds = [event["event"] for event in events]
    assert kinds[0] == "output" and kinds[-1] == "result"
    # The first chunk may stop before the newline (a later read of the pipe carries it).
    assert events[0]["data"]["stream"] == "stdout"
    assert "started\n".startswith(events[0]["data"]["text"]) and events[0]["data"]["text"]
    result = events[-1]["data"]
    assert result["status"] == "ok" and result["execution"]["stdout"] == "started\ndone\n"
    assert client.get(f"/v1/runs/{result['run_id']}").json()["status"] == "ok"


@pytest.mark.docker
def test_a_client_that_leaves_a_streamed_execute_stops_its_code(store, serve, engine):
    server = serve(store)
    client = server.client(server.key("tess"))
    headers = {"Accept": "text/event-stream"}
    code = "print('started', flush=True)\nwhile True: pass"
    with client.stream("POST", "/v1/execute", json={"code": code}, headers=headers) as response:
        for event in sse_events(response):
            if event["event"] == "output":
                (container,) = _server_containers(engine, server)
                break  # and the connection closes with the block
    wait_until_removed(engine, container)
    runs = wait_for(lambda: [r for r in _audit(server) if r["event"] == "outcome"],
                    what="the execution's outcome")
    assert runs[0]["data"]["status"] == "cancelled"


@pytest.mark.docker
def test_a_streamed_execute_refused_before_it_runs_is_a_plain_problem(store, serve):
    server = serve(store)
    client = server.client(server.key("uma"))
    headers = {"Accept": "text/event-stream"}
    too_long = client.post("/v1/execute", json={"code": "print(1)", "limits": {"timeout": "1h"}},
                           headers=headers)
    assert too_long.status_code == 422
    assert too_long.headers["content-type"] == "application/problem+json"


def _audit(server) -> list[dict]:
    return [json.loads(line) for line in server.audit_log.read_text().splitlines()]
