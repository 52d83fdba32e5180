"""The run's transcript: every event as one JSON line, written as it happens.

The loop reports what happens as events (plain dicts with a `type`); the
transcript writes each one, and the live progress display renders the same
events, so `sbx replay` can re-render a past run from the file alone.

    run_start    run id, question, model, endpoint, prompt version, budget, data
    message      a message the harness added (system prompt, question, notices)
    model_reply  the assistant message (text and tool calls), usage, timing
    tool_result  one observation exactly as the model received it, status, timing, artifacts
    compaction   which older observations were shortened before a request
    run_end      the status, the answer (completed only), why, totals
    run_error    an operator error stopped the run (engine, audit log)

The transcript keeps full payloads: it is the run's record, like the audit
log, and unlike ordinary logs (G15). The API key is never part of any event.
Files are created with mode 0600 and never overwritten.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

Event = dict[str, Any]
EventSink = Callable[[Event], None]

MAX_FIELD_CHARS = 4 * 1024 * 1024
"""Longest string one event field keeps; the sources' own caps are far lower."""
_SURROGATES = re.compile("[\ud800-\udfff]")


class TranscriptError(Exception):
    """The transcript cannot be written or read; the message names the file (and line)."""


class Transcript:
    """An open transcript file for one run; `record` is the loop's event sink."""

    def __init__(self, *, path: Path, stream: IO[str], run_id: str) -> None:
        self.path = path
        self._stream = stream
        self._run_id = run_id
        self._seq = 0

    @classmethod
    def create(cls, path: Path, *, run_id: str) -> Transcript:
        """Create the file (and its directory); an existing file is an error, never overwritten."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise TranscriptError(f"cannot create transcript {path}: {exc.strerror}") from None
        return cls(path=path, stream=os.fdopen(fd, "w", encoding="utf-8"), run_id=run_id)

    def record(self, event: Event) -> None:
        """Append one event, flushed at once so a crash keeps everything before it."""
        line = {"seq": self._seq, "ts": round(time.time(), 3), "run_id": self._run_id, **event}
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
    """The events of a transcript file, in order; a damaged line is a `TranscriptError`."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise TranscriptError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                raise TranscriptError(f"{path}:{number}: not a JSON line") from None
            if not isinstance(event, dict) or "type" not in event:
                raise TranscriptError(f"{path}:{number}: not a transcript event")
            yield event


def fanout(*sinks: EventSink) -> EventSink:
    """One sink that feeds each event to every sink, in order."""

    def emit(event: Event) -> None:
        for sink in sinks:
            sink(event)

    return emit
