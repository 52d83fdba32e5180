"""`RunManager`: this replica's live conversations, its run places and the workers of questions.

Every run of this replica (a question, a `/v1/execute` call, an MCP execution)
takes a place with `admit` when its `StoreRecorder` admits it: at most
`max_running` + `max_queued`, past that the post is a 503 with `Retry-After`.
The place holds the run's `Cancellation` token until the run ends, so
`cancel(run_id)` (the client's) and `cancel_all()` (the drain after SIGTERM)
reach every kind of run the same way: the core stops what the token guards
(the model request in flight, the running call, the sandbox).

A posted question is handed to a bounded pool of `max_running` workers; a
worker calls `Conversation.ask` (or `answer`, continuing a run that ended
`needs_input`), one question at a time per conversation, with the store's
recorder, and stores every event as it comes (`EventLog`). A conversation idle
for `idle_timeout` releases its sandbox (`release_idle`, the core's
`Workspace.discard_if_idle`); its next question restores its state in a fresh
one and is told so.
"""

from __future__ import annotations

import logging
import mimetypes
import os
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbx.agent.core.conversation import Conversation
from sbx.agent.core.events import Event, RunEnd, RunError
from sbx.agent.core.hosting.eventlog import EventLog, artifact_name, public_event
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import ArtifactRow
from sbx.agent.core.hosting.store.models import Conversation as ConversationRow
from sbx.agent.core.hosting.tenant_view import incident, run_message
from sbx.agent.core.problem import unavailable
from sbx.agent.core.run_recorder import RunOutcome, RunTicket, failed_outcome
from sbx.agent.model.cancellation import Cancellation

if TYPE_CHECKING:
    from sbx.agent.core.hosting.recorder import StoreRecorder

logger = logging.getLogger(__name__)

TERMINAL_EVENTS = ("run_end", "run_error")
RELEASE_TICK_S = 2.0
"""Seconds one `release_idle` call spends releasing (each release may first take a snapshot
of the state, up to `snapshot.DUMP_TIMEOUT_S`); the rest are released at the next call, so
the housekeeper's heartbeat is never late by more than about these two."""


@dataclass(kw_only=True, eq=False)
class Live:
    """A conversation held by this replica."""

    id: str
    principal: str
    conversation: Conversation
    output_root: Path
    lock: threading.Lock = field(default_factory=threading.Lock)
    run_id: str | None = None
    """The run executing now."""
    last_event: dict[str, Any] | None = None
    """The running run's `run_end` or `run_error`, held until its status is stored with it."""
    end_message: str | None = None
    """How the running run's end reads for its tenant, once its `run_end` was worded:
    the stored run says the same (one incident id, not two)."""


class RunManager:
    """Live conversations and their runs on this replica (see the module docstring)."""

    def __init__(self, *, db: Database, events: EventLog, max_running: int,
                 max_queued: int) -> None:
        self.db = db
        self.events = events
        self.max_running = max_running
        self.max_queued = max_queued
        self._executor = ThreadPoolExecutor(max_workers=max_running, thread_name_prefix="sbx-run")
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._tokens: dict[str, Cancellation] = {}
        self._live: dict[str, Live] = {}

    # ------------------------------------------------------------ conversations

    def attach(self, conversation: Conversation, *, principal: str) -> Live:
        """Hold `conversation` here: its events go to the store."""
        live = Live(id=conversation.id, principal=principal, conversation=conversation,
                    output_root=conversation.spec.output_root)
        conversation.subscribe(lambda event: self._on_event(live, event))
        with self._lock:
            self._live[live.id] = live
        return live

    def get(self, conversation_id: str) -> Live | None:
        """The live conversation, if this replica holds it."""
        with self._lock:
            return self._live.get(conversation_id)

    def close_conversation(self, conversation_id: str) -> None:
        """Cancel its run if any, then remove its sandbox (the run's worker finishes it)."""
        with self._lock:
            live = self._live.pop(conversation_id, None)
        if live is None:
            return
        if live.run_id is not None:
            self.cancel(live.run_id)
        with live.lock:  # waits for the cancelled run to end
            live.conversation.close()

    def holders(self) -> list[Live]:
        """The conversations here that hold a sandbox (running or idle): `sandbox_share`."""
        with self._lock:
            return [live for live in self._live.values()
                    if live.conversation.workspace.holds_sandbox or live.run_id]

    def snapshot_bytes(self, principal: str) -> int:
        """Bytes of the state snapshots this replica keeps for `principal`'s conversations.

        Counted in `storage_bytes` beside what the store holds; a snapshot lives on the
        replica that took it and goes with its conversation.
        """
        with self._lock:
            held = [live.conversation.workspace.snapshot for live in self._live.values()
                    if live.principal == principal]
        return sum(snapshot.size for snapshot in held if snapshot is not None)

    def without_sandbox(self) -> list[str]:
        """The principals of conversations here with no sandbox and no run: coming demand."""
        with self._lock:
            return [live.principal for live in self._live.values()
                    if not live.conversation.workspace.holds_sandbox and live.run_id is None]

    def release_idle(self, idle_s: float, only: frozenset[str] | None = None,
                     reason: str | None = None) -> list[str]:
        """Remove the sandboxes of conversations idle for `idle_s` (of `only`); their ids."""
        with self._lock:  # a run a worker has picked up is not idle, even before it starts
            candidates = [live for live in self._live.values()
                          if live.run_id is None and (only is None or live.id in only)]
        released: list[str] = []
        started = time.monotonic()
        for live in candidates:  # each may first take a snapshot: the rest wait a tick
            if time.monotonic() - started > RELEASE_TICK_S:
                break
            if live.conversation.workspace.discard_if_idle(idle_s, reason=reason):
                released.append(live.id)
        if released:
            with self.db.write() as session:
                for conversation_id in released:
                    row = session.get(ConversationRow, conversation_id)
                    if row is not None and row.status == "active":
                        row.sandbox = "released"
        return released

    # ------------------------------------------------------------ runs

    def admit(self, run_id: str, cancel: Cancellation) -> None:
        """Take a place for one run (running or queued), or 503 when the queue is full."""
        with self._lock:
            if len(self._tokens) >= self.max_running + self.max_queued:
                raise unavailable(
                    f"this replica is running {self.max_running} runs with {self.max_queued} "
                    "waiting; retry shortly", retry_after=5.0)
            self._tokens[run_id] = cancel

    def release(self, run_id: str) -> None:
        """Give back the place `admit` took (the run ended, or was not submitted)."""
        with self._idle:
            self._tokens.pop(run_id, None)
            self._idle.notify_all()

    def submit(self, live: Live, ticket: RunTicket, recorder: StoreRecorder, text: str, *,
               answering: bool = False) -> None:
        """Queue an admitted question (or, `answering`, the answer to a pending one)."""
        self.events.open(ticket.run_id)
        self._executor.submit(self._execute, live, ticket, recorder, text, answering)

    def cancel(self, run_id: str) -> bool:
        """Cancel a queued or running run held here (any kind); False when it is not here."""
        with self._lock:
            token = self._tokens.get(run_id)
        if token is None:
            return False
        token.cancel()
        return True

    def cancel_all(self, reason: str | None = None) -> int:
        """Cancel every queued and running run (the drain's last step); how many."""
        with self._lock:
            tokens = list(self._tokens.values())
        for token in tokens:
            token.cancel(reason)
        return len(tokens)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no run is queued or running (or `timeout` seconds pass)."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._tokens, timeout=timeout)

    def sandboxes_held(self) -> int:
        """Conversations here whose sandbox is in use or kept for their next question."""
        with self._lock:
            return sum(1 for live in self._live.values()
                       if live.conversation.workspace.holds_sandbox or live.run_id)

    @property
    def busy(self) -> int:
        """Runs queued or running."""
        with self._lock:
            return len(self._tokens)

    def shutdown(self) -> None:
        """Cancel what runs, wait for the workers, remove every sandbox."""
        self.cancel_all()
        self._executor.shutdown(wait=True, cancel_futures=False)
        with self._lock:
            lives, self._live = list(self._live.values()), {}
        for live in lives:
            try:
                live.conversation.close()
            except Exception:
                logger.warning("closing conversation %s failed", live.id, exc_info=True)

    # ------------------------------------------------------------ internals

    def _execute(self, live: Live, ticket: RunTicket, recorder: StoreRecorder, text: str,
                 answering: bool) -> None:
        """A worker: the question (cancelled while queued, it ends at once), recorded."""
        try:
            with live.lock:
                live.last_event, live.end_message = None, None
                live.run_id = ticket.run_id
                conversation, heard = live.conversation, _Relay(self, live, recorder)
                try:
                    if answering:
                        conversation.answer(text, ticket=ticket, recorder=heard)
                    else:
                        conversation.ask(text, ticket=ticket, recorder=heard)
                except Exception as exc:  # the sandbox, the host or the audit log failed
                    logger.warning("run %s failed: %s", ticket.run_id, type(exc).__name__)
                    if not heard.done:  # it failed before the core could record it
                        heard.finished(ticket, failed_outcome(exc))
                finally:
                    live.run_id = None
        except Exception:
            logger.exception("run %s could not be recorded", ticket.run_id)
        finally:
            live.conversation.question.unclaim(ticket.run_id)  # `answer` took it, unless it failed
            self.release(ticket.run_id)

    def _on_event(self, live: Live, event: Event) -> None:
        """The conversation's sink: store the client's view of each run event, in order.

        The running run's `run_end` (or `run_error`) waits for the run's recorder,
        which stores it with the run's status in one transaction.
        """
        run_id = live.run_id or event.run_id
        if run_id is None:
            return  # conversation-level (conversation_start): the API shows the conversation
        if isinstance(event, RunEnd):  # worded for the tenant, once
            live.end_message = run_message(event.status, event.message, run_id)
            event = event.model_copy(update={"message": live.end_message})
        try:
            data = public_event(event, output_dir=live.output_root / run_id)
            if data.get("type") in TERMINAL_EVENTS and run_id == live.run_id:
                live.last_event = data
                return
            self.events.append(run_id, live.principal, data)
        except Exception:  # never let the store drop the subscriber (and every later event)
            logger.exception("event of run %s could not be stored", run_id)


class _Relay:
    """A question's recorder: the run's terminal event stored with its end, in one transaction.

    A run that raised (or never reached the loop) has no `run_end` or `run_error`
    of its own; the client's event stream must still end.
    """

    def __init__(self, manager: RunManager, live: Live, inner: StoreRecorder) -> None:
        self.manager = manager
        self.live = live
        self.inner = inner
        self.done = False
        """`finished` or `withdrawn` was heard."""

    def admitted(self, ticket: RunTicket) -> None:
        """Admitted already, when it was posted."""

    def started(self, ticket: RunTicket) -> None:
        """The row is `running`."""
        self.inner.started(ticket)

    def finished(self, ticket: RunTicket, outcome: RunOutcome) -> None:
        """The run's terminal event (made up when it has none) and its end, stored together."""
        live = self.live
        if outcome.error is not None:  # the detail goes to the operator's log only
            outcome = replace(outcome, message=incident(f"run {ticket.run_id}", outcome.error),
                              error=None)
        if live.last_event is None:
            event: Event = (RunError(run_id=ticket.run_id, error=outcome.message)
                            if outcome.status == "error" else
                            RunEnd(run_id=ticket.run_id, status=outcome.status,
                                   message=outcome.message))
            self.manager._on_event(live, event)  # worded and held like the run's own
        last, live.last_event = live.last_event, None
        if live.end_message is not None:  # as its run_end was worded
            outcome = replace(outcome, message=live.end_message)
        self.done = True
        live.run_id = None  # an answer posted on seeing the end finds no run in flight
        self.inner.finished(ticket, outcome, last_event=last)

    def withdrawn(self, ticket: RunTicket) -> None:
        """Nothing ran (its row goes, and any end it had with it)."""
        self.done = True
        self.live.last_event = None
        self.inner.withdrawn(ticket)


def artifact_row(path: str, output_dir: Path, run_id: str, principal: str) -> ArtifactRow | None:
    """A stored artifact for a host path inside the run's output directory (else None)."""
    name = artifact_name(path, output_dir)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or name.startswith("..") or Path(name).is_absolute():
        return None
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    return ArtifactRow(run_id=run_id, principal=principal, name=name, path=str(path),
                       size=info.st_size, content_type=content_type)
