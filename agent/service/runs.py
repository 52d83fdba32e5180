"""`RunManager`: this replica's live conversations and the worker threads that run their questions.

A posted question becomes a `queued` run row at once (the client gets its id)
and is handed to a bounded pool of `max_running` workers; at most
`max_queued` more may wait, past that the post is a 503 with `Retry-After`.
A worker calls `Conversation.ask` (one question at a time per conversation),
stores every event as it comes (`EventLog`), then the result: status,
answer, usage and sandbox totals, CPU seconds (for the daily quota) and the
artifacts. `finished()` is where each run's outcome is known; the observer
hears it there.

Cancelling a run (the client's `cancel`, or the drain after SIGTERM) sets the
conversation's cancel flag and removes its sandbox; the model client checks
the flag before and after every request and raises `KeyboardInterrupt`,
which is how the agent loop is told to stop (`cancelled`, as with Ctrl-C).
A conversation idle for `idle_timeout` releases its sandbox
(`release_idle`); its next question gets a fresh one and is told so.
"""

from __future__ import annotations

import logging
import mimetypes
import os
import stat
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbx.agent.core.conversation import Conversation
from sbx.agent.core.events import Event, RunEnd, RunError
from sbx.agent.core.settings import AgentSettings, Endpoint
from sbx.agent.core.state import RunResult
from sbx.agent.model.client import ModelClient, ModelReply
from sbx.agent.service.eventlog import EventLog, artifact_name, public_event
from sbx.agent.service.outcomes import Observer, notify
from sbx.agent.service.problems import unavailable
from sbx.agent.service.store.db import Database
from sbx.agent.service.store.models import ArtifactRow, Run
from sbx.agent.service.store.models import Conversation as ConversationRow
from sbx.agent.service.tenant_view import incident

logger = logging.getLogger(__name__)

TERMINAL_EVENTS = ("run_end", "run_error")


class CancellableModel(ModelClient):
    """A model client that ends the run (`KeyboardInterrupt`) once its flag is set."""

    cancelled: threading.Event
    """Set by `RunManager.cancel`; given by `for_flag`."""

    @classmethod
    def for_flag(cls, endpoint: Endpoint, settings: AgentSettings, flag: threading.Event
                 ) -> CancellableModel:
        """A client for `endpoint` watching `flag`."""
        client = cls.connect(endpoint, settings)
        if not isinstance(client, CancellableModel):  # pragma: no cover - connect uses cls
            raise TypeError("connect did not build a CancellableModel")
        client.cancelled = flag
        return client

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], *,
                 timeout: float) -> ModelReply:
        """The request, unless cancelled before it or while it ran (the reply is dropped)."""
        if self.cancelled.is_set():
            raise KeyboardInterrupt
        reply = super().complete(messages, tools, timeout=timeout)
        if self.cancelled.is_set():
            raise KeyboardInterrupt
        return reply


@dataclass(kw_only=True, eq=False)
class Live:
    """A conversation held by this replica."""

    id: str
    principal: str
    conversation: Conversation
    output_root: Path
    cancel: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    run_id: str | None = None
    """The run executing now."""
    terminal_seen: bool = False
    """The running run's `run_end` or `run_error` event was stored."""
    holds_sandbox: bool = False
    last_used: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a run ended, as stored."""

    status: str
    message: str
    answer: str | None = None
    result: dict[str, Any] | None = None
    cpu_seconds: float = 0.0
    artifacts: tuple[str, ...] = ()


class RunManager:
    """Live conversations and their runs on this replica (see the module docstring)."""

    def __init__(self, *, db: Database, events: EventLog, observer: Observer,
                 max_running: int, max_queued: int) -> None:
        self.db = db
        self.events = events
        self.observer = observer
        self.max_running = max_running
        self.max_queued = max_queued
        self._executor = ThreadPoolExecutor(max_workers=max_running, thread_name_prefix="sbx-run")
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._live: dict[str, Live] = {}
        self._queued: dict[str, Live] = {}
        self._cancel_queued: set[str] = set()

    # ------------------------------------------------------------ conversations

    def attach(self, conversation: Conversation, *, principal: str, endpoint: Endpoint,
               settings: AgentSettings) -> Live:
        """Hold `conversation` here: its events go to the store, its model can be cancelled."""
        live = Live(id=conversation.id, principal=principal, conversation=conversation,
                    output_root=conversation.spec.output_root)
        model = CancellableModel.for_flag(endpoint, settings, live.cancel)
        conversation.model.close()
        conversation.model = model
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
            self._cancel_live(live)
        with live.lock:  # waits for the cancelled run to end
            live.conversation.close()

    def holders(self) -> list[Live]:
        """The conversations here that hold a sandbox (running or idle): `sandbox_share`."""
        with self._lock:
            return [live for live in self._live.values() if live.holds_sandbox or live.run_id]

    def release_idle(self, idle_s: float, only: frozenset[str] | None = None) -> list[str]:
        """Remove the sandboxes of conversations idle for `idle_s` (of `only`); their ids."""
        released = []
        now = time.monotonic()
        with self._lock:
            candidates = [live for live in self._live.values()
                          if live.holds_sandbox and live.run_id is None
                          and now - live.last_used >= idle_s
                          and (only is None or live.id in only)]
        for live in candidates:
            if not live.lock.acquire(blocking=False):
                continue
            try:
                if live.run_id is None and live.holds_sandbox:
                    live.conversation.workspace.discard(reason="an idle release")
                    live.holds_sandbox = False
                    released.append(live.id)
            finally:
                live.lock.release()
        if released:
            with self.db.write() as session:
                for conversation_id in released:
                    row = session.get(ConversationRow, conversation_id)
                    if row is not None and row.status == "active":
                        row.sandbox = "released"
        return released

    # ------------------------------------------------------------ runs

    def admit(self) -> None:
        """Take a place for one run (running or queued), or 503 when the queue is full."""
        with self._lock:
            if self._pending >= self.max_running + self.max_queued:
                raise unavailable(
                    f"this replica is running {self.max_running} runs with {self.max_queued} "
                    "waiting; retry shortly", retry_after=5.0)
            self._pending += 1

    def release(self) -> None:
        """Give back a place taken by `admit` (a run that was not submitted, or ended)."""
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def submit(self, live: Live, run_id: str, question: str) -> None:
        """Queue a run admitted with `admit`; it starts when a worker is free."""
        with self._lock:
            self._queued[run_id] = live
        self._executor.submit(self._execute, live, run_id, question)

    def cancel(self, run_id: str) -> bool:
        """Cancel a queued or running run held here; False when it is not here."""
        with self._lock:
            if run_id in self._queued:
                self._cancel_queued.add(run_id)
                return True
            live = next((lv for lv in self._live.values() if lv.run_id == run_id), None)
        if live is None:
            return False
        self._cancel_live(live)
        return True

    def cancel_all(self) -> int:
        """Cancel every queued and running run (the drain's last step); how many."""
        with self._lock:
            self._cancel_queued.update(self._queued)
            running = [live for live in self._live.values() if live.run_id is not None]
            count = len(self._queued) + len(running)
        for live in running:
            self._cancel_live(live)
        return count

    def wait_idle(self, timeout: float) -> bool:
        """Block until no run is queued or running (or `timeout` seconds pass)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout=timeout)

    def sandboxes_held(self) -> int:
        """Conversations here whose sandbox is in use or kept for their next question."""
        with self._lock:
            return sum(1 for live in self._live.values() if live.holds_sandbox or live.run_id)

    @property
    def busy(self) -> int:
        """Runs queued or running."""
        with self._lock:
            return self._pending

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

    def _cancel_live(self, live: Live) -> None:
        live.cancel.set()
        live.conversation.cancel()

    def _execute(self, live: Live, run_id: str, question: str) -> None:
        """A worker: run the question unless it was cancelled while queued, then store it."""
        try:
            with live.lock:
                with self._lock:
                    self._queued.pop(run_id, None)
                    skipped = run_id in self._cancel_queued
                    self._cancel_queued.discard(run_id)
                live.terminal_seen = False
                if skipped:
                    outcome = Outcome(status="cancelled", message="Cancelled before it started.")
                else:
                    outcome = self._ask(live, run_id, question)
                live.last_used = time.monotonic()
            self.finished(live, run_id, outcome)
        except Exception:
            logger.exception("run %s could not be recorded", run_id)
        finally:
            self.release()

    def _ask(self, live: Live, run_id: str, question: str) -> Outcome:
        live.cancel.clear()
        live.run_id = run_id
        self._mark(run_id, status="running", started_at=time.time())
        try:
            result = live.conversation.ask(question, run_id=run_id)
            live.holds_sandbox = result.status != "cancelled"
            return _outcome(result)
        except Exception as exc:  # the sandbox, the host or the audit log failed
            message = incident(f"run {run_id}", exc)  # the detail goes to the log only
            if not live.terminal_seen:
                self._on_event(live, RunError(run_id=run_id, error=message))
            live.holds_sandbox = False
            return Outcome(status="error", message=message)
        finally:
            live.run_id = None

    def finished(self, live: Live, run_id: str, outcome: Outcome) -> None:
        """Store how the run ended, its artifacts and CPU seconds; tell the observer."""
        if outcome.status == "cancelled" and not live.terminal_seen:
            event = RunEnd(run_id=run_id, status="cancelled", message=outcome.message)
            self._on_event(live, event, run_id=run_id)
        output_dir = live.output_root / run_id
        with self.db.write() as session:
            row = session.get(Run, run_id)
            if row is not None:
                row.status, row.message = outcome.status, outcome.message
                row.answer, row.result = outcome.answer, outcome.result
                row.cpu_seconds = outcome.cpu_seconds
                row.ended_at = time.time()
            for path in outcome.artifacts:
                artifact = artifact_row(path, output_dir, run_id, live.principal)
                if artifact is not None:
                    session.add(artifact)
            conversation = session.get(ConversationRow, live.id)
            if conversation is not None and conversation.status == "active":
                conversation.last_active_at = time.time()
                conversation.sandbox = "held" if live.holds_sandbox else "none"
        self.events.forget(run_id)
        self.events.hub.publish(run_id)
        notify(self.observer.run_finished, principal=live.principal, run_id=run_id,
               status=outcome.status, result=outcome.result)

    def _mark(self, run_id: str, **values: Any) -> None:
        with self.db.write() as session:
            row = session.get(Run, run_id)
            if row is not None:
                for name, value in values.items():
                    setattr(row, name, value)
        self.events.hub.publish(run_id)

    def _on_event(self, live: Live, event: Event, *, run_id: str | None = None) -> None:
        """The conversation's sink: store the client's view of each run event, in order."""
        run_id = run_id or live.run_id or event.run_id
        if run_id is None:
            return  # conversation-level (conversation_start): the API shows the conversation
        try:
            data = public_event(event, output_dir=live.output_root / run_id)
            if data.get("type") in TERMINAL_EVENTS:
                live.terminal_seen = True
            self.events.append(run_id, live.principal, data)
        except Exception:  # never let the store drop the subscriber (and every later event)
            logger.exception("event of run %s could not be stored", run_id)


def _outcome(result: RunResult) -> Outcome:
    data = result.as_dict()
    summary = {key: data[key] for key in ("turns", "tool_calls", "usage", "duration_s", "sandbox")}
    summary.update({key: data[key] for key in ("plan", "plan_pending") if key in data})
    return Outcome(
        status=result.status, message=result.message, answer=result.answer, result=summary,
        cpu_seconds=result.sandbox.cpu_seconds, artifacts=result.artifacts,
    )


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
