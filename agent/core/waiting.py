"""`ModelWait`: the events that say the run is waiting on the model, while it waits.

A model request can take a minute (a local model, a slow endpoint, retries
after a 503); without a word in between, a user cannot tell a slow model from
a hang. While one request is out, a `ModelWait` sends a `model_waiting` event
every `WAITING_INTERVAL_S` from a thread of its own, and one at once when the
request is retried (the model client's `on_retry`). Leaving it stops and
joins that thread, so no waiting event comes after the reply it waited for.
"""

from __future__ import annotations

import logging
import threading
import time

from sbx.agent.core.events import WAITING_INTERVAL_S, EventSink, ModelWaiting

logger = logging.getLogger(__name__)


class ModelWait:
    """One model request waited on: `complete(..., on_retry=wait.retried)` inside `with`."""

    def __init__(self, *, run_id: str, turn: int, model: str, emit: EventSink,
                 interval: float = WAITING_INTERVAL_S) -> None:
        self.run_id = run_id
        self.turn = turn
        self.model = model
        self._emit = emit
        self._interval = interval
        self._started = time.monotonic()
        self._retries = 0
        self._reason = ""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="sbx-model-wait", daemon=True)

    def __enter__(self) -> ModelWait:
        self._started = time.monotonic()
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:  # an event being sent finishes first; none is sent after
            self._done.set()
        self._ticker.join()

    def retried(self, retries: int, reason: str) -> None:
        """The model client's `on_retry`: say so now, not at the next tick."""
        self._retries, self._reason = retries, reason
        self._send()

    def _tick(self) -> None:
        try:
            while not self._done.wait(self._interval):
                self._send()
        except Exception:  # a broken sink ends the ticking, never the request
            logger.warning("a model_waiting event failed; no more for this request",
                           exc_info=True)

    def _send(self) -> None:
        with self._lock:
            if self._done.is_set():
                return
            self._emit(ModelWaiting(
                run_id=self.run_id, turn=self.turn, model=self.model,
                elapsed_s=round(time.monotonic() - self._started, 1),
                retries=self._retries, retry_reason=self._reason,
            ))
