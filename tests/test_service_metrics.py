"""Acceptance 5 and the access log over real HTTP: `sbx serve`, real Docker, the scripted model.

`/metrics` is parsed with prometheus-client's own parser, and its counters
must move as executions, tool calls, model replies, runs, requests and quota
rejections happen. The access log is read from the server's stderr.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import service_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.keys import create_key
from sbx.agent.service.metrics import Metrics
from sbx.agent.testing.scripted_model import assistant, call, tool_call, tool_calls
from service_support import stream, wait_for

serve = service_support.serve
llm = service_support.llm

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _admin_key(server) -> str:
    db = Database.open(server.database)
    try:
        return create_key(db, "ops", role="admin")
    finally:
        db.close()


def _scrape(client) -> Samples:
    answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def _moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return _value(after, name, **labels) - _value(before, name, **labels)


def _access_lines(server) -> list[dict[str, Any]]:
    return [json.loads(line) for line in list(server.lines) if line.startswith('{"time"')]


@pytest.mark.docker
def test_metrics_parse_and_move_as_executions_happen(tmp_path, serve, llm):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    user_key = server.key("alice", max_conversations=1)
    alice = server.client(user_key)
    ops = server.client(_admin_key(server))

    assert server.client().get("/metrics").status_code == 401
    refused = alice.get("/metrics")
    assert refused.status_code == 403 and "admin" in refused.json()["detail"]
    before = _scrape(ops)
    assert {"idle", "building", "removing", "in_use"} <= {
        dict(labels)["state"] for name, labels in before if name == "sbx_pool_containers"}

    llm.script([
        tool_calls(call("execute_python", code="print(6 * 7)"),
                   call("no such tool; rm -rf /", x=1), usage=(120, 30)),
        tool_call("execute_python", code="1 / 0"),
        assistant("The answer is 42.", usage=(200, 10)),
    ])
    created = alice.post("/v1/conversations", json={})
    assert created.status_code == 201, created.text
    conversation = created.json()["id"]
    asked = alice.post(f"/v1/conversations/{conversation}/questions",
                       json={"question": "What is six times seven?"})
    assert asked.status_code == 202, asked.text
    run_id = asked.json()["run_id"]
    events = stream(alice, run_id)
    assert events[-1]["data"]["type"] == "run_end"
    assert alice.get(f"/v1/runs/{run_id}").json()["status"] == "completed"
    assert alice.post("/v1/conversations", json={}).status_code == 429  # max_conversations
    executed = alice.post("/v1/execute", json={"code": "import sys; sys.exit(3)"})
    assert executed.status_code == 200, executed.text

    def settled() -> Samples | None:  # run_finished is told just after the stream can end
        after = _scrape(ops)
        return after if _moved(before, after, "sbx_runs_total", status="completed") else None

    after = wait_for(settled, what="the run to be counted")
    runc = {"runtime": "runc"}
    assert _moved(before, after, "sbx_executions_total", outcome="ok", **runc) == 1
    assert _moved(before, after, "sbx_executions_total", outcome="error", **runc) == 2
    assert _moved(before, after, "sbx_execution_duration_seconds_count", **runc) == 3
    assert _moved(before, after, "sbx_execution_duration_seconds_sum", **runc) > 0
    assert _moved(before, after, "sbx_execution_cpu_seconds_count", **runc) == 3
    assert _moved(before, after, "sbx_execution_peak_memory_bytes_count", **runc) == 3
    assert _moved(before, after, "sbx_tool_calls_total", tool="execute_python",
                  decision="allowed") == 3
    # the model named a tool that does not exist: counted, but its name is no label
    assert _moved(before, after, "sbx_tool_calls_total", tool="-", decision="unknown") == 1
    assert not any("rm -rf" in json.dumps(labels) for _, labels in after)
    assert _moved(before, after, "sbx_model_tokens_total", type="input") >= 320
    assert _moved(before, after, "sbx_model_tokens_total", type="output") >= 40
    assert _moved(before, after, "sbx_model_request_duration_seconds_count") == 3
    assert _moved(before, after, "sbx_run_duration_seconds_count") == 1
    assert _moved(before, after, "sbx_quota_rejections_total", quota="max_conversations") == 1
    assert _moved(before, after, "sbx_http_requests_total", method="GET",
                  route="/v1/runs/{run_id}", status="200") == 1
    assert _moved(before, after, "sbx_http_requests_total", method="POST",
                  route="/v1/conversations", status="429") == 1
    assert _moved(before, after, "sbx_http_requests_total", method="GET",
                  route="/v1/runs/{run_id}/events", status="200") == 1
    assert not any(run_id in json.dumps(labels) for _, labels in after)  # templates, not paths
    assert _value(after, "sbx_pool_containers", state="in_use") == 1  # the conversation's
    # no [pool] warming by default: the conversation's and /v1/execute's sandboxes were created
    assert _moved(before, after, "sbx_pool_takes_total", result="miss") == 2
    assert _moved(before, after, "sbx_pool_takes_total", result="hit") == 0
    assert _value(after, "sbx_pool_target") == 0
    assert _value(after, "sbx_runs_in_progress") == 0

    lines = _access_lines(server)
    mine = [line for line in lines if line["request_id"] == asked.headers["x-request-id"]]
    assert len(mine) == 1, lines[-5:]
    assert mine[0]["principal"] == "key:alice" and mine[0]["status"] == 202
    assert mine[0]["route"] == "/v1/conversations/{conversation_id}/questions"
    assert mine[0]["method"] == "POST" and mine[0]["bytes_in"] > 0 and mine[0]["bytes_out"] > 0
    assert "six times" not in server.log  # no bodies
    assert user_key not in server.log  # no keys


@pytest.mark.docker
def test_the_access_log_escapes_what_the_client_sends(tmp_path, serve):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    client = server.client()
    hostile = "/v1/%1B%5B31mred%E2%80%A8" + "x" * 1000  # the server sees ESC [ 31m and U+2028
    answer = client.get(hostile, headers={"x-request-id": "r-1"})
    assert answer.status_code in (401, 404)
    unauthenticated = client.get("/v1/datasets", headers={"x-request-id": "r-2"})
    assert unauthenticated.status_code == 401

    def logged() -> list[str]:
        raw = [line for line in list(server.lines) if '"request_id": "r-' in line]
        return raw if len(raw) == 2 else []

    raw = wait_for(logged, what="two access log lines")
    assert all("\x1b" not in line and "\u2028" not in line for line in raw)
    first, second = (json.loads(line) for line in raw)
    assert first["path"].startswith("/v1/\x1b[31mred") and len(first["path"]) == 200
    assert first["route"] == "(unmatched)"
    assert (second["principal"], second["route"], second["status"]) == (None, "/v1/datasets", 401)


def test_each_service_has_its_own_registry():
    first, second = Metrics(runtime="runc"), Metrics(runtime="runsc")
    first.execution_finished(principal="key:a", run_id="r", status="ok",
                             execution={"exit_code": 0, "duration_s": 0.5})
    assert b'sbx_executions_total{outcome="ok",runtime="runc"} 1.0' in first.render()
    assert b"sbx_executions_total{" not in second.render()
