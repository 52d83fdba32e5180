"""`/mcp` transport sessions are counted per key: one key opening sessions until it is refused
leaves every other key able to open its own."""

from __future__ import annotations

import anyio
import httpx
import pytest

import service_support
from mcp_http_support import connect, text_of

serve = service_support.serve
llm = service_support.llm

ACCEPT = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"}}}
REPLICA_LIMIT = 1000  # mcp_http.MAX_TRANSPORT_SESSIONS


@pytest.fixture
def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


def open_session(http: httpx.Client, key: str) -> httpx.Response:
    return http.post("/mcp", json=INITIALIZE, headers={"Authorization": f"Bearer {key}"})


@pytest.mark.docker
def test_one_key_opening_sessions_until_refused_leaves_other_keys_theirs(sqlite, serve):
    server = serve(sqlite)
    ann, bob = server.key("ann"), server.key("bob")
    with httpx.Client(base_url=server.url, timeout=60, headers=ACCEPT) as http:
        opened: list[str] = []
        refused = None
        for _ in range(REPLICA_LIMIT + 1):  # until refused: at the key's share, or the replica's
            answer = open_session(http, ann)
            if answer.status_code != 200:
                refused = answer
                break
            opened.append(answer.headers["mcp-session-id"])
        assert refused is not None and refused.status_code == 429, refused
        assert refused.json()["quota"] == "mcp_sessions" and refused.headers["Retry-After"]
        assert len(opened) == 8  # the default [service] mcp_sessions
        other = open_session(http, bob)
        assert other.status_code == 200, other.text  # bob is not locked out by ann
        ended = http.delete("/mcp", headers={"Authorization": f"Bearer {ann}",
                                             "Mcp-Session-Id": opened[0]})
        assert ended.status_code == 200
        assert open_session(http, ann).status_code == 200  # ending one frees its place

    async def sessionless() -> None:  # 2026-07-28 clients open no session: never refused
        for key in (ann, bob):
            async with connect(server, key) as client:
                result = await client.call_tool("list_data_files", {})
                assert not result.is_error, text_of(result)

    anyio.run(sessionless)
