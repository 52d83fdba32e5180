"""Running the service under uvicorn: the drain on SIGTERM, and no client holding on forever.

`DrainingServer` turns SIGTERM (and Ctrl-C) into `Service.begin_drain`, then
lets uvicorn stop accepting and wait for open responses (streams end when
their runs do) for up to the grace plus a margin; the lifespan then closes
the service. It exits 0 afterwards instead of re-raising the signal.

uvicorn has no deadline for a request: a client trickling its head or its
body would keep its connection (and a slot of `limit_concurrency`) for ever.
`GuardedH11` closes a connection whose request line and headers have not
all arrived `client_timeout` seconds after it opened (or after the previous
response), or whose body has not arrived `client_timeout` later plus what its
bytes need at `MIN_BODY_RATE`; the gateway also answers a pause of `client_timeout`
mid-body with 408. One client address holds at most `client_connections`
connections (`[service]`), so it cannot take all of `MAX_CONNECTIONS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from sbx.agent.service.app import create_app
from sbx.agent.service.core import Service

SHUTDOWN_MARGIN_S = 15
"""Seconds past the grace for cancelled runs to end before open streams are cut."""
MAX_CONNECTIONS = 512
"""Connections and requests at once; past it uvicorn answers 503."""
MIN_BODY_RATE = 16 * 1024
"""Bytes per second a request body must average, past the head's `client_timeout`."""
TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 48\r\nConnection: close\r\n\r\n"
    b"too many connections from this address; retry\r\n"
)
"""The answer to a connection past its address's cap (`[service] client_connections`)."""


class GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a total deadline per request and a cap per client address.

    The deadline of a request runs from when its connection opened (or the previous
    response ended): its head must be complete within `head_timeout_s`, and its whole
    body within another `head_timeout_s` plus the time its bytes need at
    `MIN_BODY_RATE`; a client sending a large `Content-Length` and then a byte now
    and then is cut, however regular its trickle (a pause of `head_timeout_s` is a
    408 from the gateway first). A client address with `per_client` connections open
    gets 503 on the next.
    """

    head_timeout_s = 30.0
    per_client = 64
    clients: ClassVar[dict[str, int]] = {}
    """Connections open per client address (each server gets its own subclass and dict)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Count the client's address (refuse past its cap), then start the first deadline."""
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._armed_for = self.cycle
        self._started, self._body_bytes = self.loop.time(), 0
        self._address = self.client[0] if self.client else ""
        held = self.clients.get(self._address, 0)
        self._counted = held < self.per_client
        if not self._counted:
            transport.write(TOO_MANY_CONNECTIONS)
            transport.close()
            return
        self.clients[self._address] = held + 1
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Body bytes earn time (at `MIN_BODY_RATE`); a complete request meets its deadline."""
        if self._in_body():
            self._body_bytes += len(data)
        super().data_received(data)
        if self._in_body():
            return
        if self.cycle is not self._armed_for:
            self._disarm()

    def on_response_complete(self) -> None:
        """The next request on this connection gets a deadline of its own."""
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        """No deadline for a closed connection; its address holds one connection fewer."""
        self._disarm()
        if getattr(self, "_counted", False):
            self._counted = False
            left = self.clients.get(self._address, 1) - 1
            if left > 0:
                self.clients[self._address] = left
            else:
                self.clients.pop(self._address, None)
        super().connection_lost(exc)

    def _in_body(self) -> bool:
        """A new request's head is in and its body is still arriving."""
        cycle = self.cycle
        return cycle is not None and cycle is not self._armed_for and cycle.more_body

    def _arm(self) -> None:
        self._disarm()
        self._armed_for = self.cycle
        self._started = self.loop.time()
        self._body_bytes = 0
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._expire)

    def _disarm(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        if self.cycle is not self._armed_for and not self._in_body():
            return  # the request is in: the application has it
        if self._in_body():
            body_s = self.head_timeout_s + self._body_bytes / MIN_BODY_RATE
            allowed = self._started + self.head_timeout_s + body_s
            wait = allowed - self.loop.time()
            if wait > 0.05:
                self._head_timer = self.loop.call_later(wait, self._expire)
                return
        self.transport.close()


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM starting the service's drain, and a clean exit afterwards."""

    def __init__(self, config: uvicorn.Config, *, service: Service, grace_s: float) -> None:
        super().__init__(config)
        self.service = service
        self.grace_s = grace_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Refuse changes, start the grace period, then let uvicorn stop accepting."""
        self.service.begin_drain(self.grace_s)
        super().handle_exit(sig, frame)

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
    protocol: Any = type("GuardedH11", (GuardedH11,), {
        "head_timeout_s": service.settings.client_timeout,
        "per_client": service.settings.client_connections, "clients": {},
    })
    config = uvicorn.Config(
        create_app(service), http=protocol, lifespan="on", log_config=None, access_log=False,
        timeout_keep_alive=5, timeout_graceful_shutdown=int(grace_s) + SHUTDOWN_MARGIN_S,
        limit_concurrency=MAX_CONNECTIONS, h11_max_incomplete_event_size=64 * 1024,
    )
    try:
        DrainingServer(config, service=service, grace_s=grace_s).run(sockets=[sock])
    finally:
        service.close()  # idempotent: the lifespan closed it unless uvicorn failed to start
