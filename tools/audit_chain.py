"""The audit log's record format: canonical JSON lines, each sealed into a hash chain.

One record is one line of canonical JSON (sorted keys, no spaces, ASCII only),
so the bytes on disk are a function of the content and any edit shows. Each
record carries `prev`, the seal of the record before it (`GENESIS` for the
first), and `hash`, its own seal over every other field, `prev` included:

    hash = SHA-256(canonical(record without "hash"))           alg "sha256"
    hash = HMAC-SHA256(key, canonical(record without "hash"))  alg "hmac-sha256"

The own seal pins an edit to the record edited (the last one too); the chain
pins deletions, insertions and reordering (with `seq`, one counter per file).
Without a key anyone who can write the file can recompute every seal; with
`SBX_AUDIT_KEY` they also need the key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64
FORMAT_VERSION = 1


def canonical(record: dict[str, Any]) -> bytes:
    """The one byte form of a record: sorted keys, compact separators, ASCII, no NaN."""
    return json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def algorithm(key: bytes | None) -> str:
    """The `alg` field written for a key (or its absence)."""
    return "sha256" if key is None else "hmac-sha256"


def seal(record: dict[str, Any], key: bytes | None) -> str:
    """Hex seal of a record over all fields except `hash`."""
    body = canonical({k: v for k, v in record.items() if k != "hash"})
    if key is None:
        return hashlib.sha256(body).hexdigest()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def utc_now() -> str:
    """UTC time with microseconds, `Z` suffix."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def make_line(
    *,
    seq: int,
    prev: str,
    run_id: str,
    event: str,
    data: dict[str, Any],
    key: bytes | None,
    pid: int,
) -> tuple[bytes, str]:
    """Build and seal one record; return (line with newline, its hash)."""
    record: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "seq": seq,
        "time": utc_now(),
        "run_id": run_id,
        "pid": pid,
        "event": event,
        "data": data,
        "alg": algorithm(key),
        "prev": prev,
    }
    record["hash"] = seal(record, key)
    return canonical(record) + b"\n", record["hash"]
