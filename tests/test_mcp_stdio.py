"""`sbx mcp` over stdio, driven by the MCP SDK's own client spawning the real command.

Real Docker, the real image, the real gate and audit log; nothing is mocked.
Each test starts `sbx mcp` as a subprocess (as Claude Desktop or Cursor
would) and talks to it with `mcp.Client`; tests wait on responses and
notifications, never on the clock.
"""

from __future__ import annotations

import base64
import subprocess

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ImageContent, ResourceLink

from conftest import TEST_IMAGE
from mcp_support import (
    EXAMPLES,
    PNG_SIGNATURE,
    SBX,
    audit_records,
    containers_of,
    mcp_client,
    session_ids,
    text_of,
    wait_until_gone,
)
from sbx.agent.core.app import os_principal
from sbx.tools.audit_verify import verify_log


@pytest.mark.docker
def test_a_variable_persists_between_calls_and_the_session_leaves_nothing_behind(
    tmp_path, engine
):
    async def scenario() -> tuple[CallToolResult, CallToolResult, list[str]]:
        async with mcp_client(tmp_path) as client:
            first = await client.call_tool("execute_python", {"code": "total = 40 + 2"})
            second = await client.call_tool("execute_python", {"code": "print(total)"})
            live = containers_of(engine, session_ids(tmp_path)[0])
        return first, second, live

    first, second, live = anyio.run(scenario)

    assert not first.is_error and not second.is_error
    assert text_of(second).startswith("[stdout]\n42")
    assert len(live) == 1  # one sandbox served both calls, labelled with the session's id
    [session] = session_ids(tmp_path)
    assert wait_until_gone(engine, session) == []
    records = audit_records(tmp_path)
    assert [r["event"] for r in records if r["run_id"] == session][-1] == "run_end"
    assert {r["data"]["principal"] for r in records} == {os_principal()}  # the OS user's
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok


@pytest.mark.docker
def test_a_matplotlib_chart_comes_back_as_an_image_and_as_a_resource(tmp_path):
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 3, 2])\n"
        "plt.savefig('/output/chart.png')\n"
    )

    async def scenario() -> tuple[CallToolResult, bytes]:
        async with mcp_client(tmp_path) as client:
            result = await client.call_tool("execute_python", {"code": code})
            [link] = [block for block in result.content if isinstance(block, ResourceLink)]
            read = await client.read_resource(link.uri)
        blob = read.contents[0]
        assert blob.mime_type == "image/png"
        return result, base64.b64decode(blob.blob)  # type: ignore[union-attr]

    result, resource_bytes = anyio.run(scenario)

    assert not result.is_error
    [image] = [block for block in result.content if isinstance(block, ImageContent)]
    assert image.mime_type == "image/png"
    inline = base64.b64decode(image.data)
    assert inline.startswith(PNG_SIGNATURE)
    assert resource_bytes == inline
    [session] = session_ids(tmp_path)
    assert (tmp_path / "out" / session / "chart.png").read_bytes() == inline


@pytest.mark.docker
def test_a_tool_the_policy_denies_is_an_error_the_model_can_read_and_it_is_audited(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text(
        "[tools.execute_python]\nenabled = true\n"
        "[tools.list_data_files]\nenabled = true\n"
        "[tools.preview_data_file]\nenabled = false\n"
        '[sandbox]\ntimeout = "45s"\nmemory = "256m"\n'
    )

    async def scenario() -> tuple[dict[str, str], CallToolResult, CallToolResult]:
        args = ("--policy", str(policy), "--data", str(EXAMPLES / "sales.csv"))
        async with mcp_client(tmp_path, *args) as client:
            listed = await client.list_tools()
            denied = await client.call_tool("preview_data_file", {"name": "sales.csv"})
            allowed = await client.call_tool("list_data_files", {})
        return {t.name: t.description or "" for t in listed.tools}, denied, allowed

    tools, denied, allowed = anyio.run(scenario)

    assert denied.is_error
    assert "tools.preview_data_file.enabled" in text_of(denied)
    assert not allowed.is_error and "sales.csv" in text_of(allowed)
    assert "DISABLED" in tools["preview_data_file"]
    described = tools["execute_python"]
    for fact in ("45 s", "256 MiB", "pandas", "matplotlib", "/data/sales.csv", "/output",
                 "no network"):
        assert fact in described
    decisions = [r["data"] for r in audit_records(tmp_path) if r["event"] == "decision"]
    assert [(d["tool"], d["decision"]) for d in decisions] == [
        ("preview_data_file", "denied"), ("list_data_files", "allowed")
    ]
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok


@pytest.mark.docker
def test_a_second_session_sees_neither_the_first_ones_variables_nor_its_files(tmp_path):
    plant = (
        "secret = 'first'\n"
        "open('/output/secret.txt', 'w').write('first session')\n"
        "open('/tmp/scratch', 'w').write('first session')\n"
    )
    look = (
        "import os\n"
        "print('secret' in globals(), sorted(os.listdir('/output')), "
        "os.path.exists('/tmp/scratch'))\n"
    )

    async def scenario() -> tuple[str, str, str]:
        async with mcp_client(tmp_path) as first, mcp_client(tmp_path) as second:
            planted = await first.call_tool("execute_python", {"code": plant})
            [link] = [block for block in planted.content if isinstance(block, ResourceLink)]
            own = await first.read_resource(link.uri)
            seen = await second.call_tool("execute_python", {"code": look})
            with pytest.raises(MCPError, match="Unknown resource"):
                await second.read_resource(link.uri)
        return own.contents[0].text, text_of(seen), link.uri  # type: ignore[union-attr]

    own_text, seen, uri = anyio.run(scenario)

    assert own_text == "first session"  # the link works for the session that made it
    assert seen.startswith("[stdout]\nFalse [] False")
    assert len(set(session_ids(tmp_path))) == 2
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok


@pytest.mark.docker
def test_sbx_mcp_without_the_image_is_one_line_before_it_serves(tmp_path, engine):
    done = subprocess.run(
        [*SBX, "mcp", "--image", "sbx-missing:none"], input=b"", capture_output=True,
        timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 125
    assert done.stdout == b""  # stdout is the protocol's: nothing else ever goes there
    assert "sbx image build" in done.stderr.decode()


@pytest.mark.docker
def test_an_operator_error_reaches_the_client_as_a_readable_tool_error(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools.execute_python]\nenabled = true\n[sandbox]\nruntime = "nosuch"\n')

    async def scenario() -> CallToolResult:
        async with mcp_client(tmp_path, "--policy", str(policy)) as client:
            return await client.call_tool("execute_python", {"code": "print(1)"})

    result = anyio.run(scenario)

    assert result.is_error
    assert text_of(result).startswith("sbx could not run this call: ")
    assert "nosuch" in text_of(result) and "for the operator to fix" in text_of(result)


@pytest.mark.docker
def test_data_the_sandboxs_user_cannot_read_is_refused_before_serving(tmp_path, engine):
    secret = tmp_path / "secret.csv"
    secret.write_text("a,b\n1,2\n")
    secret.chmod(0o600)  # readable by its owner only: the host-side tools must not read it either
    done = subprocess.run(
        [*SBX, "mcp", "--image", TEST_IMAGE, "--data", str(secret),
         "--audit-log", str(tmp_path / "audit.jsonl")],
        input=b"", capture_output=True, timeout=120, cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stdout == b""
    assert "not readable by the sandbox's user" in done.stderr.decode()
