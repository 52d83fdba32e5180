"""What every export format shares: the header, the executions in order, inert markdown, PNGs.

`formats` (the script and the dispatcher), `notebook` and `report` import this
module and never each other, so no export module imports its own importer.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from sbx.agent.core.history import RecordedConversation, RecordedExecution
from sbx.agent.export.code import header
from sbx.tools.text_safety import safe_text

MAX_IMAGE_BYTES = 10 * 1024 * 1024
"""Largest PNG embedded in a notebook."""
_PNG = b"\x89PNG\r\n\x1a\n"
_MARKDOWN_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[",
                                   "]": "\\]"})


def header_for(record: RecordedConversation) -> str:
    """The header cell of this conversation's export."""
    digests: dict[str, str] = {}
    for run in record.runs:
        digests.update(run.data_sha256)
    if not digests:
        digests = {Path(path).name: "(not recorded)" for run in record.runs for path in run.data}
    return header(
        source=record.path.name, run_ids=[run.run_id for run in record.runs], digests=digests
    )


def executions(record: RecordedConversation) -> Iterable[tuple[int, RecordedExecution]]:
    """(run index, execution) for every execution of every run, in order."""
    for index, run in enumerate(record.runs):
        for execution in run.executions:
            yield index, execution


def outcome_phrase(execution: RecordedExecution) -> str:
    """`timed out`, `was killed at the memory limit` or `was stopped` (its interpreter died)."""
    if execution.timed_out:
        return "timed out"
    return "was killed at the memory limit" if execution.oom_killed else "was stopped"


def markdown_text(text: str) -> str:
    """Model or transcript text made inert in markdown: no HTML, no links, no images.

    `<`, `>` and `&` become entities and `[`, `]` are escaped, so `![x](https://...)`
    cannot make a viewer fetch a URL; controls are shown escaped (`safe_text`).
    """
    return safe_text(text, multiline=True).translate(_MARKDOWN_ESCAPES)


def png_bytes(path: str) -> bytes | None:
    """The file at `path` if it is a regular file (not a link), a PNG, within the cap."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IMAGE_BYTES:
            return None
        with open(path, "rb") as handle:
            data = handle.read(MAX_IMAGE_BYTES + 1)
    except OSError:
        return None
    return data if data.startswith(_PNG) and len(data) <= MAX_IMAGE_BYTES else None


def png_base64(path: str) -> str | None:
    """`png_bytes` as base64 text, for `image/png` display data."""
    data = png_bytes(path)
    return base64.b64encode(data).decode("ascii") if data is not None else None
