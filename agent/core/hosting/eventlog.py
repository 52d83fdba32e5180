"""Run events: numbered in order (the SSE ids), streamed from memory, stored in batches.

The conversation hands every transcript event to `EventLog.append` on the
run's worker thread. Each is reduced to the client's view (`public_event`: no
host paths, no model endpoint URL; then the `TenantView`: no secret), encoded
as JSON once, numbered with the next `seq` of its run, and:

- put on the run's `Feed` at once, for the streams on this replica (`sse`);
- stored with the other events of its step, in one transaction when the step
  ends (a `tool_result`), when `FLUSH_EVENTS` wait, or when the oldest waited
  `FLUSH_S`; the rest in the transaction that stores the run's final status.

A run's end (`run_end`, `run_error`) is held back from the feed until the
recorder has committed it with the run's status (`closing`, `stage`, then `ended`): a
client that sees the end finds the run ended, and may ask again at once. A
stream that reconnects with `Last-Event-ID: N` after the run has ended, or on
another replica, reads every event after N from the store; one there also
re-reads the store every `POLL_S` seconds.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from sbx.agent.core.events import Event
from sbx.agent.core.hosting.feed import Feed, sse_frame
from sbx.agent.core.hosting.observer import Observer, notify
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import EventRow
from sbx.agent.core.hosting.tenant_view import TenantView

POLL_S = 1.0
"""Seconds between a store-reading stream's reads when no local wake-up comes."""
STEP_ENDS = frozenset({"tool_result", "plan"})
"""Event types stored before they are streamed, with what came before them: the end of a
step, and a plan revision (the run resource shows the plan live, as the stream does)."""
ENDS = frozenset({"run_end", "run_error"})
FLUSH_EVENTS = 64
FLUSH_S = 1.0
_HIDDEN = ("base_url", "output_dir", "image")
_INSERT = insert(EventRow)
"""Built once, run on the transaction's connection: the ORM's bulk insert and a statement
built for each batch cost several times what SQLite spends storing it. The rows are in the
tenant's view already (`append`)."""


class EventHub:
    """Wakes asyncio streams from worker threads when their run has new events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def publish(self, run_id: str) -> None:
        """New events (or a new status) for `run_id`: wake its streams."""
        with self._lock:
            waiters = list(self._waiters.get(run_id, ()))
        for loop, wake in waiters:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # that stream's loop has closed
                pass

    @contextmanager
    def waiter(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever `run_id` is published (call inside the event loop)."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.setdefault(run_id, set()).add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                waiters = self._waiters.get(run_id)
                if waiters is not None:
                    waiters.discard(entry)
                    if not waiters:
                        del self._waiters[run_id]


@dataclass(eq=False)
class _RunEvents:
    """One run's numbering, its events not stored yet and its feed (None: write-through)."""

    next_seq: int
    feed: Feed | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[dict[str, Any]] = field(default_factory=list)
    held: list[tuple[int, str]] = field(default_factory=list)
    """Frames waiting for the run's end to be committed (its end, and anything after it)."""
    closing: bool = False
    """The final status's transaction took the pending events: later ones wait for `ended`."""


class EventLog:
    """Numbers, streams and stores run events (see the module docstring)."""

    def __init__(self, db: Database, hub: EventHub, observer: Observer,
                 view: Callable[[], TenantView] | None = None) -> None:
        self.db = db
        self.hub = hub
        self.observer = observer
        self.view = view
        """What tenants may read, applied once to each event before it is encoded."""
        self._lock = threading.Lock()
        self._runs: dict[str, _RunEvents] = {}

    def open(self, run_id: str) -> None:
        """A new run of this replica: its events go to a feed and are stored in batches."""
        with self._lock:
            self._runs.setdefault(run_id, _RunEvents(next_seq=1, feed=Feed(base=1)))

    def feed(self, run_id: str) -> Feed | None:
        """The run's feed while it runs here (None: read the store)."""
        with self._lock:
            state = self._runs.get(run_id)
        return state.feed if state is not None else None

    def append(self, run_id: str, principal: str, data: Mapping[str, Any]) -> int:
        """Number one event of `run_id` (already in the client's view), feed it; its seq.

        One run's events are numbered, fed and stored one at a time, in order (a
        reader that has seen seq N has seen every seq below N); different runs do
        not wait on each other here.
        """
        state = self._state(run_id)
        if self.view is not None:
            data = self.view().value(data)
        kind = str(data.get("type", "event"))
        text = json.dumps(data, ensure_ascii=False, default=str)
        with state.lock:
            seq = state.next_seq
            state.next_seq = seq + 1
            state.pending.append({"run_id": run_id, "seq": seq, "type": kind, "data": text,
                                  "created_at": time.time()})
            if not state.closing and (
                    state.feed is None or kind in STEP_ENDS or len(state.pending) >= FLUSH_EVENTS
                    or time.time() - state.pending[0]["created_at"] >= FLUSH_S):
                self._flush(state)
            if state.feed is not None:
                frame = sse_frame(seq, kind, text)
                if kind in ENDS or state.held:
                    state.held.append((seq, frame))
                else:
                    state.feed.add(seq, frame)
        notify(self.observer.event, principal=principal, run_id=run_id, event=data)
        self.hub.publish(run_id)
        return seq

    def closing(self, run_id: str) -> list[dict[str, Any]]:
        """The run is ending: its events not stored yet, for the final status's transaction.

        Called before that transaction opens (no lock is taken inside it). Any event
        that comes after this waits for `ended`, so the store still commits them in order.
        """
        with self._lock:
            state = self._runs.get(run_id)
        if state is None:
            return []
        with state.lock:
            rows, state.pending, state.closing = state.pending, [], True
        return rows

    @staticmethod
    def stage(session: Session, rows: list[dict[str, Any]]) -> None:
        """Add `closing`'s rows to `session`'s transaction; the caller commits, then `ended`."""
        if rows:
            session.connection().execute(_INSERT, rows)

    def ended(self, run_id: str) -> None:
        """The run's end is committed (or it is gone): feed what was held, end its streams."""
        with self._lock:
            state = self._runs.pop(run_id, None)
        if state is not None and state.feed is not None:
            with state.lock:
                if state.pending:  # after `closing`, or never closed (a run withdrawn)
                    self._flush(state)
                for seq, frame in state.held:
                    state.feed.add(seq, frame)
                state.held = []
                state.feed.end()
        self.hub.publish(run_id)

    def _state(self, run_id: str) -> _RunEvents:
        """The run's state; a run not opened here is numbered after what is stored, unbuffered."""
        with self._lock:
            state = self._runs.get(run_id)
        if state is None:
            fresh = _RunEvents(next_seq=self._last_seq(run_id) + 1, feed=None)
            with self._lock:
                state = self._runs.setdefault(run_id, fresh)
        return state

    def _flush(self, state: _RunEvents) -> None:
        """Store the run's waiting events in one transaction (its lock held: in order)."""
        if state.pending:
            with self.db.write() as session:
                session.connection().execute(_INSERT, state.pending)
            state.pending = []

    def _last_seq(self, run_id: str) -> int:
        with self.db.read() as session:
            last = session.scalar(select(func.max(EventRow.seq)).where(EventRow.run_id == run_id))
        return int(last) if last is not None else 0


def public_event(event: Event, *, output_dir: Path) -> dict[str, Any]:
    """The client's view of a transcript event: host paths become names, internals go.

    Data paths become the names the sandbox shows (`/data/<name>`), artifact
    paths their names relative to the run's output directory; the model
    endpoint's URL, the image and the output directory are not sent.
    """
    data = event.model_dump(mode="json")
    for hidden in _HIDDEN:
        data.pop(hidden, None)
    if isinstance(data.get("data"), list):
        data["data"] = [PurePosixPath(str(path)).name for path in data["data"]]
    if isinstance(data.get("artifacts"), list):
        data["artifacts"] = [artifact_name(str(path), output_dir) for path in data["artifacts"]]
    return data


def artifact_name(path: str, output_dir: Path) -> str:
    """An artifact's name relative to its run's output directory (its base name otherwise)."""
    try:
        return Path(path).relative_to(output_dir).as_posix()
    except ValueError:
        return Path(path).name
