"""Acceptance 3: two replicas sharing one PostgreSQL enforce quotas together and route requests.

Both replicas share the data dir too (datasets uploaded on one are read on
the other), as replicas on several hosts would share a volume.
"""

from __future__ import annotations

import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

import service_support
from sbx.agent.testing.scripted_model import assistant
from service_support import stream, wait_for

serve = service_support.serve
llm = service_support.llm
postgres = service_support.postgres
pg_cluster = service_support.pg_cluster


@pytest.mark.docker
def test_two_replicas_share_a_quota_of_two_conversations(postgres, serve, tmp_path):
    one = serve(postgres)
    two = serve(postgres)
    key = one.key("grace", max_conversations=2)
    clients = [one.client(key), two.client(key)]
    racers = 12
    start = threading.Barrier(racers)

    def create(i: int) -> int:
        start.wait()  # all at once, half on each replica
        return clients[i % 2].post("/v1/conversations", json={}).status_code

    with ThreadPoolExecutor(max_workers=racers) as pool:
        codes = sorted(pool.map(create, range(racers)))
    assert codes == [201] * 2 + [429] * (racers - 2)
    for client in clients:
        assert client.post("/v1/conversations", json={}).status_code == 429


@pytest.mark.docker
def test_a_question_for_another_replicas_conversation_is_redirected_there(postgres, serve, llm):
    one = serve(postgres)
    two = serve(postgres)
    key = one.key("heidi")
    conversation = one.client(key).post("/v1/conversations", json={}).json()["id"]
    path = f"/v1/conversations/{conversation}/questions"
    redirected = two.client(key).post(path, json={"question": "hello?"})
    assert redirected.status_code == 307
    assert redirected.headers["location"] == one.url + path
    llm.script([assistant("Hello.")])
    followed = httpx.post(redirected.headers["location"], json={"question": "hello?"},
                          headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert followed.status_code == 202, followed.text
    run = followed.json()["run_id"]
    assert stream(two.client(key), run)[-1]["data"]["answer"] == "Hello."  # read anywhere


@pytest.mark.docker
def test_without_restore_a_conversation_whose_replica_died_is_interrupted(postgres, serve):
    off = {"restore": {"enabled": False}}  # with restore on, test_restore_service adopts it
    one = serve(postgres, policy=off)
    two = serve(postgres, policy=off)
    key = one.key("ivan")
    conversation = one.client(key).post("/v1/conversations", json={}).json()["id"]
    assert one.stop(signal.SIGKILL) == -signal.SIGKILL
    reader = two.client(key)

    def interrupted() -> dict | None:
        found = reader.get(f"/v1/conversations/{conversation}").json()
        return found if found["status"] == "interrupted" else None

    found = wait_for(interrupted, what="the sweep to mark the conversation interrupted")
    assert "stopped" in found["message"] and "start a new conversation" in found["message"]
    refused = reader.post(f"/v1/conversations/{conversation}/questions",
                          json={"question": "still there?"})
    assert refused.status_code == 409
    assert refused.json()["conversation_status"] == "interrupted"
