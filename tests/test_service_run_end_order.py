"""A run's end is stored before it is streamed: a client may ask again the moment it sees it.

A client that posts its next question (or the answer to the question a run
asked) as soon as its event stream shows `run_end` must be admitted: the run's
final status is committed with (not after) its last event, so the
one-question-at-a-time check never sees the run still `running`. Under load
(32 conversations at once) the old order refused some of those posts with 409.
Real server, real store, real HTTP; the scripted model answers without code
and the policy runs none, so no sandbox is needed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

import service_support
from sbx.agent.testing.scripted_model import Reply, ScriptedRequest, assistant, tool_call
from service_support import sse_events

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

CONVERSATIONS = 32
NO_CODE = {"tools.execute_python": {"enabled": False}}  # no sandbox


def _until_end(client: httpx.Client, run_id: str) -> str:
    """Read the run's events until its `run_end` (or `run_error`) arrives: its type."""
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        assert response.status_code == 200, response.read()
        for event in sse_events(response):
            if event["event"] in ("run_end", "run_error"):
                return str(event["event"])
    raise AssertionError(f"the stream of {run_id} closed without its end")


def _then_on_seeing_the_end(server: service_support.Server, key: str, then: str,
                            body: dict[str, str]) -> int:
    """One analyst: a question, then (on seeing its `run_end`) a post to `then`: its status."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"},
                      timeout=120) as client:
        created = client.post("/v1/conversations", json={})
        assert created.status_code == 201, created.text
        conversation = f"/v1/conversations/{created.json()['id']}"
        first = client.post(f"{conversation}/questions", json={"question": "first"})
        assert first.status_code == 202, first.text
        assert _until_end(client, first.json()["run_id"]) == "run_end"
        second = client.post(f"{conversation}/{then}", json=body)
        if second.status_code == 202:
            assert _until_end(client, second.json()["run_id"]) == "run_end"
        return second.status_code


def test_a_question_posted_on_seeing_run_end_is_never_refused(store, serve, llm) -> None:
    llm.script([assistant("Done.") for _ in range(2 * CONVERSATIONS)])
    server = serve(store, policy=NO_CODE)
    key = server.key("burst", max_conversations=CONVERSATIONS)
    try:
        with ThreadPoolExecutor(CONVERSATIONS) as pool:
            codes = list(pool.map(lambda _: _then_on_seeing_the_end(
                server, key, "questions", {"question": "next"}), range(CONVERSATIONS)))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.log[-4000:]}") from exc
    refused = [code for code in codes if code != 202]
    assert refused == [], f"{len(refused)} of {CONVERSATIONS} next questions refused: {refused}"
    llm.assert_complete()


def _asks_then_answers(request: ScriptedRequest) -> Reply:
    """The model asks its user on a question, and answers once it has the user's answer."""
    last = request.messages[-1]
    return (assistant("Done.") if last.get("role") == "tool"
            else tool_call("ask_user", question="Which year?"))


def test_an_answer_posted_on_seeing_run_end_is_never_refused(store, serve, llm) -> None:
    llm.script([_asks_then_answers for _ in range(2 * CONVERSATIONS)])
    server = serve(store, policy={**NO_CODE, "tools.ask_user": {"enabled": True}})
    key = server.key("askers", max_conversations=CONVERSATIONS)
    with ThreadPoolExecutor(CONVERSATIONS) as pool:
        codes = list(pool.map(lambda _: _then_on_seeing_the_end(
            server, key, "answer", {"answer": "2024"}), range(CONVERSATIONS)))
    refused = [code for code in codes if code != 202]
    assert refused == [], f"{len(refused)} of {CONVERSATIONS} answers refused: {refused}"
    llm.assert_complete()
