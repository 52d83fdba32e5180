"""`upload_dataset`'s gate tool: a file sent inside a tool call becomes a dataset and `/data`.

A hosted tool session (MCP over HTTP) is offered it when the policy enables
`[tools.upload_dataset]`: it decodes (text as UTF-8, or base64), bounds the
size by the policy's `max_bytes` before anything is written (base64 checked
before decoding), refuses a name already at `/data`, has the host's
`DatasetStore` keep it (`ServiceDatasets`: the same checks and quotas as an
upload over HTTP), and adds it to the session's data paths. The content is
client input: it never becomes a path (the store makes the name safe and the
directory is an id it chose). A face lists the tool and hands the call to the
session, so the gate decides and audits it.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Protocol

from pydantic import Field

from sbx.agent.core.session_admission import Caller
from sbx.sandbox.units import format_size
from sbx.tools.context import ToolContext
from sbx.tools.policy import UploadDatasetRule
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, build_tool

UPLOAD_TOOL = "upload_dataset"
"""The gate tool whose value is a new data file for the session."""
Encoding = Literal["text", "base64"]


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
