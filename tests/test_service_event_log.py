"""The event log feeds a run's streams from memory and stores its events per step; API keys
are cached with revocation honoured.

A real store (SQLite, and PostgreSQL for the cache), no server: what is written,
in how many transactions, and what a stream on this replica is given when.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event, select, update

import service_support
from conftest import wait_until
from sbx.agent.core.hosting.eventlog import EventHub, EventLog
from sbx.agent.core.hosting.observer import Observer
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.keys import KeyCache, create_key, revoke_key
from sbx.agent.core.hosting.store.models import ApiKey, EventRow, Run
from sbx.agent.core.hosting.tenant_view import TenantView
from sbx.tools.redact import Redactor

store = service_support.store
pg_cluster = service_support.pg_cluster
STEP = ("run_start", "message", "model_reply", "output_chunk", "tool_result")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    opened = Database.open(f"sqlite:///{tmp_path / 'sbx.db'}")
    opened.migrate()
    yield opened
    opened.close()


def _commits(db: Database) -> list[int]:
    """A list that grows by one at each transaction committed on `db`'s engine."""
    seen: list[int] = []
    event.listen(db.engine, "commit", lambda connection: seen.append(1))
    return seen


def _stored(db: Database, run_id: str) -> list[tuple[int, str]]:
    with db.read() as session:
        return [(row.seq, row.type) for row in session.scalars(
            select(EventRow).where(EventRow.run_id == run_id).order_by(EventRow.seq))]


def _run_row(db: Database, run_id: str) -> None:
    with db.write() as session:
        session.add(Run(id=run_id, kind="question", principal="key:ann", status="running",
                        replica_id="r-test",
                        question="q", message="", cpu_seconds=0.0, created_at=time.time()))


def test_a_step_is_stored_in_one_transaction_and_fed_at_once(db):
    view = TenantView(redactor=Redactor(secrets=("sk-hidden-123",)))
    log = EventLog(db, EventHub(), Observer(), view=lambda: view)
    log.open("run-1")
    commits = _commits(db)
    feed = log.feed("run-1")
    assert feed is not None
    for kind in STEP[:-1]:
        log.append("run-1", "key:ann", {"type": kind, "text": "key sk-hidden-123"})
        assert feed.since(0)[0][-1][0] == STEP.index(kind) + 1  # fed at once
    assert commits == []  # the step has not ended: nothing written
    assert _stored(db, "run-1") == []
    commits.clear()
    log.append("run-1", "key:ann", {"type": "tool_result", "text": "ok"})
    assert commits == [1]  # the whole step, one transaction
    assert _stored(db, "run-1") == list(enumerate(STEP, 1))
    frames, ended = feed.since(0)
    assert [seq for seq, _ in frames] == [1, 2, 3, 4, 5] and not ended
    assert "sk-hidden-123" not in "".join(frame for _, frame in frames)  # the view, once
    with db.read() as session:
        first = session.scalar(select(EventRow.data).where(EventRow.seq == 1))
    assert frames[0][1] == f"id: 1\nevent: run_start\ndata: {first}\n\n"  # one encoding
    assert json.loads(first)["text"] == "key [REDACTED]"


def test_a_runs_end_is_fed_only_once_it_is_committed_with_its_status(db):
    log = EventLog(db, EventHub(), Observer())
    _run_row(db, "run-2")
    log.open("run-2")
    for kind in STEP:
        log.append("run-2", "key:ann", {"type": kind})
    log.append("run-2", "key:ann", {"type": "model_reply"})
    log.append("run-2", "key:ann", {"type": "run_end", "status": "completed"})
    feed = log.feed("run-2")
    assert feed is not None
    frames, ended = feed.since(5)
    assert [seq for seq, _ in frames] == [6] and not ended  # the end waits for its status
    assert _stored(db, "run-2")[-1] == (5, "tool_result")

    commits = _commits(db)
    rows = log.closing("run-2")
    log.append("run-2", "key:ann", {"type": "tool_result"})  # late: waits for the end
    with db.write() as session:  # the recorder's transaction: the status and the rest
        session.get(Run, "run-2").status = "completed"
        log.stage(session, rows)
    assert commits == [1]
    assert _stored(db, "run-2")[-2:] == [(6, "model_reply"), (7, "run_end")]
    frames, ended = feed.since(5)
    assert [seq for seq, _ in frames] == [6] and not ended  # fed once `ended` is called
    log.ended("run-2")
    assert _stored(db, "run-2")[-1] == (8, "tool_result")  # after the end, in order
    frames, ended = feed.since(5)
    assert [seq for seq, _ in frames] == [6, 7, 8] and ended
    assert log.feed("run-2") is None  # a later stream reads the store


def test_a_run_not_opened_here_is_stored_event_by_event_after_what_is_stored(db):
    log = EventLog(db, EventHub(), Observer())
    log.open("run-3")
    log.append("run-3", "key:ann", {"type": "tool_result"})
    log.ended("run-3")
    assert log.append("run-3", "key:ann", {"type": "message"}) == 2  # numbered after seq 1
    assert _stored(db, "run-3") == [(1, "tool_result"), (2, "message")]
    assert log.feed("run-3") is None


def test_a_cached_key_revoked_here_is_refused_at_once_and_elsewhere_within_the_ttl(
    store, tmp_path
):
    (tmp_path / "data").mkdir(exist_ok=True)
    db = Database.open(store)
    try:
        db.migrate()
        key = create_key(db, "ann")
        cache = KeyCache(db, ttl=1.0)
        assert cache.lookup(key).name == "ann"
        reads = _commits(db)
        assert cache.lookup(key).name == "ann" and reads == []  # held: the store not asked

        with db.write() as session:  # another replica (or `sbx keys revoke` elsewhere)
            session.execute(update(ApiKey).where(ApiKey.name == "ann")
                            .values(revoked_at=time.time()))
        assert wait_until(lambda: cache.lookup(key) is None, 1.0 + 0.5), (
            "still accepted past the ttl")

        other = create_key(db, "bea")
        assert cache.lookup(other).name == "bea"  # a new key works at once
        revoke_key(db, "bea")  # revoked in this process: refused at its next request
        assert cache.lookup(other) is None
        assert cache.lookup("sbx_unknown") is None
    finally:
        db.close()
