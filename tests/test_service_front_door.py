"""The front door over HTTP: ask_user round trips, cancel while the model hangs, the drain.

over HTTP a run that asks its user ends `needs_input` with the
question (run, stream), `POST /v1/conversations/{id}/answer` continues it.
a cancel must reach a run whose model request hangs (it ends
`cancelled`, not `model_error` minutes later), and SIGTERM's drain gives
in-flight `/v1/execute` calls the grace, then cancels them through the same
token: the client gets a result, the audit trail ends with `run_end`.
Real server, real store (SQLite and PostgreSQL), real sandbox, scripted model.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading

import httpx
import pytest

import service_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import Run
from sbx.agent.testing.scripted_model import Hang, assistant, tool_call
from sbx.sandbox.config import RUN_ID_LABEL
from service_support import SBX, managed_containers, sse_events, stream, wait_for

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

ASKING = {"tools.ask_user": {"enabled": True}}
QUESTION = "Should refunds count?"
SLEEP = "import time\nprint('started', flush=True)\ntime.sleep(600)"


def _conversation(client: httpx.Client) -> str:
    created = client.post("/v1/conversations", json={})
    assert created.status_code == 201, created.text
    return created.json()["id"]


def _ask(client: httpx.Client, conversation: str, question: str) -> str:
    run = client.post(f"/v1/conversations/{conversation}/questions", json={"question": question})
    assert run.status_code == 202, run.text
    return run.json()["run_id"]


def _audit(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _verify(path) -> None:
    done = subprocess.run([*SBX, "audit", "verify", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.docker
def test_a_run_that_asks_ends_needs_input_and_the_answer_continues_it(store, serve, llm):
    server = serve(store, policy=ASKING)
    client = server.client(server.key("nina"))
    conversation = _conversation(client)
    llm.script([tool_call("ask_user", question=QUESTION)])
    first = _ask(client, conversation, "What is the total?")

    events = stream(client, first)
    assert events[-1]["event"] == "run_end"
    assert (events[-1]["data"]["status"], events[-1]["data"]["question"]) == (
        "needs_input", QUESTION)
    paused = client.get(f"/v1/runs/{first}").json()
    assert (paused["status"], paused["asked"]) == ("needs_input", QUESTION)

    llm.script([assistant("Refunds are left out, as you said.")])
    answered = client.post(f"/v1/conversations/{conversation}/answer",
                           json={"answer": "No, leave refunds out."})
    assert answered.status_code == 202, answered.text
    second = answered.json()["run_id"]
    events = stream(client, second)
    assert events[0]["data"]["continues"] == first
    assert events[-1]["data"]["status"] == "completed"
    assert client.get(f"/v1/runs/{second}").json()["answer"] == "Refunds are left out, as you said."
    told = llm.requests[-1].messages[-1]["content"]
    assert "No, leave refunds out." in told and QUESTION in told
    transcript = (server.data_dir / "conversations" / conversation / "transcript.jsonl")
    assert "No, leave refunds out." in transcript.read_text()
    again = client.post(f"/v1/conversations/{conversation}/answer", json={"answer": "again"})
    assert again.status_code == 409 and again.json()["type"].endswith("no-question-pending")
    _verify(server.audit_log)


def _race_answers(clients: list[httpx.Client], conversation: str) -> list[httpx.Response]:
    """Each client posts an answer to the conversation at the same moment."""
    start = threading.Barrier(len(clients))
    answers: list[httpx.Response] = []

    def answer(client: httpx.Client, text: str) -> None:
        start.wait(10)
        answers.append(client.post(f"/v1/conversations/{conversation}/answer",
                                   json={"answer": text}))

    threads = [threading.Thread(target=answer, args=(client, f"answer {n}"))
               for n, client in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


@pytest.mark.docker
def test_two_answers_at_once_one_is_taken_the_other_is_409(store, serve, llm):
    server = serve(store, policy=ASKING)
    key = server.key("nina")
    client = server.client(key)
    conversation = _conversation(client)
    llm.script([tool_call("ask_user", question=QUESTION)])
    assert stream(client, _ask(client, conversation, "What is the total?"))[-1]["event"] == \
        "run_end"
    racers = [server.client(key) for _ in range(2)]
    for trial in range(4):
        llm.script([tool_call("ask_user", question=f"{QUESTION} ({trial})")])  # one answer runs
        answers = _race_answers(racers, conversation)
        assert sorted(a.status_code for a in answers) == [202, 409], [a.text for a in answers]
        [taken] = [a for a in answers if a.status_code == 202]
        [refused] = [a for a in answers if a.status_code == 409]
        assert refused.json()["type"].endswith("no-question-pending")  # taken at the conversation
        ended = stream(client, taken.json()["run_id"])[-1]
        assert (ended["event"], ended["data"]["status"]) == ("run_end", "needs_input"), ended
    _verify(server.audit_log)


@pytest.mark.docker
def test_cancel_ends_a_run_whose_model_request_hangs(store, serve, llm):
    # a request timeout far beyond the test's wait: only the token can end this run in time
    server = serve(store, policy={"agent": {"request_timeout": "600s", "max_retries": 0}})
    client = server.client(server.key("olga"))
    conversation = _conversation(client)
    llm.script([Hang()])
    run = _ask(client, conversation, "Hang.")
    wait_for(lambda: llm.requests, what="the model request")

    assert client.post(f"/v1/runs/{run}/cancel").status_code == 202
    ended = wait_for(lambda: (client.get(f"/v1/runs/{run}").json()["status"]
                              not in ("queued", "running")) and client.get(f"/v1/runs/{run}"),
                     timeout=60, what="the hung run to end")
    assert ended.json()["status"] == "cancelled", ended.json()["message"]
    assert stream(client, run)[-1]["data"]["status"] == "cancelled"
    records = [r for r in _audit(server.audit_log) if r.get("run_id") == run]
    assert records[-1]["event"] == "run_end"
    # the conversation goes on
    llm.script([assistant("Back.")])
    after = _ask(client, conversation, "Again?")
    assert stream(client, after)[-1]["data"]["status"] == "completed"


def _stored_runs(database: str, kind: str) -> list[Run]:
    db = Database.open(database)
    try:
        with db.read() as session:
            return list(session.query(Run).filter(Run.kind == kind))
    finally:
        db.close()


@pytest.mark.docker
def test_the_drain_cancels_executions_through_their_token_after_the_grace(
    store, serve, llm, engine
):
    server = serve(store, args=("--grace", "2s"))
    client = server.client(server.key("pia"))
    results: dict[str, object] = {}

    def plain() -> None:
        results["plain"] = client.post("/v1/execute", json={"code": SLEEP})

    def streamed() -> None:
        with client.stream("POST", "/v1/execute", json={"code": SLEEP},
                           headers={"Accept": "text/event-stream"}) as response:
            results["streamed"] = list(sse_events(response))

    workers = [threading.Thread(target=plain), threading.Thread(target=streamed)]
    for worker in workers:
        worker.start()
    def both_running() -> list[str] | None:
        ids = [r.id for r in _stored_runs(server.database, "execute") if r.status == "running"]
        return ids if len(ids) == 2 else None

    running = wait_for(both_running, what="both executions running")
    for run_id in running:
        wait_for(lambda run_id=run_id: managed_containers(engine, f"{RUN_ID_LABEL}={run_id}"),
                 what="the execution's sandbox")

    server.proc.send_signal(signal.SIGTERM)
    late = server.client(server.key("quinn"))  # a new connection while the drain goes on
    wait_for(lambda: late.get("/readyz").json()["checks"].get("serving") == "failed: draining",
             what="the drain to begin")
    refused = late.post("/v1/execute", json={"code": "print(1)"})
    assert refused.status_code == 503 and refused.json()["type"].endswith("draining")
    assert refused.headers["Retry-After"]
    for worker in workers:
        worker.join(120)
    assert server.stop() == 0

    plain_result = results["plain"]
    assert isinstance(plain_result, httpx.Response)
    assert plain_result.status_code == 200, plain_result.text
    assert plain_result.json()["status"] == "cancelled"
    events = results["streamed"]
    assert isinstance(events, list) and events[-1]["event"] == "result"
    assert events[-1]["data"]["status"] == "cancelled"
    runs = _stored_runs(server.database, "execute")
    assert sorted(r.status for r in runs) == ["cancelled", "cancelled"]
    records = _audit(server.audit_log)
    for run in runs:
        mine = [r for r in records if r.get("run_id") == run.id]
        assert mine[-1]["event"] == "run_end", mine[-3:]
    _verify(server.audit_log)


@pytest.mark.docker
def test_per_request_limits_apply_below_the_policy_and_are_refused_above_it(store, serve, llm):
    server = serve(store)  # the tests' policy: [sandbox] timeout = "60s", network none
    client = server.client(server.key("sol"))
    slow = "import time\ntime.sleep(30)\nprint('late')"

    timed = client.post("/v1/execute", json={"code": slow, "limits": {"timeout": "2s"}})
    assert timed.status_code == 200, timed.text
    assert timed.json()["execution"]["timed_out"] is True
    started = [r for r in _audit(server.audit_log)
               if r["run_id"] == timed.json()["run_id"] and r["event"] == "run_start"]
    assert started[0]["data"]["sandbox"]["timeout"] == 2.0

    for limits, knob in (({"timeout": "1h"}, "limits.timeout: at most 1m"),
                         ({"network": "bridge"}, "limits.network: 'bridge' is more open"),
                         ({"runtime": "kata"}, "limits.runtime: 'kata' is not allowed")):
        refused = client.post("/v1/execute", json={"code": "print(1)", "limits": limits})
        assert refused.status_code == 422, refused.text
        assert refused.json()["type"].endswith("limit-above-policy")
        assert refused.json()["detail"].startswith(knob), refused.json()["detail"]
        opened = client.post("/v1/conversations", json={"limits": limits})
        assert opened.status_code == 422 and opened.json()["detail"].startswith(knob)
    for path, body in (("/v1/execute", {"code": "print(1)"}), ("/v1/conversations", {})):
        low = client.post(path, json={**body, "limits": {"memory": "6m"}})  # dies at its start
        assert low.status_code == 422, low.text
        assert low.json()["type"].endswith("limit-below-minimum")
        assert low.json()["detail"] == "limits.memory: at least 24 MiB (the least a sandbox " \
                                       "starts in)"

    conversation = client.post("/v1/conversations", json={"limits": {"timeout": "2s"}})
    assert conversation.status_code == 201, conversation.text
    assert conversation.json()["limits"] == {"timeout": 2.0}
    llm.script([tool_call("execute_python", code=slow), assistant("It took too long.")])
    run = _ask(client, conversation.json()["id"], "Sleep.")
    events = stream(client, run)
    results = [e for e in events if e["event"] == "tool_result"]
    assert results and results[0]["data"]["execution"]["timed_out"] is True
