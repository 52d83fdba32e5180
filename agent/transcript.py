"""The conversation's transcript: every event as one JSON line, written as it happens.

The loop and the conversation report what happens as typed events
(`sbx.agent.events`); the transcript writes each one, and the live progress
display renders the same events, so `sbx replay` can re-render a past
conversation (every run of it) from the file alone.

The transcript keeps full payloads: it is the record, like the audit log, and
unlike ordinary logs (G15). The API key is never part of any event. Files are
created with mode 0600 and never overwritten.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from sbx.agent.events import Event, parse_event


class TranscriptError(Exception):
    """The transcript cannot be written or read; the message names the file (and line)."""


class Transcript:
    """An open transcript file for one conversation; `record` is an event sink."""

    def __init__(self, *, path: Path, stream: IO[str], conversation_id: str) -> None:
        self.path = path
        self._stream = stream
        self._conversation_id = conversation_id
        self._seq = 0

    @classmethod
    def create(cls, path: Path, *, conversation_id: str) -> Transcript:
        """Create the file (and its directory); an existing file is an error, never overwritten."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise TranscriptError(f"cannot create transcript {path}: {exc.strerror}") from None
        stream = os.fdopen(fd, "w", encoding="utf-8")
        return cls(path=path, stream=stream, conversation_id=conversation_id)

    def record(self, event: Event) -> None:
        """Append one event, flushed at once so a crash keeps everything before it."""
        line = {
            "seq": self._seq,
            "ts": round(time.time(), 3),
            "conversation_id": self._conversation_id,
            **event.model_dump(mode="json"),
        }
        self._seq += 1
        self._stream.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Flush to disk and close (idempotent)."""
        if self._stream.closed:
            return
        self._stream.flush()
        os.fsync(self._stream.fileno())
        self._stream.close()

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_transcript(path: Path) -> Iterator[Event]:
    """The events of a transcript file, in order; a damaged line is a `TranscriptError`.

    Event types this version does not know are skipped, so a newer file still replays.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {exc.strerror}") from None
    for number, data in enumerate(raw.splitlines(), start=1):
        if not data.strip():
            continue
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError:
            raise TranscriptError(f"{path}:{number}: not UTF-8 text") from None
        try:
            event = parse_event(json.loads(line))
        except ValueError as exc:
            detail = "not a JSON line" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise TranscriptError(f"{path}:{number}: {detail}") from None
        if event is not None:
            yield event
