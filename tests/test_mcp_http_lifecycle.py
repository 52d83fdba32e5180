"""`/mcp` sessions over HTTP: when they end, what they cost, and that nothing outlives them.

The SDK's own client against a real `sbx serve`; the code runs in the real
sandbox. Tests wait on events (a progress notification, a response, a
container's removal, the process's exit), never on the clock.
"""

from __future__ import annotations

import signal

import anyio
import pytest

import service_support
from mcp_http_support import (
    audit_records,
    connect,
    containers_of,
    data_dir_files,
    session_ids,
    text_of,
)
from mcp_support import CancelledBusyCall, cancel_a_busy_loop
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import Run
from service_support import wait_for

serve = service_support.serve
llm = service_support.llm

RESET = "[sbx] The sandbox was reset before this call"
RESTORED = "[sbx] The sandbox was replaced since the previous question"


@pytest.fixture
def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


def _conversations(server, key) -> list[dict]:
    return server.client(key).get("/v1/conversations").json()["items"]


@pytest.mark.docker
def test_a_closed_session_leaves_no_container_and_frees_its_conversation_slot(
    sqlite, serve, engine
):
    server = serve(sqlite)
    key = server.key("ann", max_conversations=1)
    chart = "open('/output/note.txt', 'w').write('kept until the session ends')"

    async def scenario():
        async with connect(server, key, mode="legacy") as first:
            await first.call_tool("execute_python", {"code": chart})
            [session] = session_ids(server)
            live = containers_of(engine, session)
            listed = _conversations(server, key)
            artifacts = data_dir_files(server)
            async with connect(server, key, mode="legacy") as second:
                refused = await second.call_tool("execute_python", {"code": "print(1)"})
        # the first client has closed its session (DELETE): its sandbox and slot are gone
        left = wait_for(lambda: not containers_of(engine, session), what="removal") and []
        async with connect(server, key, mode="legacy") as third:
            after = await third.call_tool("execute_python", {"code": "print('next')"})
        return session, live, listed, artifacts, refused, left, after

    session, live, listed, artifacts, refused, left, after = anyio.run(scenario)

    assert len(live) == 1 and left == []
    assert [(c["id"], c["model"], c["status"]) for c in listed] == [(session, "mcp", "active")]
    assert [p.name for p in artifacts] == ["note.txt"]
    assert refused.is_error and text_of(refused).startswith("max_conversations: 1 conversations")
    assert text_of(after).startswith("[stdout]\nnext")
    rows = {c["id"]: c["status"] for c in _conversations(server, key)}
    assert rows[session] == "closed"
    assert not (server.data_dir / "mcp" / session).exists()  # its artifacts went with it
    assert [r["event"] for r in audit_records(server) if r["run_id"] == session][-1] == "run_end"


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_cancelling_a_busy_loop_kills_it_and_the_next_call_says_state_was_reset(
    sqlite, serve, engine, mode
):
    server = serve(sqlite)
    key = server.key("ann")
    async def scenario() -> CancelledBusyCall:
        async with connect(server, key, mode=mode) as client:
            return await cancel_a_busy_loop(
                client, lambda: containers_of(engine, session_ids(server)[0])
            )

    seen = anyio.run(scenario)
    busy_containers, now = seen.busy_containers, seen.containers_after

    assert seen.progress and "time limit 60 s" in seen.progress[0]
    text = text_of(seen.after)
    assert text.startswith(RESTORED) and "(a cancel by the user" in text.splitlines()[0]
    assert "restored 1 cell" in text.splitlines()[0]  # `kept = 1` replayed, never the loop
    assert "NameError" not in text  # the state came back
    assert "[stdout]\nalive" in text
    assert len(busy_containers) == 1 and len(now) == 1 and busy_containers != now
    outcomes = [r["data"]["status"] for r in audit_records(server) if r["event"] == "outcome"
                and not r["run_id"].endswith("-restore")]
    assert outcomes == ["ok", "cancelled", "ok"]


@pytest.mark.docker
def test_an_idle_session_ends_and_the_next_call_with_its_name_restores_it(sqlite, serve, engine):
    server = serve(sqlite, policy={"service": {"idle_timeout": "1s"}})
    key = server.key("ann")

    async def scenario():
        async with connect(server, key) as client:
            await client.call_tool("execute_python", {"code": "kept = 1"})
            [first] = session_ids(server)
            wait_for(lambda: not containers_of(engine, first), what="the idle sandbox's removal")
            wait_for(lambda: {c["id"]: c["status"] for c in _conversations(server, key)}
                     .get(first) == "closed", what="the idle session's end")
            after = await client.call_tool("execute_python", {"code": "print(kept + 1)"})
        return first, after

    first, after = anyio.run(scenario)

    text = text_of(after)
    assert text.startswith(RESTORED) and "idle for more than 1 s" in text.splitlines()[0]
    assert "restored 1 cell" in text.splitlines()[0] and "[stdout]\n2" in text
    assert session_ids(server)[0] == first and len(session_ids(server)) == 2


@pytest.mark.docker
def test_sigterm_with_a_client_attached_ends_its_session_and_exits_without_the_grace(
    sqlite, serve, engine
):
    # The grace (300 s) is longer than the fixture waits for an exit (120 s): a stream
    # the server kept open through the drain would make this test fail, not just slow.
    server = serve(sqlite, args=("--grace", "300s"))
    key = server.key("ann")

    async def scenario():
        async with connect(server, key, mode="legacy") as client:  # holds a GET stream
            answered = await client.call_tool("execute_python", {"code": "print(6 * 7)"})
            [session] = session_ids(server)
            live = containers_of(engine, session)
            status = await anyio.to_thread.run_sync(server.stop)
        return answered, session, live, status

    answered, session, live, status = anyio.run(scenario)

    assert text_of(answered).startswith("[stdout]\n42")
    assert len(live) == 1
    assert status == 0
    assert containers_of(engine, session) == []  # removed before the process exited
    assert [r["event"] for r in audit_records(server) if r["run_id"] == session][-1] == "run_end"


@pytest.mark.docker
def test_executions_count_as_runs_and_a_refused_one_is_an_error_the_model_reads(sqlite, serve):
    server = serve(sqlite, policy={"tools.preview_data_file": {"enabled": False}})
    key = server.key("ann", runs_per_hour=1)

    async def scenario():
        async with connect(server, key) as client:
            denied = await client.call_tool("preview_data_file", {"name": "x.csv"})
            first = await client.call_tool("execute_python", {"code": "print(1)"})
            second = await client.call_tool("execute_python", {"code": "print(2)"})
            listed = await client.call_tool("list_data_files", {})
        return denied, first, second, listed

    denied, first, second, listed = anyio.run(scenario)

    assert denied.is_error and not first.is_error and not listed.is_error
    assert second.is_error and text_of(second).startswith("runs_per_hour: 1 runs started")
    assert "retry in" in text_of(second)
    outcomes = [r["data"]["tool"] for r in audit_records(server) if r["event"] == "outcome"]
    assert outcomes.count("execute_python") == 1  # the refused one never reached the gate


@pytest.mark.docker
def test_sigterm_gives_a_running_execution_the_grace_then_cancels_it_through_its_token(
    sqlite, serve, engine
):
    server = serve(sqlite, args=("--grace", "2s"))
    key = server.key("ann")
    sleeps = "import time\nprint('started', flush=True)\ntime.sleep(600)"

    def signal_once_it_runs() -> str:
        session = wait_for(lambda: session_ids(server) and session_ids(server)[0],
                           what="the session's gate")
        wait_for(lambda: containers_of(engine, session), what="the session's sandbox")
        server.proc.send_signal(signal.SIGTERM)
        return session

    async def scenario():
        found: dict[str, str] = {}

        async def drain() -> None:
            found["session"] = await anyio.to_thread.run_sync(signal_once_it_runs)

        async with connect(server, key, mode="legacy") as client:
            async with anyio.create_task_group() as group:
                group.start_soon(drain)
                result = await client.call_tool("execute_python", {"code": sleeps})
        return result, found["session"]

    result, session = anyio.run(scenario)

    assert result.is_error and "cancel" in text_of(result).lower(), text_of(result)
    assert server.stop() == 0
    assert containers_of(engine, session) == []
    mine = [r for r in audit_records(server) if r["run_id"] == session]
    assert [r["data"].get("status") for r in mine if r["event"] == "outcome"] == ["cancelled"]
    assert mine[-1]["event"] == "run_end"
    db = Database.open(server.database)
    try:
        with db.read() as stored:
            runs = list(stored.query(Run).filter(Run.conversation_id == session))
    finally:
        db.close()
    assert [run.status for run in runs] == ["cancelled"]


@pytest.mark.docker
def test_a_sessions_limits_apply_below_the_policy_and_are_refused_above_it(sqlite, serve):
    server = serve(sqlite)  # the tests' policy: [sandbox] timeout = "60s"
    key = server.key("ann")
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    client = server.client(key)
    for raw, detail in (('{"timeout": "1h"}', "limits.timeout: at most 1m"),
                        ('{"sudo": true}', "Sbx-Limits: a JSON object of limits")):
        refused = client.post("/mcp", json=initialize, headers={**headers, "Sbx-Limits": raw})
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"].startswith(detail), refused.json()["detail"]

    async def scenario():
        async with connect(server, key, mode="legacy",
                           headers={"Sbx-Limits": '{"timeout": "2s"}'}) as session:
            return await session.call_tool(
                "execute_python", {"code": "import time\ntime.sleep(30)\nprint('late')"})

    timed = anyio.run(scenario)
    assert "passed the 2 s wall-clock limit" in text_of(timed), text_of(timed)
    [session] = session_ids(server)
    start = [r for r in audit_records(server) if r["run_id"] == session][0]
    assert start["event"] == "run_start" and start["data"]["sandbox"]["timeout"] == 2.0
