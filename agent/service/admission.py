"""Admission: long work never holds a request thread, and no key holds all the work at once.

The server's request threads (anyio's default pool, 40) authenticate and run
the short handlers. A handler declared `@api(..., work=True)` (`/v1/execute`:
it waits for the host's capacity and then runs code, for minutes) runs on a
thread of a separate pool instead, so a flood of executions never delays an
authentication, a `/healthz` or another key's listing. The health probes run
on the event loop or on a small pool of their own (`probe`).

Each key may have `max_in_flight` such requests at once on a replica (the
policy's `[service]`); past it the answer is 429 with `Retry-After`. A slot
is held from admission until the response has been sent (a streamed
execution: until its stream ends), so waiting for the host's capacity counts
too: a key whose executions end "host busy" cannot pile up more of them than
its slots.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from sbx.agent.service.problems import quota_exceeded

WORK_THREADS = 256
"""Threads for declared work across all keys (each key is bounded by its `max_in_flight`)."""
PROBE_THREADS = 2
"""Threads for the readiness probe's blocking checks, shared with nothing else."""
RETRY_S = 2.0
"""Retry-After when a key's slots are full: one of its requests usually ends soon."""


class Admission:
    """Per-key slots for declared work, and the thread pools kept apart from request threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    def take(self, principal: str, limit: int) -> Callable[[], None]:
        """One of `principal`'s slots, or 429; returns the (idempotent) release."""
        with self._lock:
            held = self._held.get(principal, 0)
            if held >= limit:
                raise quota_exceeded(
                    "max_in_flight",
                    f"{held} of your executions are in flight (waiting for the host or "
                    f"running), the most allowed at once is {limit}",
                    RETRY_S,
                )
            self._held[principal] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                left = self._held.get(principal, 1) - 1
                if left > 0:
                    self._held[principal] = left
                else:
                    self._held.pop(principal, None)

        return release

    def in_flight(self, principal: str) -> int:
        """The principal's slots held now (for tests and metrics)."""
        with self._lock:
            return self._held.get(principal, 0)

    async def work(self, handler: Callable[..., Any], *args: Any) -> Any:
        """Run `handler(*args)` on a work thread (not a request thread)."""
        return await anyio.to_thread.run_sync(handler, *args, limiter=self._limiter("work"))

    async def probe(self, check: Callable[[], Any]) -> Any:
        """Run a health probe's blocking check on the probe threads."""
        return await anyio.to_thread.run_sync(check, limiter=self._limiter("probe"))

    def _limiter(self, name: str) -> anyio.CapacityLimiter:
        """Made on first use, on the event loop (anyio binds a limiter to its backend)."""
        limiter = self._limiters.get(name)
        if limiter is None:
            limiter = anyio.CapacityLimiter(WORK_THREADS if name == "work" else PROBE_THREADS)
            self._limiters[name] = limiter
        return limiter


class Held(Response):
    """A response that gives its admission slot back once it has been sent (or abandoned)."""

    def __init__(self, inner: Response, release: Callable[[], None]) -> None:
        # no super().__init__: the inner response renders itself; these are for the curious
        self.inner = inner
        self.release = release
        self.status_code = inner.status_code
        self.background = None
        self.raw_headers = inner.raw_headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the inner response, then release the slot, however the sending ended."""
        try:
            await self.inner(scope, receive, send)
        finally:
            self.release()
