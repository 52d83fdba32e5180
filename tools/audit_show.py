"""Turn audit records into one readable row per tool call (and per run start/end).

A call's request, decision and outcome records share `run_id` and `call_id`,
the id the gate gave the call (`<run_id>-c<n>`, unique in the run; the
model's own id is only data, `model_call_id`). `call_rows` merges them, in
the order their requests appear, and applies the `sbx audit show` filters. A
second request under a key already seen starts a new row (logs written
before the gate assigned ids keyed calls by the model's ids, which a model
can repeat), so one call's decision never shows on another's row. Display
only: trust comes from `verify_log`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_SURROGATES = re.compile("[\ud800-\udfff]")
COLUMNS = (
    "line", "time", "run", "call", "tool", "decision", "status", "rule", "secs", "arguments",
    "reason",
)
REFUSED = frozenset({"denied", "unknown", "invalid", "halted"})
"""Decisions that refused a call (`--denied`): each counts toward `quotas.max_denied`."""
MAX_REASON_CHARS = 100


@dataclass
class CallRow:
    """One call (or run event) as a table row."""

    line: int
    """Line of the first record of the call (its request)."""
    time: str
    """UTC time of that record, to the second."""
    run: str
    """The run id."""
    call: str
    """The gate's call id (`-` for run events)."""
    tool: str
    """The tool name as requested (`-` for run events)."""
    decision: str = ""
    """allowed, denied, invalid, unknown, halted; or the run event's name."""
    status: str = ""
    """The outcome's status, for calls that ran."""
    rule: str = ""
    """The policy key behind a denial or halt."""
    secs: str = ""
    """Duration of the call, for calls that ran."""
    arguments: str = ""
    """The (redacted) arguments, shortened."""
    reason: str = ""
    """Why a refused call was refused: the first line the model was given, shortened."""

    def cells(self) -> list[str]:
        """The row's values in `COLUMNS` order (text that is not valid Unicode shown as U+FFFD)."""
        return [_SURROGATES.sub("\ufffd", str(getattr(self, name))) for name in COLUMNS]


def call_rows(
    records: Iterable[tuple[int, dict[str, Any]]],
    *,
    run: str | None = None,
    tool: str | None = None,
    denied: bool = False,
) -> list[CallRow]:
    """Merge request/decision/outcome records into rows, then filter."""
    rows: list[CallRow] = []
    current: dict[tuple[str, str], CallRow] = {}
    """Per (run, call id): the row its latest request opened."""
    for line, record in records:
        data = record.get("data") or {}
        run_id, event = str(record.get("run_id", "")), record.get("event")
        if event in ("run_start", "run_end", "recover"):
            rows.append(CallRow(line, _clock(record), run_id, "-", "-", decision=str(event)))
            continue
        key = (run_id, str(data.get("call_id", "")))
        row = current.get(key)
        if row is None or event == "request":
            row = CallRow(line, _clock(record), run_id, key[1], str(data.get("tool", "")))
            current[key] = row
            rows.append(row)
        _merge(row, event, data)
    return [row for row in rows if _keep(row, run=run, tool=tool, denied=denied)]


def _merge(row: CallRow, event: Any, data: dict[str, Any]) -> None:
    if event == "request":
        row.arguments = _short_arguments(data)
    elif event == "decision":
        row.decision = str(data.get("decision", ""))
        row.rule = str(data.get("rule") or "")
        if row.decision in REFUSED:
            row.reason = _shortened(str(data.get("text") or "").split("\n", 1)[0],
                                    MAX_REASON_CHARS)
    elif event == "outcome":
        row.status = str(data.get("status", ""))
        row.secs = f"{float(data.get('duration_s', 0.0)):.3f}"


def _keep(row: CallRow, *, run: str | None, tool: str | None, denied: bool) -> bool:
    is_call = row.call != "-"
    if run is not None and not row.run.startswith(run):
        return False
    if tool is not None and (not is_call or row.tool != tool):
        return False
    return not denied or (is_call and row.decision in REFUSED)


def _clock(record: dict[str, Any]) -> str:
    text = str(record.get("time", ""))
    return f"{text[:19]}Z" if text else ""


def _short_arguments(data: dict[str, Any]) -> str:
    if "arguments_raw" in data:
        text = str(data["arguments_raw"])
    else:
        text = json.dumps(data.get("arguments"), ensure_ascii=False, separators=(",", ":"))
    return _shortened(text, 60)


def _shortened(text: str, limit: int) -> str:
    """One line of at most `limit` characters (whitespace runs as one space)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
