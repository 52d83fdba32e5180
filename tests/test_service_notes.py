"""Notes over HTTP: `/v1/datasets/{id}/notes`, tenancy as datasets, and the next conversation.

A real `sbx serve` (SQLite and PostgreSQL), real Docker, the real SDK against the scripted
model; httpx as the client. The model's `remember` saves a note in one
conversation; the next conversation's system prompt carries it.
"""

from __future__ import annotations

import pytest

import service_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.keys import create_key
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import stream, upload

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

SALES = b"region,amount\nNorth,150\nSouth,250\n"
SHARED = {"tools.remember": {"enabled": True, "share_with_team": True}}


def _key(server, name: str, team: str | None) -> str:
    db = Database.open(server.database)
    try:
        return create_key(db, name, team=team)
    finally:
        db.close()


def _conversation_prompt(client, llm, dataset: str, turns) -> str:
    """Ask one question in a new conversation on `dataset`; the system prompt it was sent."""
    created = client.post("/v1/conversations", json={"datasets": [dataset]})
    assert created.status_code == 201, created.text
    before = len(llm.requests)
    llm.script(turns)
    asked = client.post(f"/v1/conversations/{created.json()['id']}/questions",
                        json={"question": "Region 9 is a test region. What is the total?"})
    assert stream(client, asked.json()["run_id"])[-1]["data"]["status"] == "completed"
    return str(llm.requests[before].body["messages"][0]["content"])


@pytest.mark.docker
def test_notes_on_a_dataset_are_the_callers_or_their_teams_and_reach_the_next_conversation(
    store, serve, llm
):
    server = serve(store, policy=SHARED)
    alice = server.client(_key(server, "alice", "red"))
    bob = server.client(_key(server, "bob", "red"))
    mallory = server.client(_key(server, "mallory", None))
    mine = upload(alice, "sales.csv", SALES).json()["id"]

    added = alice.post(f"/v1/datasets/{mine}/notes", json={"text": "amounts are in cents"})
    assert added.status_code == 201, added.text
    note = added.json()
    assert (note["author"], note["team"], note["stale"], note["by_model"]) == (
        "key:alice", "red", False, False)
    for method, path in (("GET", f"/v1/datasets/{mine}/notes"),
                         ("PATCH", f"/v1/datasets/{mine}/notes/{note['id']}"),
                         ("DELETE", f"/v1/datasets/{mine}/notes/{note['id']}")):
        refused = mallory.request(method, path, json={"text": "mine now"})
        assert refused.status_code == 404, (method, refused.text)  # another key: not found
    theirs = upload(mallory, "sales.csv", SALES).json()["id"]
    assert mallory.get(f"/v1/datasets/{theirs}/notes").json()["items"] == []
    assert mallory.delete(f"/v1/datasets/{theirs}/notes/{note['id']}").status_code == 404

    changed = upload(bob, "sales.csv", SALES + b"East,1\n").json()["id"]
    seen = bob.get(f"/v1/datasets/{changed}/notes").json()["items"]
    assert [(n["text"], n["stale"]) for n in seen] == [("amounts are in cents", True)]

    first = _conversation_prompt(alice, llm, mine, [
        tool_call("remember", dataset="sales.csv", note="region 9 is a test region"),
        assistant("Noted: region 9 is a test region."),
    ])
    assert "amounts are in cents" in first and "region 9" not in first
    items = alice.get(f"/v1/datasets/{mine}/notes").json()["items"]
    assert [(n["text"], n["by_model"]) for n in items] == [
        ("amounts are in cents", False), ("region 9 is a test region", True)]

    edited = alice.patch(f"/v1/datasets/{mine}/notes/{note['id']}",
                         json={"text": "amounts are in euro cents"})
    assert edited.status_code == 200 and edited.json()["text"] == "amounts are in euro cents"
    assert alice.delete(f"/v1/datasets/{mine}/notes/{items[1]['id']}").status_code == 204
    second = _conversation_prompt(alice, llm, mine, [assistant("Noted.")])
    assert "amounts are in euro cents" in second and "by key:alice" in second
    assert "region 9 is a test region" not in second
    too_long = alice.post(f"/v1/datasets/{mine}/notes", json={"text": "x" * 301})
    assert too_long.status_code == 422 and "max_chars" in too_long.json()["detail"]
