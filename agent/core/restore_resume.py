"""Take up a conversation from its record in a new process (or on another replica).

`sbx chat --resume TRANSCRIPT`, the service after a restart and a replica
adopting the conversation of one that drained or died all come here: the
transcript gives the conversation's id, data, messages (each event is there)
and, if its last run ended `needs_input`, the question waiting for an answer.
The sandbox died with the process that held it, so when code had run the
conversation's first run restores it by replay (`sbx.agent.core.restore`); new
events are appended to the same transcript.

A transcript is a file anyone may have edited: every line is validated as its
event type (`sbx.agent.core.transcript`), and its code only ever runs in the sandbox,
through the gate, under the principal of the face that resumes it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sbx.agent.core.app import App
from sbx.agent.core.asking import PendingInput
from sbx.agent.core.conversation import Conversation, ConversationSpec, settle
from sbx.agent.core.events import ConversationStart, MessageAdded, ModelReplied, RunEnd, ToolResult
from sbx.agent.core.limits_request import LimitsRequest
from sbx.agent.core.settings import Endpoint
from sbx.agent.core.transcript import TranscriptError, numbered_events


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


def read_resumable(path: Path) -> Resumable:
    """The conversation of the transcript at `path` (a `TranscriptError` names a bad line)."""
    conversation_id: str | None = None
    data: tuple[Path, ...] = ()
    messages: list[dict[str, Any]] = []
    pending: PendingInput | None = None
    executions = count = 0
    for _, event in numbered_events(path):
        count += 1
        match event:
            case ConversationStart():
                conversation_id = event.conversation_id
                data = tuple(Path(item) for item in event.data)
            case MessageAdded() | ModelReplied():
                messages.append(dict(event.message))
            case ToolResult():
                messages.append({"role": "tool", "tool_call_id": event.call_id,
                                 "content": event.content})
                executions += event.name == "execute_python"
            case RunEnd():
                messages = settle(messages, event.status)
                question = getattr(event, "question", None)
                asked = event.status == "needs_input" and isinstance(question, str)
                pending = PendingInput(run_id=event.run_id or "", question=str(question)
                                       ) if asked else None
    if conversation_id is None:
        raise TranscriptError(f"{path}: no conversation_start: not a transcript of sbx chat")
    messages = settle(messages, "interrupted")  # a run its process died in has no run_end
    return Resumable(path=path, conversation_id=conversation_id, data=data, messages=messages,
                     pending=pending, executions=executions, next_seq=count)


def resume(
    app: App, record: Resumable, *, spec: ConversationSpec, endpoint: Endpoint,
    data: tuple[Path, ...] | None = None, limits: LimitsRequest | None = None,
) -> Conversation:
    """Reopen the conversation of `record`: its id, its data, its messages; restore at first use.

    `spec` gives the face's principal, output and operator; `data` replaces the
    recorded paths (a replica has its own copy of the datasets).
    """
    paths = record.data if data is None else data
    spec = replace(spec, conversation_id=record.conversation_id, data=paths)
    conversation = app.reopen(spec, endpoint=endpoint, transcript=record.path,
                              next_seq=record.next_seq, limits=limits)
    conversation.restore(record.messages, record.pending, lost=record.executions > 0)
    return conversation
