"""`upload_dataset`: the MCP tool that hands a file sent in a tool call to the session's gate.

Listed only when the policy enables `[tools.upload_dataset]`; the gate tool
behind it (`upload_gate_tool`: decoding, size bound, the host's dataset store)
is the hosting's, offered to sessions of a host with somewhere to keep
datasets (`sbx serve`'s `/mcp`), so the gate decides and audits every call.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from sbx.agent import UPLOAD_TOOL, format_size
from sbx.agent.mcp.tool_sessions import McpSessions
from sbx.agent.mcp.tools import SessionKey, reported, result_of

FORMATS_HINT = "csv, tsv, json, jsonl (as text); parquet, xlsx, xls (as base64)"


def register_upload(server: Any, sessions: McpSessions, key: SessionKey) -> None:
    """Add the MCP tool `upload_dataset` to `server`, if the policy enables it (else nothing)."""
    rule = sessions.app.config.policy.tools.upload_dataset
    if not rule.enabled:
        return

    async def upload_dataset(
        name: Annotated[str, Field(description="The file's name with its suffix: "
                                               + FORMATS_HINT + ".")],
        content: Annotated[str, Field(description="The file's text as is, or base64 for "
                                                  "binary formats (then encoding='base64').")],
        ctx: Context[Any, Any],
        encoding: Annotated[Literal["text", "base64"],
                            Field(description="text (UTF-8) or base64.")] = "text",
    ) -> CallToolResult:
        session = sessions.get(key(ctx))
        arguments = {"name": name, "content": content, "encoding": encoding}
        async with session.turn:  # no execution starts while the session's data changes
            call = partial(session.call, UPLOAD_TOOL, arguments)
            report = await anyio.to_thread.run_sync(call)
        return result_of(report, session)

    description = (
        "Store a file you have (a table the user pasted, a file you made) as one of your "
        f"datasets, at most {format_size(rule.max_bytes)}: formats {FORMATS_HINT}. It stays "
        "among your datasets for later sessions and is read in the sandbox at /data/NAME "
        "(the result says from when). Names already at /data are refused."
    )
    server.add_tool(
        reported(upload_dataset), name=UPLOAD_TOOL, description=description,
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=False),
    )
