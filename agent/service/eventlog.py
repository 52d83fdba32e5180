"""Run events: stored in order with ids (the SSE ids), and a wake-up for the streams waiting.

The conversation hands every transcript event to `EventLog.append` on the
run's worker thread. Each is reduced to the client's view (`public_event`:
no host paths, no model endpoint URL), stored with the next `seq` of its run,
committed, and only then are local SSE streams woken (`EventHub`). A stream
that reconnects with `Last-Event-ID: N` reads every event after N from the
store, so nothing is lost between two connections, or across replicas: a
stream also re-reads the store every `POLL_S` seconds.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sbx.agent import Event
from sbx.agent.service.outcomes import Observer, notify
from sbx.agent.store.db import Database
from sbx.agent.store.models import EventRow

POLL_S = 1.0
"""Seconds between a stream's reads of the store when no local wake-up comes."""
_HIDDEN = ("base_url", "output_dir", "image")


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


class EventLog:
    """Stores run events in order and wakes their streams."""

    def __init__(self, db: Database, hub: EventHub, observer: Observer) -> None:
        self.db = db
        self.hub = hub
        self.observer = observer
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[threading.Lock, list[int]]] = {}

    def append(self, run_id: str, principal: str, data: Mapping[str, Any]) -> int:
        """Store one event of `run_id` (already in the client's view); return its seq.

        One run's events are stored one at a time, in order (a reader that has
        seen seq N has seen every seq below N); different runs do not wait on
        each other here.
        """
        with self._next_seq(run_id) as seq, self.db.write() as session:
            session.add(_row(run_id, seq, data))
        self.announce(run_id, principal, data)
        return seq

    def stage_last(self, session: Session, run_id: str, data: Mapping[str, Any]) -> int:
        """Add the run's last event to `session`'s transaction (the caller's); its seq.

        The transaction that stores the run's final status commits its `run_end`
        too, so a client that sees the end finds the run ended and may ask again
        at once. Nothing of the run follows it; the caller commits, then calls
        `announce`.
        """
        with self._next_seq(run_id) as seq:
            session.add(_row(run_id, seq, data))
        return seq

    @contextmanager
    def _next_seq(self, run_id: str) -> Iterator[int]:
        """The run's next seq, held (no other event of the run is stored) until the block ends."""
        with self._lock:
            lock, counter = self._runs.setdefault(run_id, (threading.Lock(), []))
        with lock:
            if not counter:
                counter.append(self._last_seq(run_id) + 1)
            seq = counter[0]
            counter[0] = seq + 1
            yield seq

    def announce(self, run_id: str, principal: str, data: Mapping[str, Any]) -> None:
        """A staged event was committed: tell the observer, wake the run's streams."""
        notify(self.observer.event, principal=principal, run_id=run_id, event=data)
        self.hub.publish(run_id)

    def forget(self, run_id: str) -> None:
        """The run ended: drop its counter."""
        with self._lock:
            self._runs.pop(run_id, None)

    def _last_seq(self, run_id: str) -> int:
        with self.db.read() as session:
            last = session.scalar(select(func.max(EventRow.seq)).where(EventRow.run_id == run_id))
        return int(last) if last is not None else 0


def _row(run_id: str, seq: int, data: Mapping[str, Any]) -> EventRow:
    return EventRow(run_id=run_id, seq=seq, type=str(data.get("type", "event")),
                    data=json.dumps(data, ensure_ascii=False, default=str), created_at=time.time())


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
