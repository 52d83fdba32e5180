"""`Cancellation`: the token that tells a run (or one execution) to stop, from any thread.

A face never raises an exception into a worker: it holds the token of the run
it started and calls `cancel()` (an HTTP client's `cancel`, the drain after
SIGTERM, an SSE client that left, an MCP client's cancel notification). Whoever
does the work checks the token where it can stop cleanly and registers what
must happen at once (`on_cancel`): the gate cancels its running call, the
workspace removes its sandbox, the model client abandons the request in
flight (its socket reads wait in slices and look at the token between them,
`sbx.agent.model.http`), so a run whose model request hangs still ends
`cancelled` within about a second. It lives with the model client, the lowest
layer that waits on it; the core hands it out (`sbx.agent`, `Cancellation`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

CANCELLED_MESSAGE = "Cancelled: the run was stopped before it finished."
"""Every face's message for a cancelled run whose token fired without a reason of its own
(Ctrl-C, a cancel call, a drain): it names no face's way of cancelling."""


class Cancelled(Exception):
    """The token fired: the work in progress stops here (the loop ends the run `cancelled`)."""


class Cancellation:
    """A thread-safe, one-way flag with callbacks; one per run or per execution."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason = CANCELLED_MESSAGE
        """Why it was cancelled, for the run's message."""

    @property
    def cancelled(self) -> bool:
        """Whether `cancel()` was called."""
        return self._event.is_set()

    def is_set(self) -> bool:
        """Same as `cancelled` (the shape `threading.Event` has, for the socket reads)."""
        return self._event.is_set()

    def cancel(self, reason: str | None = None) -> None:
        """Fire the token (idempotent): every callback runs now, in this thread, once."""
        with self._lock:
            if self._event.is_set():
                return
            if reason:
                self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _call(callback)

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Run `callback` when the token fires (at once if it has); returns the unhook."""
        with self._lock:
            fired = self._event.is_set()
            if not fired:
                self._callbacks.append(callback)
        if fired:
            _call(callback)

        def unhook() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return unhook

    def check(self) -> None:
        """Raise `Cancelled` when the token has fired."""
        if self._event.is_set():
            raise Cancelled(self.reason)

    def wait(self, timeout: float | None) -> bool:
        """Sleep up to `timeout` s, waking when the token fires; whether it has."""
        return self._event.wait(timeout)


def _call(callback: Callable[[], None]) -> None:
    """One callback; a failing one is logged, the others still run."""
    try:
        callback()
    except Exception:
        logger.warning("a cancellation callback failed", exc_info=True)
