"""A run's events as Server-Sent Events, resumable with `Last-Event-ID`.

    id: 7
    event: tool_result
    data: {"type": "tool_result", "run_id": "run-...", "name": "execute_python", ...}

Each event's `id` is its `seq` in the run (1, 2, 3, ...). While the run runs
on this replica, the stream sends its frames from memory (the run's `Feed`: no
query per wake-up), up to the run's end, which joins the feed only once it is
stored with the run's final status. Otherwise (another replica, a run that has
ended, a client that resumes before what the feed holds) the stream reads the
store: a client that reconnects with `Last-Event-ID: 7` (or `?after=7`) gets
every event after 7. That stream reads the run's status and its events in one
statement (one snapshot), and a run's events are all stored before its final
status (its `run_end` in the same transaction), so once a read finds the run
ended, the events read with it are the last ones: the stream then closes. A
comment line every `KEEPALIVE_S` keeps proxies from closing an idle stream.
Each read returns at most `BATCH` events.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from sqlalchemy import and_, select
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from sbx.agent import EVENT_POLL_S, UNFINISHED_STATUSES, EventRow, Feed, RunRow, sse_frame
from sbx.agent.service.problems import Problem

if TYPE_CHECKING:
    from sbx.agent.service.host import Service

KEEPALIVE_S = 15.0
_EVENT_ID = re.compile(r"[0-9]{1,12}")
BATCH = 200


def last_event_id(request: Request) -> int:
    """Where to resume: `Last-Event-ID`, else `?after=`, else the start (0)."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    if not _EVENT_ID.fullmatch(raw):  # str.isdigit() takes "²", which int() refuses
        raise Problem(400, "bad-last-event-id", "Last-Event-ID must be an event id (a number)")
    return int(raw)


async def event_stream(service: Service, run_id: str, after: int) -> AsyncIterator[str]:
    """The SSE text of `run_id`'s events after `after`, until the run has ended."""
    feed = service.events.feed(run_id)
    if feed is not None and after >= feed.base - 1:
        async for text in _from_feed(service, feed, run_id, after):
            yield text
        return
    async for text in _from_store(service, run_id, after):
        yield text


async def _from_feed(service: Service, feed: Feed, run_id: str, after: int
                     ) -> AsyncIterator[str]:
    """The frames of a run running here, from memory, until its end was fed."""
    with service.hub.waiter(run_id) as wake:
        while True:
            wake.clear()
            frames, ended = feed.since(after)
            if frames:
                after = frames[-1][0]
                yield "".join(frame for _, frame in frames)
            if ended:
                return
            try:
                await asyncio.wait_for(wake.wait(), timeout=KEEPALIVE_S)
            except TimeoutError:  # quiet: the store says whether the run still runs
                yield ": keep-alive\n\n"
                ended, _ = await run_in_threadpool(_read, service, run_id, after)
                if ended:  # its end never reached the feed (a failure): the store has it
                    async for text in _from_store(service, run_id, after):
                        yield text
                    return


async def _from_store(service: Service, run_id: str, after: int) -> AsyncIterator[str]:
    """The run's events read from the store, until a read finds the run ended."""
    last_sent = time.monotonic()
    with service.hub.waiter(run_id) as wake:
        while True:
            wake.clear()
            ended, rows = await run_in_threadpool(_read, service, run_id, after)
            for seq, kind, data in rows:
                after = seq
                yield sse_frame(seq, kind, data)
                last_sent = time.monotonic()
            if len(rows) == BATCH:
                continue
            if ended:
                return
            try:
                await asyncio.wait_for(wake.wait(), timeout=EVENT_POLL_S)
            except TimeoutError:
                if time.monotonic() - last_sent >= KEEPALIVE_S:
                    yield ": keep-alive\n\n"
                    last_sent = time.monotonic()


def _read(service: Service, run_id: str, after: int) -> tuple[bool, list[tuple[int, str, str]]]:
    """(the run had ended before this read, the next events after `after`).

    One statement: the run's status on every row (one row with no event when there is
    none after `after`, none when the run is gone), read in the same snapshot as the
    events, so a status that says ended comes with every event stored before it.
    """
    query = (select(RunRow.status, EventRow.seq, EventRow.type, EventRow.data).select_from(RunRow)
             .outerjoin(EventRow, and_(EventRow.run_id == RunRow.id, EventRow.seq > after))
             .where(RunRow.id == run_id).order_by(EventRow.seq).limit(BATCH))
    with service.db.reading() as connection:
        rows = connection.execute(query).all()
    status = rows[0][0] if rows else None
    ended = status is None or status not in UNFINISHED_STATUSES
    return ended, [(int(seq), str(kind), str(data)) for _, seq, kind, data in rows
                   if seq is not None]
