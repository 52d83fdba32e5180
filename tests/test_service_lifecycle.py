"""Acceptance 4 and the sandbox's lifecycle: SIGTERM drains, kill -9 leaves the run `interrupted`
(the conversation kept for restore), idle conversations give their sandbox back.

Every wait is on an event: a stream's event, a process exit, a container
gone, a status changed.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

import service_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import Conversation, Run
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.config import RUN_ID_LABEL
from service_support import (
    SBX,
    managed_containers,
    server_containers,
    sse_events,
    stream,
    wait_for,
)

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster



SLEEP = "import time\nprint('started', flush=True)\ntime.sleep(600)"


def _start_run(client, question: str = "Wait.") -> tuple[str, str]:
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    run = client.post(f"/v1/conversations/{conversation}/questions", json={"question": question})
    assert run.status_code == 202, run.text
    return conversation, run.json()["run_id"]


def _until_tool_call(client, run_id: str) -> None:
    """Wait for the model's tool call (the stream's event), then for its container."""
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        for event in sse_events(response):
            if event["event"] == "model_reply":
                return
    pytest.fail("the run ended before its tool call")


def _until_output(client, run_id: str) -> dict:
    """Wait for the running code's first whole line of live output on the run's event stream.

    One `print` is two writes (the text, then the newline); on a loaded host they
    can land in two chunks, so the chunks are joined up to the first newline.
    """
    chunks: list[dict] = []
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        for event in sse_events(response):
            if event["event"] == "output_chunk":
                chunks.append(event["data"])
                if "\n" in event["data"]["text"]:
                    streams = {chunk["stream"] for chunk in chunks}
                    text = "".join(chunk["text"] for chunk in chunks)
                    return {"data": {"stream": "/".join(sorted(streams)), "text": text}}
            assert event["event"] != "tool_result", "output came only with the result"
    pytest.fail("the run ended without live output")


def _stored(database: str, model, ident: str):
    db = Database.open(database)
    try:
        with db.read() as session:
            return session.get(model, ident)
    finally:
        db.close()


def _verify(audit_log) -> None:
    done = subprocess.run([*SBX, "audit", "verify", str(audit_log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.docker
@pytest.mark.parametrize(("grace", "code", "ending"), [
    ("2s", SLEEP, "cancelled"),
    ("120s", "import time\ntime.sleep(2)\nprint('done')", "completed"),
])
def test_sigterm_lets_the_run_finish_within_the_grace_or_cancels_it(
    store, serve, llm, engine, grace, code, ending
):
    server = serve(store, args=("--grace", grace))
    client = server.client(server.key("judy"))
    llm.script([tool_call("execute_python", code=code)]
               + ([assistant("Done.")] if ending == "completed" else []))
    conversation, run = _start_run(client)
    _until_tool_call(client, run)
    wait_for(lambda: managed_containers(engine, f"{RUN_ID_LABEL}={run}"), what="the sandbox")

    assert server.stop(signal.SIGTERM) == 0  # drained, then a clean exit

    stored = _stored(server.database, Run, run)
    assert stored.status == ending, stored.message
    kept = _stored(server.database, Conversation, conversation)
    assert (kept.status, kept.sandbox) == ("active", "lost")  # the next question restores it
    assert managed_containers(engine, f"{RUN_ID_LABEL}={run}") == []
    assert server_containers(engine, server) == []
    _verify(server.audit_log)


@pytest.mark.docker
def test_kill_9_then_a_restart_leaves_the_run_interrupted_and_no_container(
    store, serve, llm, engine, tmp_path
):
    args = ("--replica-id", "replica-under-test")
    server = serve(store, args=args)
    key = server.key("ken")
    client = server.client(key)
    llm.script([tool_call("execute_python", code=SLEEP)])
    conversation, run = _start_run(client)
    _until_tool_call(client, run)
    wait_for(lambda: managed_containers(engine, f"{RUN_ID_LABEL}={run}"), what="the sandbox")

    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    again = serve(store, args=args)
    reader = again.client(key)
    found = reader.get(f"/v1/runs/{run}").json()
    assert found["status"] == "interrupted"
    assert "restarted" in found["message"]  # named as what it was: a restart, not a loss
    assert "the next question rebuilds its state" in found["message"]
    assert "start a new conversation" not in found["message"]  # the conversation goes on
    ended = stream(reader, run)[-1]["data"]  # the stream ends too
    assert (ended["status"], ended["outcome"]) == ("interrupted", "interrupted by a restart")
    kept = reader.get(f"/v1/conversations/{conversation}").json()
    assert (kept["status"], kept["sandbox"]) == ("active", "lost")
    assert "the next question rebuilds its state" in kept["message"]
    wait_for(lambda: not managed_containers(engine, f"{RUN_ID_LABEL}={run}"),
             what="the killed server's sandbox to be removed")
    _verify(again.audit_log)


@pytest.mark.docker
def test_an_idle_conversation_releases_its_sandbox_and_the_next_question_restores_it(
    store, serve, llm, engine
):
    server = serve(store, policy={"service": {"idle_timeout": "1s"}})
    client = server.client(server.key("lena"))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([tool_call("execute_python", code="x = 41"), assistant("Set."),
                tool_call("execute_python", code="print(x + 1)"), assistant("42.")])
    first = client.post(f"/v1/conversations/{conversation}/questions",
                        json={"question": "Set x."}).json()["run_id"]
    assert stream(client, first)[-1]["data"]["status"] == "completed"
    assert managed_containers(engine, f"{RUN_ID_LABEL}={first}") != []

    wait_for(lambda: client.get(f"/v1/conversations/{conversation}").json()["sandbox"]
             == "released", what="the idle release")
    wait_for(lambda: not managed_containers(engine, f"{RUN_ID_LABEL}={first}"),
             what="the idle sandbox to be removed")
    second = client.post(f"/v1/conversations/{conversation}/questions",
                         json={"question": "Print x + 1."}).json()["run_id"]
    events = stream(client, second)
    assert events[0]["data"]["sandbox_reset"] is True
    [restored] = [e["data"] for e in events if e["event"] == "state_restored"]
    # the idle release took a snapshot: x comes back from it, no cell is re-run
    assert (restored["status"], restored["from_snapshot"], restored["replayed"]) == (
        "restored", 1, 0)
    assert restored["cause"] == events[0]["data"]["reset_cause"] == "idle_release"
    assert events[-1]["data"]["status"] == "completed"
    asked = llm.requests[-2]
    assert ("(an idle release: idle for more than 1 s); sbx restored its state: loaded the "
            "variables and files of 1 cell from a snapshot and re-ran 0 cells"
            in asked.messages[-1]["content"])
    assert llm.requests[-1].last_tool_message.startswith("[stdout]\n42\n")  # x came back


@pytest.mark.docker
def test_cancel_ends_the_run_removes_its_sandbox_and_the_conversation_goes_on(
    store, serve, llm, engine
):
    server = serve(store)
    client = server.client(server.key("mike"))
    llm.script([tool_call("execute_python", code="x = 1\n" + SLEEP),
                tool_call("execute_python", code="print(x)"), assistant("x is gone.")])
    conversation, run = _start_run(client)
    live = _until_output(client, run)  # the code runs (it sleeps for 600 s after this line)
    assert live["data"]["stream"] == "stdout" and live["data"]["text"] == "started\n"
    assert managed_containers(engine, f"{RUN_ID_LABEL}={run}")
    busy = client.post(f"/v1/conversations/{conversation}/questions", json={"question": "more"})
    assert busy.status_code == 409 and run in busy.json()["detail"]  # one question at a time

    assert client.post(f"/v1/runs/{run}/cancel").status_code == 202
    events = stream(client, run)
    assert (events[-1]["data"]["status"], events[-1]["data"]["outcome"]) == (
        "cancelled", "cancelled")
    assert client.get(f"/v1/runs/{run}").json()["status"] == "cancelled"
    wait_for(lambda: not managed_containers(engine, f"{RUN_ID_LABEL}={run}"),
             what="the cancelled run's sandbox to be removed")
    assert client.post(f"/v1/runs/{run}/cancel").status_code == 409  # it has ended

    after = client.post(f"/v1/conversations/{conversation}/questions",
                        json={"question": "What is x?"}).json()["run_id"]
    start = stream(client, after)[0]["data"]
    assert start["sandbox_reset"] is True  # named as what it was, never a limit kill
    assert (start["reset_cause"], start["reset_reason"]) == ("cancel", "a cancel by the user")
    assert "NameError" in llm.requests[-1].last_tool_message
    ready = server.client().get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"engine": "ok", "store": "ok", "disk": "ok"}
