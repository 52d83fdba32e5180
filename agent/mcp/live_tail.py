"""The newest line an execution printed, for an MCP client's progress notifications.

An MCP client sees a long execution only through progress notifications
("MCP progress sees a long execution's output while it
runs"). Each carries the newest complete line of stdout or stderr, escaped
and cut, never the whole stream: the full output comes with the result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sbx.agent import safe_text

MAX_LINE_CHARS = 200
"""A progress message's line is cut to this many characters."""
MAX_PENDING_CHARS = 4096
"""At most this much of an unfinished line is held (a flood without newlines stays bounded)."""


class LiveTail:
    """Receives an execution's output while it runs (the gate's `on_output` sink); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, str] = {}
        self._newest: str | None = None

    def add(self, call_id: str, stream: str, text: str) -> None:
        """Keep the newest complete line of `stream` (the sink's signature; `call_id` unused)."""
        del call_id
        with self._lock:
            joined = self._pending.get(stream, "") + text
            complete, _, rest = joined.rpartition("\n")
            lines = [line for line in complete.splitlines() if line.strip()]
            if lines:
                self._newest = lines[-1][-MAX_PENDING_CHARS:]
            self._pending[stream] = rest[-MAX_PENDING_CHARS:]

    def start(self) -> None:
        """A new call begins: nothing of the last one is shown."""
        with self._lock:
            self._pending.clear()
            self._newest = None

    def newest_line(self, guard: Callable[[str], str] = str) -> str | None:
        """The newest complete line so far, passed through `guard`, escaped and cut.

        `guard` is the session's data guard: it sees the whole line, before the cut.
        """
        with self._lock:
            line = self._newest
        if line is None:
            return None
        shown = safe_text(guard(line))
        return shown if len(shown) <= MAX_LINE_CHARS else shown[: MAX_LINE_CHARS - 1] + "…"
