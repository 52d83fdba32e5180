"""`upload_dataset`: a file sent inside a tool call becomes a dataset and the session's `/data`.

Two halves, like every sbx tool an MCP client calls:

    the MCP tool (`register_upload`)   listed only when the policy enables
                                       `[tools.upload_dataset]`; it hands the call to the
                                       caller's session, so the gate decides and audits it
    the gate tool (`upload_gate_tool`) decodes (text as UTF-8, or base64), bounds the
                                       size by the policy's `max_bytes`, refuses a name
                                       already at `/data`, has the face's `DatasetStore`
                                       keep it, and adds it to the session's data paths

Only a face with somewhere to keep datasets offers it (`sbx serve`'s `/mcp`:
`sbx.agent.service.mcp_tenancy` is its store, with the same checks and quotas
as `POST /v1/datasets`). The content is client input: it never becomes a
path (the store makes the name safe and the directory is an id it chose),
and the decoded size is checked before anything is written.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from sbx.agent import (
    Tool,
    ToolContext,
    ToolFailure,
    ToolReturn,
    UploadDatasetRule,
    build_tool,
    format_size,
)
from sbx.agent.mcp.admission import Caller
from sbx.agent.mcp.tool_session import UPLOAD_TOOL
from sbx.agent.mcp.tool_sessions import McpSessions
from sbx.agent.mcp.tools import SessionKey, reported, result_of

Encoding = Literal["text", "base64"]
FORMATS_HINT = "csv, tsv, json, jsonl (as text); parquet, xlsx, xls (as base64)"


@dataclass(frozen=True, kw_only=True)
class StoredDataset:
    """A file the face kept: where, under which id, and what the model is told about it."""

    path: Path
    """The file on the host; mounted at `/data/<path.name>`."""
    ident: str
    """The face's id for it (`ds-...` over HTTP)."""
    size: int
    """Bytes."""
    sha256: str
    """Hex digest of the bytes."""
    summary: str
    """Columns and a few rows (CSV/TSV), or the reader to use: the same preview as the API's."""


class DatasetStore(Protocol):
    """Where a face keeps uploaded files (thread-safe); it raises `ToolFailure` to refuse."""

    def name_for(self, name: str) -> str:
        """The safe name the file will have (or `ToolFailure`: a format it does not take)."""
        ...

    def store(self, caller: Caller, name: str, data: bytes) -> StoredDataset:
        """Check the content against its format, reserve the caller's quota, keep the file."""
        ...


def upload_gate_tool(store: DatasetStore, caller: Caller, rule: UploadDatasetRule) -> Tool:
    """The gate's `upload_dataset` for one session of `caller`."""

    def upload_dataset(
        name: str, content: Annotated[str, Field(min_length=0)], ctx: ToolContext,
        encoding: Encoding = "text",
    ) -> ToolReturn:
        """Store a file as one of your datasets; this session then reads it at /data/NAME.

        Args:
            name: The file's name with its format's suffix (csv, tsv, json, jsonl, parquet,
                xlsx, xls).
            content: The file: its text as is, or base64 (encoding="base64") for binary
                formats.
            ctx: The session's context, injected by the gate (not part of the schema).
            encoding: "text" (UTF-8) or "base64".
        """
        data = _decode(content, encoding, rule.max_bytes)
        safe = store.name_for(name)
        taken = {path.name for path in ctx.data_paths}
        if safe in taken:
            raise ToolFailure(f"/data/{safe} exists in this session already; upload the file "
                              "under another name")
        kept = store.store(caller, safe, data)
        ctx.data_paths.append(kept.path)  # the host-side data tools of this session see it now
        text = (f"Stored as dataset {kept.ident}: {safe}, {format_size(kept.size)}, sha256 "
                f"{kept.sha256[:16]}...\n\n{kept.summary}")
        audit = {"dataset": kept.ident, "name": safe, "size": kept.size, "sha256": kept.sha256}
        return ToolReturn(text=text, value=kept.path, audit=audit)

    return build_tool(upload_dataset, name=UPLOAD_TOOL)


def _decode(content: str, encoding: Encoding, max_bytes: int) -> bytes:
    """The file's bytes, never more than `max_bytes` (checked before decoding base64)."""
    too_large = (f"the file is larger than {format_size(max_bytes)} "
                 "(the policy's tools.upload_dataset.max_bytes)")
    if encoding == "text":
        data = content.encode("utf-8", "surrogatepass")
        if len(data) > max_bytes:
            raise ToolFailure(too_large)
        return data
    if len(content) * 3 // 4 > max_bytes + 3:
        raise ToolFailure(too_large)
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise ToolFailure("content is not valid base64 (encoding='base64')") from None
    if len(data) > max_bytes:
        raise ToolFailure(too_large)
    return data


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
        encoding: Annotated[Encoding, Field(description="text (UTF-8) or base64.")] = "text",
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
