"""How the gate describes a call: its ids, its audit request record, its refusals for size.

Everything here is shaped from model-controlled input, so everything is
bounded: arguments over the cap are recorded by size, digest and their first
`AUDIT_ARGUMENT_PREFIX` characters, never whole; at most `MAX_REPORTED_ERRORS`
validation errors are listed, each location part cut at 100 characters.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sbx.tools.observation import InvalidArguments

AUDIT_ARGUMENT_PREFIX = 1024
"""Characters of refused oversized arguments the audit keeps (with their size and digest)."""
MAX_REPORTED_ERRORS = 20
"""Validation errors listed to the model (and the audit) for one call; the count says the rest."""


@dataclass(frozen=True)
class CallIds:
    """A call's ids: the gate's own (the audit key), the caller's, and the model's."""

    audit: str
    """`<run_id>-c<n>`: unique in the run, the key that joins the call's audit records."""
    reply: str
    """The `tool_call_id` the answering message carries."""
    model: str | None
    """The id the model wrote, if the caller passed it (data only)."""


def too_large(name: str, size: int, cap: int) -> InvalidArguments:
    """The refusal of arguments over the cap, which tells the model the cap (it can fix that)."""
    message = (
        f"the arguments are {size} bytes, over the cap of {cap} bytes (max_argument_bytes); "
        "send less: e.g. compute the data in the sandbox rather than pasting it"
    )
    return InvalidArguments(tool=name, errors=[{"type": "too_long", "loc": [], "msg": message}])


def invalid_arguments(name: str, errors: list[dict[str, Any]]) -> InvalidArguments:
    """The validation errors, at most `MAX_REPORTED_ERRORS` of them, each location part bounded."""
    shown = [
        {**error, "loc": [str(part)[:100] for part in error.get("loc", ())]}
        for error in errors[:MAX_REPORTED_ERRORS]
    ]
    if len(errors) > MAX_REPORTED_ERRORS:
        more = len(errors) - MAX_REPORTED_ERRORS
        note = f"{more} more errors not listed ({len(errors)} in all)"
        shown.append({"type": "truncated", "loc": [], "msg": note})
    return InvalidArguments(tool=name, errors=shown)


def request_data(
    name: str, arguments: str, size: int, ids: CallIds, cap: int
) -> dict[str, Any]:
    """The request record: parsed arguments when they are JSON, the raw string otherwise.

    Arguments over the cap are not stored: their size, SHA-256 and first characters are.
    """
    data: dict[str, Any] = {
        "call_id": ids.audit, "tool_call_id": ids.reply, "model_call_id": ids.model, "tool": name,
    }
    if size > cap:
        data["arguments_raw"] = arguments[:AUDIT_ARGUMENT_PREFIX]
        data["arguments_bytes"] = size
        data["arguments_sha256"] = hashlib.sha256(
            arguments.encode("utf-8", "surrogatepass")
        ).hexdigest()
        return data
    try:
        data["arguments"] = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        data["arguments_raw"] = arguments
    parsed = data.get("arguments")
    code = parsed.get("code") if isinstance(parsed, dict) else None
    if name == "execute_python" and isinstance(code, str):
        data["code_sha256"] = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
    return data


def outcome_data(
    call_id: str, tool: str, status: str, text: str, duration_s: float, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The audit `outcome` record of one call: status, timing, the text the model received."""
    return {
        "call_id": call_id, "tool": tool, "status": status, "duration_s": round(duration_s, 6),
        "bytes_out": len(text.encode()), "text": text, **extra,
    }
