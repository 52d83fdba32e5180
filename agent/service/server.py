"""Running the service under uvicorn: the drain on SIGTERM, and no client holding on forever.

`DrainingServer` turns SIGTERM (and Ctrl-C) into `Service.begin_drain`, then
lets uvicorn stop accepting and wait for open responses (streams end when
their runs do) for up to the grace plus a margin; the lifespan then closes
the service. It exits 0 afterwards instead of re-raising the signal.

uvicorn has no deadline for a request's head: a client trickling headers
would keep its connection (and a slot of `limit_concurrency`) for ever.
`GuardedH11` closes a connection whose request line and headers have not
all arrived `client_timeout` seconds after it opened (or after the previous
response); the gateway bounds the body the same way (408).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from sbx.agent.service.app import create_app
from sbx.agent.service.core import Service

SHUTDOWN_MARGIN_S = 15
"""Seconds past the grace for cancelled runs to end before open streams are cut."""
MAX_CONNECTIONS = 512
"""Connections and requests at once; past it uvicorn answers 503."""


class GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's head."""

    head_timeout_s = 30.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the first request's deadline."""
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        """A complete head starts a new cycle: its deadline is met."""
        super().data_received(data)
        if self.cycle is not self._armed_for:
            self._disarm()

    def on_response_complete(self) -> None:
        """The next request on this connection gets a deadline of its own."""
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        """No deadline for a closed connection."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._armed_for = self.cycle
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._expire)

    def _disarm(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        if self.cycle is self._armed_for:
            self.transport.close()


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM starting the service's drain, and a clean exit afterwards."""

    def __init__(self, config: uvicorn.Config, *, service: Service, grace_s: float) -> None:
        super().__init__(config)
        self.service = service
        self.grace_s = grace_s
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Refuse changes and start the grace period; uvicorn stops accepting after the drain.

        Until every run has finished or been cancelled, the server keeps answering: a new
        connection gets the gateway's 503 (draining), and a run's open stream (an SSE
        `/v1/execute`, an MCP call) gets its result instead of a reset. A second signal
        stops uvicorn at once.
        """
        if self._draining:
            super().handle_exit(sig, frame)
            return
        self._draining = True
        self.service.begin_drain(self.grace_s)

        def stop_after_the_drain() -> None:
            self.service.drained.wait(self.grace_s + SHUTDOWN_MARGIN_S)
            super(DrainingServer, self).handle_exit(sig, frame)

        threading.Thread(target=stop_after_the_drain, name="sbx-drain-exit", daemon=True).start()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Handle SIGINT and SIGTERM while serving; do not re-raise them afterwards (exit 0)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit)
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind_listener(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that port 0 works and the real port can be printed.

    `IPPROTO_TCP` matters: asyncio sets `TCP_NODELAY` on accepted connections only when
    the listening socket says TCP. With proto 0, Nagle's algorithm and the client's delayed
    ACK added 40 ms to every request on a kept-alive connection (measured: `/healthz` 44 ms
    p50, 0.4 ms with it). Raises `OSError` when the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_forever(service: Service, sock: socket.socket, *, grace_s: float) -> None:
    """Serve on the bound socket until SIGTERM or Ctrl-C, then drain and close the service."""
    protocol: Any = type("GuardedH11", (GuardedH11,),
                         {"head_timeout_s": service.settings.client_timeout})
    config = uvicorn.Config(
        create_app(service), http=protocol, lifespan="on", log_config=None, access_log=False,
        timeout_keep_alive=5, timeout_graceful_shutdown=int(grace_s) + SHUTDOWN_MARGIN_S,
        limit_concurrency=MAX_CONNECTIONS, h11_max_incomplete_event_size=64 * 1024,
    )
    try:
        DrainingServer(config, service=service, grace_s=grace_s).run(sockets=[sock])
    finally:
        service.close()  # idempotent: the lifespan closed it unless uvicorn failed to start
