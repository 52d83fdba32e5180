"""Live output: one execution's `output` frames, checked against the caps, kept, handed on.

The runner streams the head of stdout and stderr while the code runs (protocol
3, `images/runner.py`), so a caller sees a long execution's output as it is
printed, and what was printed reaches the host even when the container dies
with the code (gVisor kills the whole sandbox at its memory limit). The frames
are as untrusted as any other (security.md, C16): each is checked here before
anything is kept or shown.

* sequence: `seq` counts the execution's output frames from 0, so a frame can
  be neither replayed nor reordered;
* bytes: no more characters per stream than the head the result keeps (half
  of `stdout_bytes` or `stderr_bytes`; an honest runner's chunk has no more
  characters than bytes), and no more than `OUTPUT_CHUNK_BYTES` per frame;
* count: no more frames than the runner's rate allows since the request went
  out (one per stream every `OUTPUT_INTERVAL_S`, plus one per full chunk),
  so a flood of empty frames ends the execution instead of the host's time.

Breaking any of these raises `StreamOverrun` and the session replaces the
container. Host memory stays bounded by the caps whatever the runner sends.

The runner cuts its frames by time, not by line: `print('TOTAL', x)` may stream
`TOTAL` and leave ` 1234.5\n` to the result when the cell ends within the
interval. `finish` hands the callback that rest of the head once the result has
come, so a subscriber sees every line whole, the last one included.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.limits import Limits
from sbx.sandbox.protocol import (
    OUTPUT_CHUNK_BYTES,
    OUTPUT_INTERVAL_S,
    OutputFrame,
    ResultFrame,
)

logger = logging.getLogger(__name__)

OutputCallback = Callable[[str, str], None]
"""`on_output(stream, text)`: called with each live chunk, `stream` is "stdout" or "stderr".

It runs on the thread that runs the execution, between two frames: it must return quickly
(a slow callback slows the program's output, never the execution's deadline). One that
raises is dropped for the rest of the execution, which goes on."""
OUTPUT_FRAME_MARGIN = 8
"""Output frames allowed beyond what an honest runner's rate gives (rounding, clocks)."""
STREAMS = ("stdout", "stderr")


class StreamOverrun(SandboxBroken):
    """The runner sent what no honest runner sends (too many frames): replace the container."""


@dataclass(kw_only=True)
class LiveOutput:
    """The output frames of one execution: checked, kept (bounded), and passed to a callback."""

    limits: Limits
    started: float
    """Monotonic time the request was sent: the runner cannot have streamed before it."""
    callback: OutputCallback | None = None
    frames: int = 0
    """Output frames received so far."""
    _parts: dict[str, list[str]] = field(default_factory=lambda: {s: [] for s in STREAMS})
    _chars: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STREAMS, 0))

    def head_chars(self, stream: str) -> int:
        """Characters of `stream` that may stream: the head the result keeps."""
        cap = self.limits.stdout_bytes if stream == "stdout" else self.limits.stderr_bytes
        return cap // 2

    def allowed_frames(self, now: float) -> int:
        """Output frames an honest runner can have sent by `now`."""
        timed = 2 * (1 + math.floor(max(now - self.started, 0.0) / OUTPUT_INTERVAL_S))
        full = sum(math.ceil(self.head_chars(s) / (OUTPUT_CHUNK_BYTES - 3)) for s in STREAMS)
        return OUTPUT_FRAME_MARGIN + timed + full

    def take(self, frame: OutputFrame, now: float) -> None:
        """Check one output frame, keep its text and hand it to the callback."""
        if frame.seq != self.frames:
            raise StreamOverrun(f"runner sent output frame {frame.seq} where {self.frames} was due")
        self.frames += 1
        if self.frames > self.allowed_frames(now):
            raise StreamOverrun(
                f"runner sent {self.frames} output frames in {now - self.started:.2f} s, more "
                f"than its rate allows (one per stream every {OUTPUT_INTERVAL_S:g} s)"
            )
        stream, text = frame.stream, frame.data
        self._chars[stream] += len(text)
        if self._chars[stream] > self.head_chars(stream):
            raise StreamOverrun(
                f"runner streamed more {stream} than the {self.head_chars(stream)} characters "
                "the result keeps at its head"
            )
        self._parts[stream].append(text)
        self._deliver(stream, text)

    def finish(self, result: ResultFrame) -> None:
        """The result came: hand on the rest of the head that no frame carried.

        Only the head goes on (not the runner's cut marker, not the kept tail),
        so the live stream keeps the bound it always had and repeats nothing.
        """
        for stream in STREAMS:
            self._deliver(stream, result.unstreamed_head(stream))

    def text(self, stream: str) -> str:
        """Everything streamed on `stream` so far."""
        return "".join(self._parts[stream])

    def _deliver(self, stream: str, text: str) -> None:
        callback = self.callback
        if callback is None or not text:
            return
        try:
            callback(stream, text)
        except Exception:  # a broken subscriber must not end the execution
            logger.warning("an output callback failed and was dropped", exc_info=True)
            self.callback = None
