"""Take up a conversation from its transcript in a new process (or on another replica).

    read_resumable       the conversation's id, data and messages, and the question its
                         last run asked the user when it ended `needs_input`
    App.resume           reopen it (`sbx chat --resume`, a restarted server, a replica
                         adopting one that drained or died); its first run restores the
                         sandbox's state by replay (`sbx.agent.core.restore`)
    read_paused          the same, checked to be a run waiting for an answer, and
    App.continue_paused  answer it (`sbx ask --continue RUN_ID "answer"`)

The sandbox died with the process that held it, so the model is told when its
variables are gone or were rebuilt. New events are appended to the same
transcript; a continuation's `run_start` (transcript and audit) names the run it
continues, and the audit log keeps the answer (`user_answer`).

A transcript is a file anyone may have edited: every line is validated as its
event type (`sbx.agent.core.transcript`); only the last run of the file, ended
`needs_input`, can be continued; its code only ever runs in the sandbox, through
the gate, under the principal of the face that resumes it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.agent.core.asking import PendingInput
from sbx.agent.core.conversation import settle
from sbx.agent.core.events import (
    ConversationStart,
    MessageAdded,
    ModelReplied,
    RunEnd,
    ToolResult,
)
from sbx.agent.core.history import history_of
from sbx.agent.core.settings import SettingsError
from sbx.agent.core.transcript import TranscriptError, numbered_events

MAX_SCANNED = 10_000
"""Transcripts looked at, at most, to find the one that holds a run id."""


@dataclass(frozen=True, kw_only=True)
class Resumable:
    """A conversation read back from its transcript."""

    path: Path
    """The transcript; the resumed conversation appends to it."""
    conversation_id: str
    """The id it keeps (transcript, audit, sandbox labels)."""
    data: tuple[Path, ...]
    """The data the conversation was opened with (host paths)."""
    messages: list[dict[str, Any]]
    """The conversation as the model last saw it, every tool call answered."""
    pending: PendingInput | None
    """The question the last run asked the user (it ended `needs_input`), else None."""
    executions: int
    """Programs the conversation ran (its sandbox is gone: they are replayed)."""
    next_seq: int
    """The `seq` of the next transcript line."""
    last_run: str | None = None
    """The last run's id (its `run_start`), None before any run."""
    last_status: str | None = None
    """How the last run ended (its `run_end`), None when it has no end (its process died)."""


def find_transcript(run_id: str, runs_dir: Path) -> Path:
    """The transcript of `run_id`: `<runs_dir>/<run_id>.jsonl`, else the one whose runs include it.

    A continued run's successor is recorded in the first run's file, so a later
    `--continue` of the successor looks through the directory for it.
    """
    direct = runs_dir / f"{run_id}.jsonl"
    if direct.is_file():
        return direct
    needle = json.dumps(run_id).encode()
    candidates = sorted(runs_dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in candidates[:MAX_SCANNED]:
        try:
            if needle in path.read_bytes():
                return path
        except OSError:
            continue
    raise SettingsError(f"no transcript of run {run_id} in {runs_dir}/ (pass --transcript FILE)")


def read_resumable(path: Path) -> Resumable:
    """The conversation of the transcript at `path` (a `TranscriptError` names a bad line).

    The messages are the model's view, read here; what happened (the last run, how it
    ended, what it asked, what ran) is the conversation's history (`sbx.agent.core.history`).
    """
    conversation_id: str | None = None
    data: tuple[Path, ...] = ()
    messages: list[dict[str, Any]] = []
    events = [event for _, event in numbered_events(path)]
    for event in events:
        match event:
            case ConversationStart():
                conversation_id = event.conversation_id
                data = tuple(Path(item) for item in event.data)
            case MessageAdded() | ModelReplied():
                messages.append(dict(event.message))
            case ToolResult():
                messages.append({"role": "tool", "tool_call_id": event.call_id,
                                 "content": event.content})
            case RunEnd():
                messages = settle(messages, event.status)
    if conversation_id is None:
        raise TranscriptError(f"{path}: no conversation_start: not a transcript of sbx ask/chat")
    messages = settle(messages, "interrupted")  # a run its process died in has no run_end
    runs = history_of(events, path=path).runs
    last = runs[-1] if runs else None
    asked = last.needs_input if last is not None else None
    pending = PendingInput(run_id=last.run_id, question=asked) if last and asked else None
    return Resumable(path=path, conversation_id=conversation_id, data=data, messages=messages,
                     pending=pending, executions=sum(len(run.executions) for run in runs),
                     next_seq=len(events), last_run=last.run_id if last else None,
                     last_status=last.status if last else None)


def read_paused(path: Path, run_id: str) -> Resumable:
    """The conversation of `path`, whose last run must be `run_id`, ended `needs_input`."""
    record = read_resumable(path)
    if record.last_run != run_id or record.last_status is None:
        raise SettingsError(f"run {run_id} is not the last run of {path}: it cannot be continued")
    if record.last_status != "needs_input" or record.pending is None:
        raise SettingsError(
            f"run {run_id} ended {record.last_status}, not needs_input: nothing to answer"
        )
    return record

