"""The access log of `sbx serve`: one JSON line per HTTP request, for people and log shippers.

    {"time": "2025-01-31T12:00:00.123Z", "request_id": "5f0c...", "principal": "key:alice",
     "method": "GET", "route": "/v1/runs/{run_id}", "path": "/v1/runs/run-3bd1f159dbd8",
     "status": 200, "duration_s": 0.0042, "bytes_in": 0, "bytes_out": 512}

No bodies, no headers, no query strings, so no key and no question ever
reaches it. The client chooses the method and the path: each is cut short
(`MAX_FIELD_CHARS`) and every line is written with `ensure_ascii`, so a
control character, an escape sequence or a newline in them arrives as a JSON
escape and cannot forge a line or drive a terminal. `principal` is null when
the request was not authenticated. The request id is the one in the response's
`X-Request-Id` and in every problem document, so a user's report finds its line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from sbx.agent import UNMATCHED_ROUTE, Observer

MAX_FIELD_CHARS = 200
"""Longest method or path written (client-chosen text)."""


class AccessLog(Observer):
    """Writes one JSON line per request to a sink (see the module docstring)."""

    def __init__(self, write: Callable[[str], None], *, close: Callable[[], None] | None = None
                 ) -> None:
        self._write = write
        self._close = close
        self._lock = threading.Lock()

    @classmethod
    def open(cls, target: str) -> AccessLog | None:
        """`-` is stderr, `off` is no access log, anything else a file appended to (0600)."""
        if target == "off":
            return None
        if target == "-":
            return cls(_line_writer(sys.stderr))
        path = Path(target)
        handle = open(path, "a", encoding="ascii", buffering=1, opener=_private)
        return cls(_line_writer(handle), close=handle.close)

    def close(self) -> None:
        """Close the file, if this log opened one."""
        if self._close is not None:
            self._close()

    def request_finished(self, *, method: str, path: str, status: int, duration_s: float,
                         request_id: str, route: str = UNMATCHED_ROUTE,
                         principal: str | None = None, bytes_in: int = 0,
                         bytes_out: int = 0) -> None:
        """Write the request's line."""
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
        line = json.dumps({
            "time": stamp, "request_id": request_id, "principal": principal,
            "method": method[:MAX_FIELD_CHARS], "route": route, "path": path[:MAX_FIELD_CHARS],
            "status": status, "duration_s": round(duration_s, 6), "bytes_in": bytes_in,
            "bytes_out": bytes_out,
        }, ensure_ascii=True)
        with self._lock:
            self._write(line)


def _line_writer(stream: IO[str]) -> Callable[[str], None]:
    def write(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    return write


def _private(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o600)
