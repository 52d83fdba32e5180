"""`Feed`: a running run's events in this replica's memory, as SSE frames, for its streams.

The store is the record; the feed is the pipe. A stream on the replica that
runs the run reads its frames from here (no query per wake-up); a stream on
another replica, or one that resumes after the run has ended, reads the store.
Each frame is the event's SSE text, built once from the JSON that is stored.
A run's end (`run_end`, `run_error`) joins the feed only after the run's final
status is committed with it, so a client that sees the end finds the run ended.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


def sse_frame(seq: int, kind: str, data: str) -> str:
    """One event as Server-Sent Events text (`data` is its JSON, on one line)."""
    return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n"


@dataclass(eq=False)
class Feed:
    """The frames of one run from seq `base` on, and whether the run has ended."""

    base: int = 1
    """The first seq it holds: a stream that resumes before it reads the store."""
    _frames: list[tuple[int, str]] = field(default_factory=list)
    _ended: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seq: int, frame: str) -> None:
        """One more frame, in seq order."""
        with self._lock:
            self._frames.append((seq, frame))

    def end(self) -> None:
        """Nothing follows (the run's end is committed, or the run is gone)."""
        with self._lock:
            self._ended = True

    def since(self, after: int) -> tuple[list[tuple[int, str]], bool]:
        """(the frames after seq `after`, the run had ended before they were read)."""
        with self._lock:
            ended = self._ended
            start = max(0, after - self.base + 1)
            return self._frames[start:], ended
