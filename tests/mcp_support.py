"""Helpers for the `sbx mcp` tests: the SDK's client on a real `sbx mcp` process, the records.

The client spawns the command exactly as an MCP host would (stdin/stdout
pipes); the audit log and the engine's labels are read to see what happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from conftest import TEST_IMAGE, wait_until_removed
from sbx.sandbox.config import RUN_ID_LABEL
from sbx.sandbox.engine import Engine

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@asynccontextmanager
async def mcp_client(tmp_path: Path, *args: str) -> AsyncIterator[Client]:
    """An SDK client connected to a fresh `sbx mcp` process (one MCP session)."""
    params = StdioServerParameters(
        command=SBX[0],
        args=[*SBX[1:], "mcp", "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl"),
              "--output", str(tmp_path / "out"), *args],
        env=dict(os.environ), cwd=tmp_path,
    )
    async with Client(params) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def session_ids(tmp_path: Path) -> list[str]:
    """The MCP sessions' ids, in order: each opened one gate (`run_start`; a replay's
    `<id>-restore` run is not a session)."""
    return [r["run_id"] for r in audit_records(tmp_path) if r["event"] == "run_start"
            and not r["run_id"].endswith("-restore")]


def containers_of(engine: Engine, session_id: str) -> list[str]:
    found = engine.api.containers(all=True, filters={"label": f"{RUN_ID_LABEL}={session_id}"})
    return [c["Id"] for c in found]


def wait_until_gone(engine: Engine, session_id: str, bound_s: float = 60.0) -> list[str]:
    """Wait for the engine's removal of the session's containers; what is left after it."""
    for container in containers_of(engine, session_id):
        with contextlib.suppress(AssertionError):  # the caller asserts on what is left
            wait_until_removed(engine, container, bound_s)
    return containers_of(engine, session_id)


@dataclass(frozen=True)
class CancelledBusyCall:
    """What `cancel_a_busy_loop` saw."""

    progress: list[str]
    busy_containers: list[str]
    after: CallToolResult
    """The call made after the cancellation (prints 'alive', then reads `kept`)."""
    containers_after: list[str]


async def cancel_a_busy_loop(
    client: Client, containers: Callable[[], list[str]]
) -> CancelledBusyCall:
    """Set `kept`, start `while True: pass`, cancel it at its first progress notification
    (the code is running), then call again; `containers()` lists the session's containers."""
    await client.call_tool("execute_python", {"code": "kept = 1"})
    progress: list[str] = []
    running = anyio.Event()

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")
        running.set()

    async with anyio.create_task_group() as group:
        busy = {"code": "while True: pass"}
        group.start_soon(
            lambda: client.call_tool("execute_python", busy, progress_callback=on_progress)
        )
        await running.wait()
        busy_containers = containers()
        group.cancel_scope.cancel()  # the client gives up: notifications/cancelled
    after = await client.call_tool("execute_python", {"code": "print('alive')\nkept"})
    return CancelledBusyCall(progress, busy_containers, after, containers())
