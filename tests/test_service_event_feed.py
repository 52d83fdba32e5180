"""Over HTTP, a run's events stream from the replica's memory and match the store, in order.

Real server (SQLite and PostgreSQL), real sandbox, scripted model: eight
conversations at once lose no event and get them in order, each asking its next
question the moment it sees `run_end` (never 409); a client that reconnects with
`Last-Event-ID` while the run still runs, or after it ended, gets what it missed.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest
from sqlalchemy import select

import service_support
from sbx.agent.core.hosting.store.models import EventRow
from sbx.agent.testing.scripted_model import Reply, ScriptedCall, ScriptedRequest, assistant
from scripted_llm import held_back
from service_support import sse_events, stream

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

CONVERSATIONS = 8
QUESTIONS = 2


def _respond(request: ScriptedRequest) -> Reply:
    """Run a program, then (after its result) answer: any conversation, in any order."""
    if (request.body.get("messages") or [{}])[-1].get("role") == "tool":
        return Reply(content="Done.")
    code = json.dumps({"code": "x = globals().get('x', 0) + 1\nprint(x)"})
    return Reply(tool_calls=(ScriptedCall(name="execute_python", arguments=code),))


def _stored(server: service_support.Server, run_id: str) -> list[dict[str, Any]]:
    with server.stored() as session:
        rows = session.execute(select(EventRow.seq, EventRow.type, EventRow.data).where(
            EventRow.run_id == run_id).order_by(EventRow.seq)).all()
    return [{"id": str(seq), "event": kind, "data": json.loads(data)} for seq, kind, data in rows]


def _converse(client: httpx.Client, conversation: str, seen: dict[str, list[dict[str, Any]]],
              refused: list[str]) -> None:
    """Ask each question the moment the previous one's `run_end` arrives."""
    for number in range(QUESTIONS):
        posted = client.post(f"/v1/conversations/{conversation}/questions",
                             json={"question": f"question {number}"})
        if posted.status_code != 202:
            refused.append(posted.text)
            return
        run_id = posted.json()["run_id"]
        events = seen.setdefault(run_id, [])
        with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
            for event in sse_events(response):
                events.append(event)
                if event["event"] == "run_end":
                    break


@pytest.mark.docker
def test_eight_conversations_get_every_event_in_order_and_ask_again_on_run_end(
    store, serve, llm
):
    server = serve(store, policy={"service": {"max_running": CONVERSATIONS}})
    llm.script([_respond] * (CONVERSATIONS * QUESTIONS * 2))
    clients = [server.client(server.key(f"user{n}")) for n in range(CONVERSATIONS)]
    conversations = [c.post("/v1/conversations", json={}).json()["id"] for c in clients]
    seen: dict[str, list[dict[str, Any]]] = {}
    refused: list[str] = []
    workers = [threading.Thread(target=_converse, args=(client, conversation, seen, refused))
               for client, conversation in zip(clients, conversations, strict=True)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(600)
    assert refused == []  # never 409: the run's status was stored before its run_end came
    assert len(seen) == CONVERSATIONS * QUESTIONS
    for run_id, events in seen.items():
        assert [e["id"] for e in events] == [str(n) for n in range(1, len(events) + 1)]
        assert events[-1]["event"] == "run_end" and events[-1]["data"]["status"] == "completed"
        assert events == _stored(server, run_id)  # the stream is what the store records


@pytest.mark.docker
def test_a_reconnect_with_last_event_id_gets_what_it_missed_mid_run_and_after(
    store, serve, llm
):
    server = serve(store)
    ann = server.client(server.key("ann"))
    conversation = ann.post("/v1/conversations", json={}).json()["id"]
    release = threading.Event()
    llm.script([_respond, held_back(release, assistant("Done."))])
    run_id = ann.post(f"/v1/conversations/{conversation}/questions",
                      json={"question": "go"}).json()["run_id"]
    first: list[dict[str, Any]] = []
    with ann.stream("GET", f"/v1/runs/{run_id}/events") as response:  # leave mid-run
        for event in sse_events(response):
            first.append(event)
            if event["event"] == "tool_result":  # the model's answer is held back
                break
    assert len(first) >= 4

    resumed: list[dict[str, Any]] = []
    with ann.stream("GET", f"/v1/runs/{run_id}/events",
                    headers={"Last-Event-ID": "1"}) as response:  # missed all but the first
        for event in sse_events(response):
            resumed.append(event)
            if event["id"] == first[-1]["id"]:
                release.set()  # the run goes on while this stream follows it
        assert resumed[:len(first) - 1] == first[1:]
    assert resumed[-1]["event"] == "run_end"
    everything = [first[0], *resumed]
    assert [e["id"] for e in everything] == [str(n) for n in range(1, len(everything) + 1)]
    assert everything == _stored(server, run_id)
    middle = int(first[-1]["id"])
    assert stream(ann, run_id, after=middle) == everything[middle:]  # from the store, ended
    assert server.client(server.key("bob")).get(f"/v1/runs/{run_id}/events").status_code == 404
