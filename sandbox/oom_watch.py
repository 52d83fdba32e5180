"""The engine's `oom` events, read as they happen: a memory kill is known on a busy host too.

A sandbox killed by its memory limit is often removed by the engine (auto-remove)
before its session asks why it died, and its `State.OOMKilled` goes with it. The
engine's event log still has the kill, but `docker events --since` replays only
the daemon's most recent events (about 256: an `oom` followed by 400 other events
of a busy host was gone from the replay, measured), and a host running many
sandboxes makes that many in seconds. The session then called a memory kill
"the runner stopped".

So a process's first container starts one watch per engine socket: one thread
with one streaming request that the engine filters to `oom` events. It keeps the
ids it saw for `KEEP_S`, and says whether it has been reading without a break
since a moment (`covers`); before that moment (the first container, a reconnect)
the caller replays the engine's log as before. A watch does not survive a fork
(a worker of `sbx serve --workers N` starts its own).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger(__name__)

KEEP_S = 600.0
"""Seconds a seen `oom` is kept (a session asks within seconds of the death)."""
KEEP_MAX = 4096
"""Most ids kept; the oldest go first."""
START_S = 2.0
"""Longest a first container waits for the watch to be reading."""
RECONNECT_S = 1.0
"""Pause before the stream is opened again after it broke (doubled while it keeps failing)."""
RECONNECT_MAX_S = 60.0

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
        """Start reading (once); returns once the engine has taken the request (or in `START_S`)."""
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(target=self._read, name="sbx-oom-watch",
                                                daemon=True)
                self._thread.start()
            self._changed.wait_for(lambda: self._reading_since is not None, timeout=START_S)

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
        pause = RECONNECT_S
        while True:
            try:
                opening = time.time()
                stream = self._open_stream(int(opening) - OVERLAP_S)
                with self._changed:
                    self._reading_since = opening
                    self._changed.notify_all()
                pause = RECONNECT_S
                for event in stream:
                    self._note(event)
                cause = "it ended"
            except Exception as exc:  # the engine restarted, the socket broke: read again
                cause = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            with self._changed:
                self._reading_since = None
            log = logger.warning if pause == RECONNECT_S else logger.debug  # once per outage
            log("the engine's oom events are not being read (%s); trying again in %g s "
                "(until then a memory kill is looked up in the engine's recent events)",
                cause, pause)
            time.sleep(pause)
            pause = min(pause * 2, RECONNECT_MAX_S)

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
    """This process's watch of the engine at `engine_key` (its socket), started."""
    key = (os.getpid(), engine_key)
    with _WATCHES_LOCK:
        watch = _WATCHES.get(key)
        if watch is None:
            watch = _WATCHES[key] = OomWatch(open_stream)
    watch.start()
    return watch
