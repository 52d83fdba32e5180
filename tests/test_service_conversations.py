"""Acceptance 1 over real HTTP: upload, ask, follow up, stream, resume; others see nothing.

A real `sbx serve` process (SQLite and PostgreSQL), real Docker, the real
SDK against the scripted model, httpx as the client.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

import service_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import held_back
from service_support import SBX, stream, upload

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

SALES = (Path(__file__).resolve().parents[1] / "examples" / "sales.csv").read_bytes()
READ_ROWS = "import pandas as pd\ndf = pd.read_csv('/data/sales.csv')\nrows = len(df)\nprint(rows)"


def _ask(client, conversation: str, question: str) -> str:
    answer = client.post(f"/v1/conversations/{conversation}/questions",
                         json={"question": question})
    assert answer.status_code == 202, answer.text
    assert answer.headers["location"] == f"/v1/runs/{answer.json()['run_id']}"
    return str(answer.json()["run_id"])


@pytest.mark.docker
def test_a_follow_up_uses_the_first_runs_variable_and_the_stream_resumes_without_loss(
    store, serve, llm
):
    server = serve(store)
    alice = server.client(server.key("alice"))
    dataset = upload(alice, "sales.csv", SALES)
    assert dataset.status_code == 201, dataset.text
    assert "columns: period (text), year (int)" in dataset.json()["preview"]
    created = alice.post("/v1/conversations", json={"datasets": [dataset.json()["id"]]})
    assert created.status_code == 201, created.text
    conversation = created.json()["id"]

    release = threading.Event()
    llm.script([
        tool_call("execute_python", code=READ_ROWS),
        assistant("There are 96 rows."),
        held_back(release, tool_call("execute_python", code="print(rows * 2)")),
        assistant("Twice that is 192."),
    ])
    first = _ask(alice, conversation, "How many rows?")
    events = stream(alice, first)
    assert [e["id"] for e in events] == [str(n) for n in range(1, len(events) + 1)]
    assert [e["event"] for e in events][0] == "run_start"
    assert events[-1]["data"]["status"] == "completed"
    assert events[-1]["data"]["answer"] == "There are 96 rows."
    assert stream(alice, first, after=2) == events[2:]  # a reconnect gets exactly the rest

    second = _ask(alice, conversation, "And twice that?")
    seen = []
    with alice.stream("GET", f"/v1/runs/{second}/events") as response:  # leave mid-run
        for event in service_support.sse_events(response):
            seen.append(event)
            if event["event"] == "message":  # the question; the model has not answered yet
                break
    release.set()
    rest = stream(alice, second, after=int(seen[-1]["id"]))
    together = seen + rest
    assert [e["id"] for e in together] == [str(n) for n in range(1, len(together) + 1)]
    # Live output comes as output_chunk events only when the runner sends it before the
    # result (a quick print usually rides with the result; a loaded host splits them).
    assert [e["event"] for e in together if e["event"] != "output_chunk"] == [
        "run_start", "message", "model_reply", "tool_result", "model_reply", "run_end"]

    run = alice.get(f"/v1/runs/{second}").json()
    assert (run["status"], run["answer"]) == ("completed", "Twice that is 192.")
    assert run["result"]["sandbox"]["executions"] == 1
    assert (run["verified"], run["outcome"]) == (True, "completed")  # what the page shows
    assert [(s["number"], s["execution"], s["text"]) for s in run["sources"]] == [
        ("192", 1, "192")]
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n192")  # `rows` survived
    start = together[0]["data"]
    assert start["principal"] == "key:alice"
    assert start["data"] == ["sales.csv"]
    assert "output_dir" not in start and "base_url" not in start  # no host paths, no endpoint
    listed = alice.get(f"/v1/conversations/{conversation}").json()
    assert listed["runs"] == [first, second] and listed["sandbox"] == "held"

    audit = [json.loads(line) for line in server.audit_log.read_text().splitlines()]
    assert {r["data"]["principal"] for r in audit if r["run_id"] in (first, second)} == {
        "key:alice"}
    verified = subprocess.run([*SBX, "audit", "verify", str(server.audit_log)],
                              capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0, verified.stderr


@pytest.mark.docker
def test_another_principal_gets_404_for_everything_of_anothers(store, serve, llm):
    server = serve(store)
    alice = server.client(server.key("alice"))
    bob = server.client(server.key("bob"))
    dataset = upload(alice, "sales.csv", SALES).json()["id"]
    conversation = alice.post("/v1/conversations", json={"datasets": [dataset]}).json()["id"]
    llm.script([
        tool_call("execute_python", code="open('/output/table.csv', 'w').write('a,b\\n1,2\\n')"),
        assistant("Saved."),
    ])
    run = _ask(alice, conversation, "Save a table.")
    assert stream(alice, run)[-1]["data"]["status"] == "completed"
    assert alice.get(f"/v1/runs/{run}/artifacts/table.csv").status_code == 200

    attempts = {
        "dataset": bob.get(f"/v1/datasets/{dataset}"),
        "delete dataset": bob.delete(f"/v1/datasets/{dataset}"),
        "conversation": bob.get(f"/v1/conversations/{conversation}"),
        "question": bob.post(f"/v1/conversations/{conversation}/questions",
                             json={"question": "mine now?"}),
        "delete conversation": bob.delete(f"/v1/conversations/{conversation}"),
        "run": bob.get(f"/v1/runs/{run}"),
        "cancel": bob.post(f"/v1/runs/{run}/cancel"),
        "events": bob.get(f"/v1/runs/{run}/events"),
        "artifacts": bob.get(f"/v1/runs/{run}/artifacts"),
        "download": bob.get(f"/v1/runs/{run}/artifacts/table.csv"),
        "use the dataset": bob.post("/v1/conversations", json={"datasets": [dataset]}),
        "execute with it": bob.post("/v1/execute", json={"code": "print(1)",
                                                         "datasets": [dataset]}),
    }
    assert {name: r.status_code for name, r in attempts.items()} == dict.fromkeys(attempts, 404)
    for response in attempts.values():
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["status"] == 404
    assert bob.get("/v1/datasets").json()["items"] == []
    assert bob.get("/v1/conversations").json()["items"] == []
    assert alice.get(f"/v1/conversations/{conversation}").json()["status"] == "active"
    assert alice.get(f"/v1/datasets/{dataset}").status_code == 200
