"""Restore by replay in the service: a conversation outlives its replica.

Real `sbx serve` processes on one store (SQLite for a restart, the throwaway
PostgreSQL for two replicas sharing a data volume), the real sandbox, the
scripted model. Every wait is on an event or a stored status.
"""

from __future__ import annotations

import signal

import pytest

import service_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import Conversation
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import stream, wait_for

serve = service_support.serve
llm = service_support.llm
store = service_support.store
postgres = service_support.postgres
pg_cluster = service_support.pg_cluster

BUILD = ("import pandas as pd\ndf = pd.DataFrame({'x': range(10)})\nprint(len(df))",
         "df['y'] = df.x ** 2\nprint(int(df.y.sum()))")
USE = "print(int(df.y.sum() + df.x.sum()))"


def _owner(database: str, conversation_id: str) -> str:
    db = Database.open(database)
    try:
        with db.read() as session:
            row = session.get(Conversation, conversation_id)
            assert row is not None
            return row.replica_id
    finally:
        db.close()


def _build(llm, client) -> str:
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    for code in BUILD:
        llm.script([tool_call("execute_python", code=code), assistant("Done.")])
        run = client.post(f"/v1/conversations/{conversation}/questions",
                          json={"question": "Next step."}).json()["run_id"]
        assert stream(client, run)[-1]["data"]["status"] == "completed"
    return conversation


def _ask_use(llm, client, conversation: str) -> list[dict]:
    llm.script([tool_call("execute_python", code=USE), assistant("330.")])
    asked = client.post(f"/v1/conversations/{conversation}/questions",
                        json={"question": "y plus x?"})
    assert asked.status_code == 202, asked.text
    events = stream(client, asked.json()["run_id"])
    assert events[-1]["data"]["status"] == "completed", events[-1]
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n330\n")  # df came back
    return events


def _lost(client, conversation: str) -> bool:
    return client.get(f"/v1/conversations/{conversation}").json()["sandbox"] == "lost"


@pytest.mark.docker
def test_after_kill_9_and_a_restart_the_next_question_restores_the_state(store, serve, llm):
    args = ("--replica-id", "restarting")
    server = serve(store, args=args)
    key = server.key("nora")
    conversation = _build(llm, server.client(key))
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL

    again = serve(store, args=args)
    client = again.client(key)
    assert _lost(client, conversation)
    events = _ask_use(llm, client, conversation)

    [restored] = [e["data"] for e in events if e["event"] == "state_restored"]
    assert (restored["status"], restored["replayed"]) == ("restored", 2)
    assert "a restart: the server restarted" in restored["reason"]
    assert restored["cause"] == "restart"
    assert "restored 2 cells" in llm.requests[-2].messages[-1]["content"]
    found = client.get(f"/v1/conversations/{conversation}").json()
    assert (found["status"], found["sandbox"]) == ("active", "held")


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "drain"])
def test_the_next_question_on_another_replica_restores_and_owns_it(postgres, serve, llm, sig):
    one = serve(postgres, args=("--replica-id", "replica-a"))
    two = serve(postgres, args=("--replica-id", "replica-b"))
    key = one.key("olga")
    conversation = _build(llm, one.client(key))
    assert _owner(postgres, conversation) == "replica-a"

    assert one.stop(sig) in (0, -signal.SIGKILL)
    reader = two.client(key)
    wait_for(lambda: _lost(reader, conversation), what="the conversation kept with its sandbox "
             "lost (the sweep after kill -9, the drain at once)")
    events = _ask_use(llm, reader, conversation)

    [restored] = [e["data"] for e in events if e["event"] == "state_restored"]
    assert (restored["status"], restored["replayed"]) == ("restored", 2)
    assert "replica-a" in restored["reason"]
    assert _owner(postgres, conversation) == "replica-b"  # B holds it now
    llm.script([tool_call("execute_python", code="print(len(df))"), assistant("10.")])
    follow = reader.post(f"/v1/conversations/{conversation}/questions",
                         json={"question": "Rows?"}).json()["run_id"]
    later = stream(reader, follow)
    assert [e for e in later if e["event"] == "state_restored"] == []  # live on B: no replay
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n10\n")
