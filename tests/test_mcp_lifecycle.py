"""`sbx mcp`: a cancelled call is killed and the session goes on; sandboxes do not outlive it.

The SDK's client (or, for SIGTERM, a raw handshake-era JSON-RPC exchange)
talks to the real `sbx mcp`; the code runs in the real sandbox. The tests
wait on events: the first progress notification (the code is running), a
response, the process's exit, the container's removal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import anyio
import pytest
from mcp.types import CallToolResult

from conftest import TEST_IMAGE
from mcp_support import (
    SBX,
    CancelledBusyCall,
    audit_records,
    cancel_a_busy_loop,
    containers_of,
    mcp_client,
    session_ids,
    text_of,
    wait_until_gone,
)

RESET = "[sbx] The sandbox was reset before this call"
RESTORED = "[sbx] The sandbox was replaced since the previous question"


@pytest.mark.docker
def test_cancelling_a_busy_loop_kills_it_and_the_next_call_says_state_was_reset(
    tmp_path, engine
):
    async def scenario() -> CancelledBusyCall:
        async with mcp_client(tmp_path) as client:
            return await cancel_a_busy_loop(
                client, lambda: containers_of(engine, session_ids(tmp_path)[0])
            )

    seen = anyio.run(scenario)
    busy_containers, now = seen.busy_containers, seen.containers_after

    assert seen.progress and "time limit 30 s" in seen.progress[0]
    text = text_of(seen.after)
    assert text.startswith(RESTORED) and "(a cancel by the user" in text.splitlines()[0]
    assert "restored 1 cell" in text.splitlines()[0]  # `kept = 1` replayed, never the loop
    assert "NameError" not in text  # the state came back
    assert "[stdout]\nalive" in text  # and the session goes on in a fresh sandbox
    assert len(busy_containers) == 1 and len(now) == 1
    assert busy_containers != now  # the container that ran the loop was removed
    outcomes = [r["data"]["status"] for r in audit_records(tmp_path) if r["event"] == "outcome"
                and not r["run_id"].endswith("-restore")]
    assert outcomes == ["ok", "cancelled", "ok"]  # the gate ran it; the code raised
    resets = [r["data"]["reason"] for r in audit_records(tmp_path) if r["event"] == "sandbox_reset"]
    assert resets == ["a cancel by the user: it stopped the running call"]


@pytest.mark.docker
def test_an_idle_sandbox_is_removed_and_the_next_call_restores_its_state(tmp_path, engine):
    async def scenario() -> tuple[list[str], CallToolResult, CallToolResult]:
        async with mcp_client(tmp_path, "--idle-timeout", "1s") as client:
            await client.call_tool("execute_python", {"code": "kept = 1"})
            left = wait_until_gone(engine, session_ids(tmp_path)[0])
            after = await client.call_tool("execute_python", {"code": "print(kept + 1)"})
            await client.call_tool("reset_sandbox", {})  # asked for: nothing comes back
            cleared = await client.call_tool("execute_python", {"code": "print(kept)"})
        return left, after, cleared

    left, after, cleared = anyio.run(scenario)

    assert left == []  # removed while the session was still open
    text = text_of(after)
    first = text.splitlines()[0]
    assert text.startswith(RESTORED) and "idle for more than 1 s" in first
    assert "restored 1 cell" in first and "[stdout]\n2" in text
    restoring = [r for r in audit_records(tmp_path) if r["run_id"].endswith("-restore")]
    assert [r["data"]["status"] for r in restoring if r["event"] == "outcome"] == ["ok"]
    assert "NameError: name 'kept' is not defined" in text_of(cleared)


@pytest.mark.docker
def test_a_timeout_restores_the_sessions_state_as_chat_does(tmp_path, engine):
    async def scenario() -> tuple[CallToolResult, CallToolResult]:
        async with mcp_client(tmp_path, "--timeout", "3s") as client:
            await client.call_tool("execute_python", {"code": "kept = 41"})
            killed = await client.call_tool("execute_python", {"code": "while True:\n    pass"})
            after = await client.call_tool("execute_python", {"code": "print(kept + 1)"})
        return killed, after

    killed, after = anyio.run(scenario)

    assert "timed out" in text_of(killed)
    text = text_of(after)
    first = text.splitlines()[0]
    assert text.startswith(RESTORED) and "(a timeout)" in first, text
    assert "restored 1 cell" in first and "[stdout]\n42" in text  # never the killer
    restoring = [r for r in audit_records(tmp_path) if r["run_id"].endswith("-restore")]
    assert [r["data"]["status"] for r in restoring if r["event"] == "outcome"] == ["ok"]


def _send(process: subprocess.Popen[bytes], message: dict) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
    process.stdin.flush()


def _response(process: subprocess.Popen[bytes], request_id: int) -> dict:
    assert process.stdout is not None
    for line in process.stdout:
        message = json.loads(line)
        if message.get("id") == request_id:
            return message
    raise AssertionError("sbx mcp closed stdout before answering")


@pytest.mark.docker
def test_sigterm_with_the_client_still_attached_cleans_up_and_exits(tmp_path, engine):
    command = [*SBX, "mcp", "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl"),
               "--output", str(tmp_path / "out")]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path
    ) as process:
        _send(process, {"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}})
        assert "result" in _response(process, 1)
        _send(process, {"method": "notifications/initialized"})
        code = {"name": "execute_python", "arguments": {"code": "print(6 * 7)"}}
        _send(process, {"id": 2, "method": "tools/call", "params": code})
        answered = _response(process, 2)
        [session] = session_ids(tmp_path)
        live = containers_of(engine, session)
        os.kill(process.pid, signal.SIGTERM)  # stdin stays open: no end of input to wait for
        status = process.wait(timeout=120)

    assert answered["result"]["content"][0]["text"].startswith("[stdout]\n42")
    assert len(live) == 1
    assert status == 130
    assert containers_of(engine, session) == []  # removed before the process exited
    assert [r["event"] for r in audit_records(tmp_path)][-1] == "run_end"
