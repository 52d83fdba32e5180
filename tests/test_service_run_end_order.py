"""A run's end is stored before it is streamed: a client may ask again the moment it sees it.

A client that posts its next question as soon as its event stream shows
`run_end` must be admitted: the run's final status is committed with (not
after) its last event, so the one-question-at-a-time check never sees the run
still `running`. Under load (32 conversations at once) the old order refused
most such posts with 409. Real server, real store, real HTTP; the scripted
model answers without code and the policy runs none, so no sandbox is needed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

import service_support
from sbx.agent.testing.scripted_model import assistant
from service_support import sse_events

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

CONVERSATIONS = 32


def _until_end(client: httpx.Client, run_id: str) -> str:
    """Read the run's events until its `run_end` (or `run_error`) arrives: its type."""
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        assert response.status_code == 200, response.read()
        for event in sse_events(response):
            if event["event"] in ("run_end", "run_error"):
                return str(event["event"])
    raise AssertionError(f"the stream of {run_id} closed without its end")


def _two_questions(server: service_support.Server, key: str) -> list[int]:
    """One analyst: a question, and the next one posted on seeing the first's `run_end`."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"},
                      timeout=120) as client:
        created = client.post("/v1/conversations", json={})
        assert created.status_code == 201, created.text
        questions = f"/v1/conversations/{created.json()['id']}/questions"
        first = client.post(questions, json={"question": "first"})
        assert first.status_code == 202, first.text
        assert _until_end(client, first.json()["run_id"]) == "run_end"
        second = client.post(questions, json={"question": "next"})
        if second.status_code == 202:
            assert _until_end(client, second.json()["run_id"]) == "run_end"
        return [first.status_code, second.status_code]


def test_a_question_posted_on_seeing_run_end_is_never_refused(store, serve, llm) -> None:
    llm.script([assistant("Done.") for _ in range(2 * CONVERSATIONS)])
    server = serve(store, policy={"tools.execute_python": {"enabled": False}})  # no sandbox
    key = server.key("burst", max_conversations=CONVERSATIONS)
    try:
        with ThreadPoolExecutor(CONVERSATIONS) as pool:
            codes = list(pool.map(lambda _: _two_questions(server, key), range(CONVERSATIONS)))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.log[-4000:]}") from exc
    refused = [pair for pair in codes if pair[1] != 202]
    assert refused == [], f"{len(refused)} of {CONVERSATIONS} next questions refused: {refused}"
    llm.assert_complete()
