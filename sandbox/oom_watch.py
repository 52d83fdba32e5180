"""The engine's `oom` events, read as they happen: a memory kill is known on a busy host too.

A sandbox killed by its memory limit is often removed by the engine (auto-remove)
before its session asks why it died, and its `State.OOMKilled` goes with it. The
engine's event log still has the kill, but `docker events --since` replays only
the daemon's most recent events (about 256: an `oom` followed by 400 other events
of a busy host was gone from the replay, measured), and a host running many
sandboxes makes that many in seconds. The session then called a memory kill
"the runner stopped".

So the engine's containers start one watch per engine socket and process: one
thread with one streaming request that the engine filters to `oom` events. It
keeps the ids it saw for `KEEP_S`, and says whether it has been reading without
a break since a moment (`covers`); before that moment (the process's first
container, a reconnect) the caller replays the engine's log as before. A watch
whose engine cannot be reached stops, and the engine's next container starts it
again. A watch does not survive a fork (a worker of `sbx serve --workers N`
starts its own).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sbx.sandbox.errors import first_line

logger = logging.getLogger(__name__)

KEEP_S = 600.0
"""Seconds a seen `oom` is kept (a session asks within seconds of the death)."""
KEEP_MAX = 4096
"""Most ids kept; the oldest go first."""
START_S = 2.0
"""Longest a first container waits for the watch to be reading."""
RECONNECT_S = 1.0
"""Pause before the stream is opened again after it broke."""

EventStream = Callable[[int], Iterator[dict[str, Any]]]
"""Opens the engine's `oom` events from a time on (epoch s): those it still holds, then live."""
OVERLAP_S = 2
"""Seconds before the stream's opening it also asks for: the engine's replay covers the
moment between its answer and its subscription (and a short break's gap)."""


class OomWatch:
    """Container ids the engine reported `oom` for, read live on a daemon thread."""

    def __init__(self, open_stream: EventStream) -> None:
        self._open_stream = open_stream
        self._seen: dict[str, float] = {}
        self._changed = threading.Condition()
        self._reading_since: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Read, unless reading already; the first time, return once the engine has the request.

        Called after each container the engine created: a watch that stopped (its engine
        was unreachable) starts again with the engine's next container.
        """
        with self._changed:
            if self._thread is not None and self._thread.is_alive():
                return
            thread = self._thread = threading.Thread(target=self._read, name="sbx-oom-watch",
                                                     daemon=True)
            thread.start()
            self._changed.wait_for(
                lambda: self._reading_since is not None or not thread.is_alive(),
                timeout=START_S)

    def covers(self, since: float) -> bool:
        """Whether every `oom` from `since` (epoch s) on has been read or will be."""
        with self._changed:
            return self._reading_since is not None and self._reading_since <= since

    def saw(self, container_id: str, wait_s: float) -> bool:
        """Whether the container's `oom` was seen, waiting up to `wait_s` for it to arrive.

        The engine may report the kill a moment after the container's death was noticed.
        """
        with self._changed:
            return self._changed.wait_for(lambda: container_id in self._seen, timeout=wait_s)

    def _read(self) -> None:
        """Read the stream, and open it again when it breaks; stop when it cannot be opened.

        An engine that does not answer (stopped, restarted elsewhere) is not asked again
        and again from here: its next container starts the watch again (`start`).
        """
        try:
            while True:
                opening = time.time()
                try:
                    stream = self._open_stream(int(opening) - OVERLAP_S)
                except Exception as exc:
                    logger.info("not reading the engine's oom events (%s): a memory kill is "
                                "looked up in its recent events", first_line(exc)[:200])
                    return
                with self._changed:
                    self._reading_since = opening
                    self._changed.notify_all()
                try:
                    for event in stream:
                        self._note(event)
                except Exception as exc:  # the engine restarted, the socket broke
                    logger.info("the engine's oom events broke off (%s); reading them again",
                                first_line(exc)[:200])
                finally:
                    with self._changed:
                        self._reading_since = None
                    close = getattr(stream, "close", None)
                    if close is not None:
                        with contextlib.suppress(Exception):
                            close()
                time.sleep(RECONNECT_S)
        finally:
            with self._changed:
                self._reading_since = None
                self._changed.notify_all()

    def _note(self, event: dict[str, Any]) -> None:
        container_id = event.get("id") or (event.get("Actor") or {}).get("ID")
        if not isinstance(container_id, str):
            return
        now = time.monotonic()
        with self._changed:
            self._seen.pop(container_id, None)
            self._seen[container_id] = now  # the oldest first
            while len(self._seen) > KEEP_MAX or now - next(iter(self._seen.values())) > KEEP_S:
                del self._seen[next(iter(self._seen))]
            self._changed.notify_all()


_WATCHES: dict[tuple[int, str], OomWatch] = {}
_WATCHES_LOCK = threading.Lock()


def watch_for(engine_key: str, open_stream: EventStream) -> OomWatch:
    """This process's watch of the engine at `engine_key` (its socket); `start` it."""
    key = (os.getpid(), engine_key)
    with _WATCHES_LOCK:
        watch = _WATCHES.get(key)
        if watch is None:
            watch = _WATCHES[key] = OomWatch(open_stream)
    return watch
