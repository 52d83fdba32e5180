"""The host's end of the runner protocol: one attach socket, framed JSON lines, hard bounds.

Docker multiplexes a non-TTY attach stream into frames with an 8-byte header
(stream id, size). We demultiplex it, split stdout into lines and parse each
line as a typed frame (`sandbox.protocol`). Everything arriving here comes
from inside the sandbox, so it is untrusted: lines are bounded, the runner's
own stderr is kept only up to a small cap, and every read has a deadline.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import threading
import time
from typing import Any

from pydantic import ValidationError

from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.protocol import Frame, parse_frame

_HEADER = struct.Struct(">BxxxI")
RUNNER_STDERR_CAP = 16 * 1024


class ChannelClosed(SandboxBroken):
    """The runner's stream ended (the runner or its container died)."""


class ChannelTimeout(SandboxBroken):
    """No complete frame arrived before the deadline."""


class Channel:
    """Send requests to the runner and read its frames, never trusting what comes back."""

    def __init__(self, sock: socket.socket, *, max_line_bytes: int, owner: Any = None) -> None:
        self.sock = sock
        self._owner = owner
        self.max_line_bytes = max_line_bytes
        self._raw = bytearray()
        self._lines = bytearray()
        self._scanned = 0
        """Bytes of `_lines` already searched for a newline: a long frame arrives in many
        reads, and searching it from the start each time was quadratic (2.2 s of CPU for
        four 32 MiB artifacts, measured)."""
        self._frame_left = 0
        self._frame_stream = 0
        self.runner_stderr = bytearray()
        self.closed = False
        self._state = threading.Lock()
        self._readers = 0
        self._released = False
        self._wake_r, self._wake_w = os.pipe()

    def send(self, request: dict[str, object]) -> None:
        """Write one request line to the runner's stdin."""
        try:
            self.sock.sendall(json.dumps(request, separators=(",", ":")).encode() + b"\n")
        except OSError as exc:
            raise ChannelClosed(f"sandbox stream closed while sending: {exc}") from None

    def receive(self, deadline: float) -> Frame:
        """The next frame, or ChannelTimeout at the monotonic `deadline`, or ChannelClosed."""
        while True:
            newline = self._lines.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._lines[:newline])
                del self._lines[: newline + 1]
                self._scanned = 0
                try:
                    return parse_frame(line)
                except (ValueError, ValidationError) as exc:
                    raise SandboxBroken(
                        f"runner sent a malformed frame: {str(exc)[:200]}"
                    ) from None
            self._scanned = len(self._lines)
            if len(self._lines) > self.max_line_bytes:
                raise SandboxBroken(f"runner sent a frame over {self.max_line_bytes} bytes")
            self._fill(deadline)

    def _fill(self, deadline: float) -> None:
        """Read more from the socket and demultiplex it into stdout lines and runner stderr.

        `close()` from another thread wakes this through a pipe; the descriptors
        are released by whichever side finishes last, so a blocked reader never
        ends up waiting on a reused descriptor number.
        """
        with self._state:
            if self.closed:
                raise ChannelClosed(self._closed_message())
            self._readers += 1
        try:
            chunk = self._read_once(deadline)
        finally:
            with self._state:
                self._readers -= 1
                if self.closed and self._readers == 0:
                    self._release()
        if not chunk:
            self.closed = True
            raise ChannelClosed(self._closed_message())
        self._raw += chunk
        self._demultiplex()

    def _read_once(self, deadline: float) -> bytes:
        """One bounded wait for data; b"" when the stream ended or the channel was closed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ChannelTimeout("no answer from the sandbox before the deadline")
        ready, _, _ = select.select([self.sock.fileno(), self._wake_r], [], [], remaining)
        if not ready:
            raise ChannelTimeout("no answer from the sandbox before the deadline")
        if self._wake_r in ready or self.closed:
            return b""
        try:
            return self.sock.recv(1 << 18)
        except OSError:
            return b""

    def _demultiplex(self) -> None:
        """Move complete parts of Docker's stream frames to their destinations."""
        while self._raw:
            if self._frame_left == 0:
                if len(self._raw) < _HEADER.size:
                    return
                self._frame_stream, self._frame_left = _HEADER.unpack_from(self._raw)
                del self._raw[: _HEADER.size]
                continue
            take = min(self._frame_left, len(self._raw))
            payload = bytes(self._raw[:take])
            del self._raw[:take]
            self._frame_left -= take
            if self._frame_stream == 1:
                self._lines += payload
            elif len(self.runner_stderr) < RUNNER_STDERR_CAP:
                self.runner_stderr += payload[: RUNNER_STDERR_CAP - len(self.runner_stderr)]

    def _closed_message(self) -> str:
        tail = self.runner_stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        detail = f": {' | '.join(tail)}" if tail else ""
        return f"the sandbox's runner stopped{detail}"

    def close(self) -> None:
        """Close the stream (the runner sees end of input and exits); safe from any thread."""
        with self._state:
            self.closed = True
            try:
                os.write(self._wake_w, b"x")
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if self._readers == 0:
                self._release()

    def _release(self) -> None:
        """Free the descriptors once no reader is waiting on them (call with the lock held)."""
        if self._released:
            return
        self._released = True
        for resource in (getattr(self._owner, "_response", None), self._owner, self.sock):
            try:
                if resource is not None:
                    resource.close()
            except (OSError, ValueError):
                pass  # already closed through another of the three handles
        os.close(self._wake_r)
        os.close(self._wake_w)
