"""The conversation's transcript: every event as one JSON line, written as it happens.

The loop and the conversation report what happens as typed events
(`sbx.agent.core.events`); the transcript writes each one, and the live progress
display renders the same events, so `sbx replay` can re-render a past
conversation (every run of it) from the file alone.

The transcript keeps full payloads: it is the record, like the audit log, and
unlike ordinary logs. The API key is never part of any event. Files are
created with mode 0600 and never overwritten.

What it keeps is bounded where it is produced (`AgentSettings.max_answer_chars`
and `max_argument_bytes` for the model's output, the sandbox's and tools' own
caps for observations); as a last bound, any one string over
`MAX_FIELD_CHARS` is cut here with a marker. Text that cannot be encoded as
UTF-8 (a lone surrogate, which JSON's `\ud800` escape can carry) is written
with U+FFFD in its place: recording an event never fails on its content.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from sbx.agent.core.events import LIVE_ONLY, Event, parse_event
from sbx.sandbox.errors import SbxError

MAX_FIELD_CHARS = 4 * 1024 * 1024
"""Longest string one event field keeps; the sources' own caps are far lower."""
_SURROGATES = re.compile("[\ud800-\udfff]")


class TranscriptError(SbxError):
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

    @classmethod
    def reopen(cls, path: Path, *, conversation_id: str, next_seq: int) -> Transcript:
        """Append to an existing transcript (a run continued after `needs_input`); no symlinks."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise TranscriptError(f"cannot append to transcript {path}: {exc.strerror}") from None
        stream = os.fdopen(fd, "a", encoding="utf-8")
        record = cls(path=path, stream=stream, conversation_id=conversation_id)
        record._seq = next_seq
        return record

    def record(self, event: Event) -> None:
        """Append one event, flushed at once so a crash keeps everything before it.

        Events only for watching (`LIVE_ONLY`: a model still waited on) are not
        written: the events that follow them are the record.
        """
        if event.type in LIVE_ONLY:
            return
        line = {
            "seq": self._seq,
            "ts": round(time.time(), 3),
            "conversation_id": self._conversation_id,
            **event.model_dump(mode="json"),
        }
        self._seq += 1
        text = json.dumps(_bounded(line), ensure_ascii=False, default=str)
        self._stream.write(_SURROGATES.sub("\ufffd", text) + "\n")
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


def _bounded(value: Any) -> Any:
    """A copy of a JSON-like value whose strings are at most `MAX_FIELD_CHARS` long."""
    if isinstance(value, str):
        if len(value) <= MAX_FIELD_CHARS:
            return value
        cut = len(value) - MAX_FIELD_CHARS
        return f"{value[:MAX_FIELD_CHARS]}\n[transcript: {cut} more characters not kept]"
    if isinstance(value, dict):
        return {key: _bounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_bounded(item) for item in value]
    return value


def read_transcript(path: Path) -> Iterator[Event]:
    """The events of a transcript file, in order; a damaged line is a `TranscriptError`.

    Event types this version does not know are skipped, so a newer file still replays.
    """
    for _, event in numbered_events(path):
        yield event


def numbered_events(path: Path) -> Iterator[tuple[int, Event]]:
    """(line number, event) for each event line; damage names the file and the line.

    A transcript is a file anyone may have edited: each line must be UTF-8, JSON,
    and shaped as its event type says (`sbx.agent.core.events.parse_event`).
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
        except json.JSONDecodeError:
            raise TranscriptError(f"{path}:{number}: not a JSON line") from None
        except RecursionError:
            raise TranscriptError(f"{path}:{number}: nested too deeply") from None
        except ValueError as exc:
            raise TranscriptError(f"{path}:{number}: {exc}") from None
        if event is not None:
            yield number, event
