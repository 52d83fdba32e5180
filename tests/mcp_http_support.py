"""Helpers for the `/mcp` tests: the MCP SDK's own client against a real `sbx serve` process.

    connect(server, key, mode=..., session=...)   an `mcp.Client` over streamable HTTP
        mode "auto"    the SDK's default: it discovers the 2026-07-28 protocol and opens
                       no session (sbx's named session: `Sbx-Session`, default "default")
        mode "legacy"  the initialize handshake: an `Mcp-Session-Id` per client

The servers come from `service_support.serve` (a real process, a real store,
SIGTERM at teardown that must exit 0); the sandboxes are the real image's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from mcp_support import containers_of, text_of  # noqa: F401  (shared with the HTTP tests)
from service_support import Server

MCP_POLICY: dict[str, dict[str, Any]] = {
    "tools.preview_data_file": {"enabled": True},
}


@asynccontextmanager
async def connect(
    server: Server, key: str | None, *, mode: str = "auto", session: str | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    """The SDK's client on `server`'s `/mcp`, sending `key` as the bearer key (and `headers`)."""
    headers = {**(headers or {}), **({"Authorization": f"Bearer {key}"} if key else {})}
    if session is not None:
        headers["Sbx-Session"] = session
    async with create_mcp_http_client(headers=headers) as http:
        transport = streamable_http_client(server.url + "/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


def audit_records(server: Server) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.audit_log.read_text().splitlines()]


def session_ids(server: Server, principal: str | None = None) -> list[str]:
    """MCP sessions' ids in the order they opened a gate (`run_start`), of one principal."""
    return [r["run_id"] for r in audit_records(server) if r["event"] == "run_start"
            and r["run_id"].startswith("mcp-") and not r["run_id"].endswith("-restore")
            and (principal is None or r["data"]["principal"] == principal)]


def data_dir_files(server: Server) -> list[Path]:
    return sorted((server.data_dir / "mcp").glob("*/*"))
