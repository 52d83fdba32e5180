"""`/mcp` on `sbx serve`: the MCP SDK's own client over streamable HTTP, a real server, Docker.

The acceptance over HTTP: state persists between calls, a chart is
image content, a denied tool is an error, the audit log verifies with the
key's principal, sessions and principals are isolated. Nothing is mocked;
tests wait on responses, never on the clock.
"""

from __future__ import annotations

import base64
import json
import re
import textwrap
from pathlib import Path

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import ImageContent, ResourceLink

import service_support
from mcp_http_support import MCP_POLICY, audit_records, connect, session_ids, text_of
from sbx.tools.audit_verify import verify_log
from service_support import upload

serve = service_support.serve
llm = service_support.llm

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHART = (
    "import matplotlib.pyplot as plt\n"
    "plt.plot([1, 3, 2])\n"
    "plt.savefig('/output/chart.png')\n"
)


@pytest.fixture
def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


def test_mcp_needs_a_live_key_and_a_transport_session_stays_with_the_key_that_opened_it(
    sqlite, serve
):
    server = serve(sqlite)
    ann, bob = server.key("ann"), server.key("bob")
    accept = {"Accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}}
    with httpx.Client(base_url=server.url, timeout=60, headers=accept) as http:
        missing = http.post("/mcp", json=body)
        wrong = http.post("/mcp", json=body, headers={"Authorization": "Bearer sbx_nope"})
        named = http.post("/mcp", json=body, headers={
            "Authorization": f"Bearer {ann}", "Sbx-Session": "../etc"})
        opened = http.post("/mcp", json=initialize, headers={"Authorization": f"Bearer {ann}"})
        transport = opened.headers["mcp-session-id"]
        stolen = http.post("/mcp", json=body, headers={
            "Authorization": f"Bearer {bob}", "Mcp-Session-Id": transport})
        ended = http.delete("/mcp", headers={
            "Authorization": f"Bearer {bob}", "Mcp-Session-Id": transport})
        own = http.delete("/mcp", headers={
            "Authorization": f"Bearer {ann}", "Mcp-Session-Id": transport})
    assert missing.status_code == 401 and wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert named.status_code == 400 and "Sbx-Session" in named.json()["detail"]
    assert opened.status_code == 200
    assert stolen.status_code == 404 and ended.status_code == 404  # as if it did not exist
    assert own.status_code == 200  # ann's session was still there for ann


@pytest.mark.docker
def test_state_persists_a_chart_is_an_image_and_the_audit_carries_the_keys_principal(
    sqlite, serve, engine
):
    server = serve(sqlite)
    key = server.key("ann")

    async def scenario():
        async with connect(server, key) as client:  # the SDK's default: 2026-07-28, no session
            first = await client.call_tool("execute_python", {"code": "total = 40 + 2"})
            second = await client.call_tool("execute_python", {"code": "print(total)"})
            chart = await client.call_tool("execute_python", {"code": CHART})
            [link] = [block for block in chart.content if isinstance(block, ResourceLink)]
            read = await client.read_resource(link.uri)
        return first, second, chart, read

    first, second, chart, read = anyio.run(scenario)

    assert not first.is_error and text_of(second).startswith("[stdout]\n42")
    [image] = [block for block in chart.content if isinstance(block, ImageContent)]
    inline = base64.b64decode(image.data)
    assert inline.startswith(PNG_SIGNATURE)
    assert base64.b64decode(read.contents[0].blob) == inline  # type: ignore[union-attr]
    [session] = session_ids(server)
    records = [r for r in audit_records(server) if r["run_id"] == session]
    assert {r["data"]["principal"] for r in records} == {"key:ann"}
    assert verify_log(server.audit_log, key=None).ok


@pytest.mark.docker
def test_a_tool_the_policy_denies_is_an_error_the_model_reads(sqlite, serve):
    server = serve(sqlite, policy={"tools.preview_data_file": {"enabled": False}})
    key = server.key("ann")
    client_http = server.client(key)
    upload(client_http, "sales.csv", b"region,revenue\nNorth,10\n")

    async def scenario():
        async with connect(server, key) as client:
            tools = {t.name: t.description or "" for t in (await client.list_tools()).tools}
            denied = await client.call_tool("preview_data_file", {"name": "sales.csv"})
            listed = await client.call_tool("list_data_files", {})
        return tools, denied, listed

    tools, denied, listed = anyio.run(scenario)

    assert denied.is_error and "tools.preview_data_file.enabled" in text_of(denied)
    assert "DISABLED" in tools["preview_data_file"]
    assert "upload_dataset" not in tools  # off unless the policy enables it
    assert not listed.is_error and "sales.csv" in text_of(listed)
    decisions = [(r["data"]["tool"], r["data"]["decision"]) for r in audit_records(server)
                 if r["event"] == "decision"]
    assert decisions == [("preview_data_file", "denied"), ("list_data_files", "allowed")]
    assert verify_log(server.audit_log, key=None).ok


@pytest.mark.docker
def test_sessions_and_principals_are_isolated(sqlite, serve):
    server = serve(sqlite, policy=MCP_POLICY)
    ann, bob = server.key("ann"), server.key("bob")
    upload(server.client(ann), "ann_secret.csv", b"a,b\n1,2\n")
    plant = ("secret = 'first'\n"
             "open('/output/secret.txt', 'w').write('first session')\n"
             "open('/tmp/scratch', 'w').write('first session')\n")
    look = ("import os\n"
            "print('secret' in globals(), sorted(os.listdir('/output')), "
            "os.path.exists('/tmp/scratch'), sorted(os.listdir('/data')))\n")

    async def scenario():
        seen = {}
        async with connect(server, ann, mode="legacy") as first, \
                connect(server, ann, mode="legacy") as second, \
                connect(server, ann, session="other") as named, \
                connect(server, bob) as stranger:
            planted = await first.call_tool("execute_python", {"code": plant})
            [link] = [block for block in planted.content if isinstance(block, ResourceLink)]
            for label, client in (("second", second), ("named", named), ("bob", stranger)):
                seen[label] = text_of(await client.call_tool("execute_python", {"code": look}))
                with pytest.raises(MCPError, match="Unknown resource"):
                    await client.read_resource(link.uri)
            seen["bob files"] = text_of(await stranger.call_tool("list_data_files", {}))
            seen["bob preview"] = await stranger.call_tool(
                "preview_data_file", {"name": "ann_secret.csv"})
            seen["own"] = (await first.read_resource(link.uri)).contents[0].text  # type: ignore[union-attr]
        return seen

    seen = anyio.run(scenario)

    assert seen["own"] == "first session"
    assert seen["second"].startswith("[stdout]\nFalse [] False ['ann_secret.csv']")
    assert seen["named"].startswith("[stdout]\nFalse [] False ['ann_secret.csv']")
    assert seen["bob"].startswith("[stdout]\nFalse [] False []")  # not ann's datasets
    assert "ann_secret" not in seen["bob files"]
    assert seen["bob preview"].is_error and "1,2" not in text_of(seen["bob preview"])
    assert len(session_ids(server, "key:ann")) == 3 and len(session_ids(server, "key:bob")) == 1
    assert verify_log(server.audit_log, key=None).ok


def _docs_http_section() -> str:
    text = (Path(__file__).resolve().parents[1] / "docs" / "mcp.md").read_text()
    start = text.index("### Over HTTP: `/mcp` on `sbx serve`")
    end = text.find("\n## ", start)
    return text[start:] if end < 0 else text[start:end]


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


@pytest.mark.docker
def test_the_docs_http_snippets_work_against_a_real_server(sqlite, serve):
    server = serve(sqlite)
    key = server.key("ann")
    section = _docs_http_section()
    [python] = _blocks(section, "python")
    cursor, vscode = (json.loads(block) for block in _blocks(section, "json"))
    for config in (cursor["mcpServers"]["sbx"], vscode["servers"]["sbx"]):
        assert config["url"].endswith("/mcp")
        assert config["headers"]["Authorization"].startswith("Bearer ${")
    local = server.url + "/mcp"
    code = python.replace("http://127.0.0.1:8700/mcp", local)
    assert code != python  # the snippet names the default address of `sbx serve`
    scope: dict = {"key": key}
    exec("async def snippet():\n" + textwrap.indent(code, "    ") + "\n    return result\n",
         scope)
    result = anyio.run(scope["snippet"])
    assert not result.is_error and text_of(result).startswith("[stdout]\n42")
    headers = {"Authorization": cursor["mcpServers"]["sbx"]["headers"]["Authorization"]
               .replace("${env:SBX_API_KEY}", key)}
    with httpx.Client(timeout=60) as http:  # the configured header is all a host sends
        answer = http.post(local, headers={**headers, "Accept": "application/json, "
                                           "text/event-stream"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "readme", "version": "0"}}})
    assert answer.status_code == 200 and answer.headers["mcp-session-id"]
