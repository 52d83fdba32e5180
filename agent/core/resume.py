"""Continue a run that ended `needs_input`, from its transcript, in a new process.

`sbx ask --continue RUN_ID "answer"` (and later the service) takes the run up
where it paused: the conversation's messages rebuilt from the transcript (each
event is there, so nothing else is needed), the same data (the paths the
conversation was opened with), the same conversation id, and the answer. The
sandbox of the paused run died with its process, so the continuation gets a
fresh one and the model is told its variables are gone (when code had run).
The continuation is appended to the same transcript, so the file shows both
parts; its `run_start` (transcript and audit) names the run it continues, and
the audit log keeps the answer (`user_answer`).

A transcript is a file anyone may have edited: every line is validated as its
event type (`sbx.agent.core.transcript`), and only the last run of the file, ended
`needs_input`, can be continued, once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sbx.agent.core.app import Answer, App
from sbx.agent.core.asking import PendingInput
from sbx.agent.core.conversation import Conversation, ConversationSpec, settle
from sbx.agent.core.events import (
    ConversationStart,
    EventSink,
    MessageAdded,
    ModelReplied,
    RunEnd,
    RunStart,
    ToolResult,
)
from sbx.agent.core.settings import Endpoint, SettingsError
from sbx.agent.core.transcript import Transcript, TranscriptError, numbered_events
from sbx.agent.core.workspace import check_data
from sbx.agent.model.client import ModelClient

MAX_SCANNED = 10_000
"""Transcripts looked at, at most, to find the one that holds a run id."""


@dataclass(frozen=True, kw_only=True)
class Paused:
    """A conversation whose last run waits for the user's answer, read from its transcript."""

    path: Path
    """The transcript."""
    conversation_id: str
    """The conversation the continuation joins."""
    data: tuple[Path, ...]
    """The data the conversation was opened with."""
    messages: list[dict[str, Any]]
    """The conversation as the model saw it, the paused run's question to the user included."""
    pending: PendingInput
    """The run and its question."""
    executions: int
    """Programs the conversation ran (its sandbox is gone: the model must be told)."""
    next_seq: int
    """The `seq` of the next transcript line."""


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


def read_paused(path: Path, run_id: str) -> Paused:
    """The conversation of `path`, whose last run must be `run_id`, ended `needs_input`."""
    conversation_id: str | None = None
    data: tuple[Path, ...] = ()
    messages: list[dict[str, Any]] = []
    last_start: str | None = None
    end: RunEnd | None = None
    executions = 0
    count = 0
    for _, event in numbered_events(path):
        count += 1
        match event:
            case ConversationStart():
                conversation_id = event.conversation_id
                data = tuple(Path(item) for item in event.data)
            case RunStart():
                last_start, end = event.run_id, None
            case MessageAdded() | ModelReplied():
                messages.append(dict(event.message))
            case ToolResult():
                messages.append({"role": "tool", "tool_call_id": event.call_id,
                                 "content": event.content})
                executions += event.name == "execute_python"
            case RunEnd():
                end = event
                messages = settle(messages, event.status)
    if conversation_id is None:
        raise TranscriptError(f"{path}: no conversation_start: not a transcript of sbx ask/chat")
    if last_start != run_id or end is None or end.run_id != run_id:
        raise SettingsError(f"run {run_id} is not the last run of {path}: it cannot be continued")
    question = getattr(end, "question", None)
    if end.status != "needs_input" or not isinstance(question, str):
        raise SettingsError(f"run {run_id} ended {end.status}, not needs_input: nothing to answer")
    return Paused(
        path=path, conversation_id=conversation_id, data=data, messages=messages,
        pending=PendingInput(run_id=run_id, question=question), executions=executions,
        next_seq=count,
    )


def continue_paused(
    app: App,
    paused: Paused,
    answer: str,
    *,
    spec: ConversationSpec,
    endpoint: Endpoint,
    progress: EventSink | None = None,
) -> Answer:
    """Run the continuation in a new sandbox and append it to the paused run's transcript.

    `spec` gives the face's principal, output and operator; the conversation id
    and the data are the paused conversation's.
    """
    check_data(paused.data)
    spec = replace(spec, conversation_id=paused.conversation_id, data=paused.data)
    record = Transcript.reopen(
        paused.path, conversation_id=paused.conversation_id, next_seq=paused.next_seq
    )
    model = ModelClient.connect(endpoint, app.config.settings)
    conversation = Conversation(
        spec=spec, config=app.config, model=model, audit=app.audit, transcript=record,
        pool=app.pool, image=app.image,
    )
    with conversation:
        if progress is not None:
            conversation.subscribe(progress)
        conversation.restore(paused.messages, paused.pending, lost=paused.executions > 0)
        result = conversation.answer(answer)
    output = spec.output or spec.output_root / result.run_id
    return Answer(
        result=result, conversation_id=conversation.id, transcript=paused.path,
        audit_log=app.audit.path, output_dir=output,
    )
