"""Replicas sharing one store: who holds which conversation, who is alive, what a death leaves.

Each `sbx serve` process is a replica with a stable id (`--replica-id`,
default `<hostname>:<port>`) and the URL other replicas send clients to
(`--advertise-url`). It writes a heartbeat every `heartbeat` seconds. A
conversation lives on the replica that created it (its sandbox and messages
are in that process); a request for it reaching another replica is
redirected there (307). A replica whose heartbeat is older than
`stale_after` is dead: every replica's housekeeping marks its unfinished
runs `interrupted`, with a message that says so, and appends a `run_end`
event so that streams end; its conversations stay `active` with their
sandbox `lost` (with `[restore]` on; `interrupted` when off), and the next
question on any replica adopts and restores them. At start, a replica does
the same for whatever its own previous life left (a crash, kill -9).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from sbx.agent.core.app import owner_alive
from sbx.agent.core.hosting.store.db import Database, StoreError
from sbx.agent.core.hosting.store.models import (
    UNFINISHED_STATUSES,
    Conversation,
    EventRow,
    Replica,
    Run,
)
from sbx.agent.core.outcomes import run_outcome

KEPT = "the conversation goes on: the next question rebuilds its state on any replica (restore)"
"""What an interrupted run and its conversation say when restore keeps the conversation."""
GONE = "its sandbox, variables and messages are gone: start a new conversation"
"""What they say when restore is off."""
LOST = "lost"
"""`Conversation.sandbox` of a kept conversation whose replica is gone."""


@dataclass(frozen=True, kw_only=True)
class Identity:
    """This replica."""

    id: str
    """Stable across restarts, so a restart can recognise what its previous life left."""
    advertise_url: str
    """Where other replicas redirect clients for this replica's conversations."""


class Replicas:
    """Registration, heartbeat, liveness and recovery, against the shared store."""

    def __init__(self, db: Database, me: Identity, *, stale_after: float,
                 restore: bool = False) -> None:
        self.db = db
        self.me = me
        self.stale_after = stale_after
        self.hostname = socket.gethostname()
        self.restore = restore
        """A gone replica's conversations stay `active` (sandbox `lost`): the next question on
        any replica adopts and restores it (`agent.service.adopt`); else `interrupted`."""

    def register(self) -> None:
        """Claim the id; refuse when a live process elsewhere already serves under it."""
        now = time.time()
        with self.db.write() as session:
            row = session.get(Replica, self.me.id, with_for_update=True)
            if row is not None and row.state != "stopped" and self._alive(row, now):
                same_host_dead = row.hostname == self.hostname and not _pid_alive(row.pid)
                if not same_host_dead:
                    raise StoreError(
                        f"replica id {self.me.id!r} is in use by a live server "
                        f"({row.hostname}, pid {row.pid}); give this one another --replica-id")
            if row is None:
                row = Replica(id=self.me.id, started_at=now)
                session.add(row)
            row.advertise_url, row.hostname = self.me.advertise_url, self.hostname
            row.pid = os.getpid()
            row.state, row.started_at, row.heartbeat_at = "serving", now, now

    def heartbeat(self, state: str = "serving") -> None:
        """Tell the others this replica is alive (and whether it is draining)."""
        with self.db.write() as session:
            row = session.get(Replica, self.me.id)
            if row is not None:
                row.heartbeat_at, row.state = time.time(), state

    def owner(self, replica_id: str) -> Replica | None:
        """The replica row of `replica_id` when it is alive and serving, else None."""
        with self.db.read() as session:
            row = session.get(Replica, replica_id)
            if row is None or row.state != "serving" or not self._alive(row, time.time()):
                return None
            return row

    def recover_own(self) -> int:
        """At start: what a previous life of this replica left unfinished is interrupted."""
        return self._interrupt([self.me.id], "the server restarted while this was in "
                               "progress (it crashed or was killed)")

    def sweep(self) -> int:
        """Interrupt the conversations and runs of every dead replica; how many rows."""
        now = time.time()
        with self.db.read() as session:
            dead = session.scalars(select(Replica).where(
                Replica.id != self.me.id,
                or_(Replica.state == "stopped", Replica.heartbeat_at < now - self.stale_after),
            )).all()
            ids = [(row.id, row.heartbeat_at) for row in dead]
        count = 0
        for replica_id, beat in ids:
            when = datetime.fromtimestamp(beat, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            count += self._interrupt([replica_id], (
                f"the replica {replica_id!r} that held this conversation's sandbox stopped "
                f"(last heartbeat {when})"))
        return count

    def stop(self, cause: str) -> int:
        """At shutdown: this replica's active conversations are interrupted; mark it stopped."""
        count = self._interrupt([self.me.id], cause)
        self.heartbeat(state="stopped")
        return count

    def interrupt_conversation(self, conversation_id: str, message: str) -> None:
        """One conversation whose replica is gone, and its unfinished runs."""
        with self.db.write() as session:
            conversation = session.get(Conversation, conversation_id, with_for_update=True)
            if conversation is None or conversation.status != "active":
                return
            _interrupt_conversation(conversation, message)
            runs = session.scalars(select(Run).where(
                Run.conversation_id == conversation_id, Run.status.in_(UNFINISHED_STATUSES)
            ).with_for_update()).all()
            for run in runs:
                _interrupt_run(session, run, message)

    def _interrupt(self, replica_ids: list[str], cause: str) -> int:
        """Runs and conversations of gone replicas: what is kept says so (`cause; what now`)."""
        message = f"{cause}; {KEPT if self.restore else GONE}"
        with self.db.write() as session:
            runs = session.scalars(select(Run).where(
                Run.replica_id.in_(replica_ids), Run.status.in_(UNFINISHED_STATUSES)
            ).with_for_update()).all()
            for run in runs:
                _interrupt_run(session, run, message)
            conversations = session.scalars(select(Conversation).where(
                Conversation.replica_id.in_(replica_ids), Conversation.status == "active",
                Conversation.sandbox != LOST,
            ).with_for_update()).all()
            for conversation in conversations:
                if self.restore:  # kept: the next question restores it anywhere
                    conversation.sandbox, conversation.message = LOST, message
                else:
                    _interrupt_conversation(conversation, message)
            return len(runs) + len(conversations)

    def _alive(self, row: Replica, now: float) -> bool:
        return now - row.heartbeat_at < self.stale_after


def _interrupt_conversation(conversation: Conversation, message: str) -> None:
    conversation.status, conversation.message = "interrupted", message
    conversation.sandbox, conversation.closed_at = "none", time.time()


def _interrupt_run(session: Session, run: Run, message: str) -> None:
    """Mark the run interrupted and end its event stream with a `run_end` saying why."""
    run.status, run.message, run.ended_at = "interrupted", message, time.time()
    last = session.scalar(select(func.max(EventRow.seq)).where(EventRow.run_id == run.id))
    data = json.dumps({"type": "run_end", "run_id": run.id, "status": "interrupted",
                       "outcome": run_outcome("interrupted"), "message": message})
    session.add(EventRow(run_id=run.id, seq=(last or 0) + 1, type="run_end", data=data,
                         created_at=time.time()))


def _pid_alive(pid: int) -> bool:
    return owner_alive(f"{socket.gethostname()}:{pid}")
