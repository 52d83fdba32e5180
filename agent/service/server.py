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
mid-body with 408. One client holds at most `client_connections` connections
(`[service]`; behind `trusted_proxies`, the forwarded client's requests), so it
cannot take all of `MAX_CONNECTIONS`, and requests without credentials cannot take
the places kept for those with them (`sbx.agent.service.edge`). A refused connection
is answered 503 after its request head is read, and closed without a reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, ClassVar

import h11
import uvicorn
from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from sbx.agent import EARLY_SIGNALS, freeze_heap
from sbx.agent.service.app import create_app
from sbx.agent.service.edge import (
    MAX_CONNECTIONS,
    EdgeSlots,
    TrustedProxies,
    has_credentials,
    sends_body,
)
from sbx.agent.service.host import Service

SHUTDOWN_MARGIN_S = 15
"""Seconds past the grace for cancelled runs to end before open streams are cut."""
MIN_BODY_RATE = 16 * 1024
"""Bytes per second a request body must average, past the head's `client_timeout`."""
REFUSED_HEAD_BYTES = 16 * 1024
"""Most bytes of a refused connection's request head read before it is answered."""
REFUSED_HEAD_S = 2.0
"""Seconds a refused connection's request head may take; it is answered then, whole or not."""
KEEP_ALIVE_S = 20
"""Seconds an idle kept-alive connection stays open (within `client_timeout`, whose head
deadline closes it first). Longer than the idle expiry of common client pools (httpx's
is 5 s): when both sides give up after the same pause, the client can send its next
request on a connection the server is closing in that instant, and lose it."""
LINGER_S = 2.0
"""Seconds a connection answered before its request ended is still read (and what comes
dropped) after the answer and a FIN: closing it with unread bytes would reset it, and the
client would lose the answer."""
LINGER_BYTES = 1024 * 1024
"""Most bytes dropped while lingering; past them the connection is closed at once."""


def _refusal(reason: bytes) -> bytes:
    body = reason + b"; retry\r\n"
    return (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n"
            b"Content-Type: text/plain\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\nConnection: close\r\n\r\n" + body)


TOO_MANY_CONNECTIONS = _refusal(b"too many connections from this address")
"""The answer past a client's cap (`[service] client_connections`)."""
TOO_MANY_ANONYMOUS = _refusal(b"too many requests without credentials at once")
"""The answer past the share of requests without credentials (`edge.MAX_ANONYMOUS`)."""


class _ClosingGently(asyncio.Transport):
    """The connection's transport as uvicorn holds it, whose `close` lingers mid-request.

    uvicorn closes the transport itself when a response says `Connection: close`
    (a 413, a 408), before the protocol hears that the response ended. Closing a
    socket with unread bytes sends a reset, and a client still sending its body
    can lose the answer it was sent; so while the request's body is still coming,
    `close` is `GuardedH11._linger` instead. asyncio's own closes (the client's
    FIN, an error) go to the real transport, which this one only wraps.
    """

    def __init__(self, transport: asyncio.Transport, protocol: GuardedH11) -> None:
        super().__init__()
        self.real = transport
        self._protocol = protocol

    def close(self) -> None:
        """Linger while the client may still be sending; else close."""
        self._protocol.close_gently()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.real.write(data)

    def is_closing(self) -> bool:
        """True from the linger on, so uvicorn arms no keep-alive timer for the connection."""
        return self._protocol.lingering or self.real.is_closing()

    def can_write_eof(self) -> bool:
        return self.real.can_write_eof()

    def write_eof(self) -> None:
        self.real.write_eof()

    def pause_reading(self) -> None:
        self.real.pause_reading()

    def resume_reading(self) -> None:
        self.real.resume_reading()

    def is_reading(self) -> bool:
        return self.real.is_reading()

    def abort(self) -> None:
        self.real.abort()

    def get_write_buffer_size(self) -> int:
        return self.real.get_write_buffer_size()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.real.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.real.get_protocol()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.real.get_extra_info(name, default)


class GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a total deadline per request and caps per client.

    The deadline of a request runs from when its connection opened (or the previous
    response ended): its head must be complete within `head_timeout_s`, and its whole
    body within another `head_timeout_s` plus the time its bytes need at
    `MIN_BODY_RATE`; a client sending a large `Content-Length` and then a byte now
    and then is cut, however regular its trickle (a pause of `head_timeout_s` is a
    408 from the gateway first).

    The caps (`edge.EdgeSlots`): a client address holding `client_connections`
    connections gets 503 on the next; behind a trusted proxy (`edge.TrustedProxies`)
    the client is the forwarded one and each request in progress counts as its
    connection; requests without credentials that send a body hold at most
    `edge.MAX_ANONYMOUS` places. A refused connection's head is read first (bounded
    in bytes and time), so the client reads the 503 instead of a reset; any request
    answered before its body ended says `Connection: close` and is closed the same
    careful way (`_linger`).
    """

    head_timeout_s = 30.0
    slots: ClassVar[EdgeSlots] = EdgeSlots(per_client=64)
    """What clients hold (each server gets its own subclass and slots)."""
    proxies: ClassVar[TrustedProxies] = TrustedProxies()
    """Whose `X-Forwarded-For` is believed (`[service] trusted_proxies`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Count the client's address (refuse past its cap), then start the first deadline."""
        super().connection_made(transport)
        self._real_transport = transport
        self.transport = _ClosingGently(transport, self)
        self._head_timer: asyncio.TimerHandle | None = None
        self._edge_timer: asyncio.TimerHandle | None = None
        self._edge_state: str | None = None  # None, "refusing" or "lingering"
        self._edge_bytes = b""
        self._dropped = 0
        self._holds: list[Callable[[], None]] = []
        self._armed_for = self.cycle
        self._started, self._body_bytes = self.loop.time(), 0
        self._address = self.client[0] if self.client else ""
        self._inner_app, self.app = self.app, self._admit
        self._counted = False
        if not self._address:  # a sibling worker's Unix socket: it counted the client itself
            self._arm()
            return
        if not self.proxies.trusts(self._address):  # a proxy's clients count per request
            if not self.slots.take(self._address):
                self._refuse_after_head()
                return
            self._counted = True
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Body bytes earn time (at `MIN_BODY_RATE`); a complete request meets its deadline."""
        if self._edge_state is not None:
            self._edge_data(data)
            return
        if self._in_body():
            self._body_bytes += len(data)
        super().data_received(data)
        if self._in_body():
            return
        if self.cycle is not self._armed_for:
            self._disarm()

    def on_response_complete(self) -> None:
        """The request's places are given back; the next request gets a deadline of its own.

        A response that ended before its request's body did (a 401, a 413, a 404) does
        not wait for a slow body: the connection is closed, without a reset (`_linger`).
        Both are decided on the request just answered: uvicorn's own step starts on a next
        request already received (a client that read a streamed answer's last byte sends
        its next request before the stream's end is written), and that request's unread
        body is no reason to close, nor its head a reason to wait for it.
        """
        answered, body_unread = self.cycle, self._body_unread()
        super().on_response_complete()
        self._release()
        if self._edge_state is None and body_unread:
            self._linger()
        if self._edge_state is None:
            self._arm(after=answered)

    def _body_unread(self) -> bool:
        """The request's body has not all arrived (the client may still be sending it)."""
        return self.conn.their_state is h11.SEND_BODY

    @property
    def lingering(self) -> bool:
        """Answered, FIN sent, what still comes is dropped until the real close."""
        return getattr(self, "_edge_state", None) == "lingering"

    def close_gently(self) -> None:
        """Close, or linger (`_linger`) while the request's body is still arriving."""
        if self.lingering:
            return  # the linger's own timer closes
        if (self._edge_state is None and self._body_unread()
                and not self._real_transport.is_closing()):  # not after the connection's loss
            self._linger()
            return
        self._real_transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        """No timers for a closed connection; its client holds one place fewer."""
        self._disarm()
        self._stop_edge_timer()
        self._release()
        if getattr(self, "_counted", False):
            self._counted = False
            self.slots.give(self._address)
        super().connection_lost(exc)

    # ------------------------------------------------------------ the edge's caps

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Take the request's places (or answer 503 and close), then run the application."""
        refusal = self._take_places(scope)
        if refusal is not None:
            if self.cycle is not None:
                self.cycle.disconnected = True  # answered here: uvicorn adds nothing
            self._answer(refusal)
            return
        if sends_body(scope["headers"]):
            send = self._closing_if_unread(send)
        await self._inner_app(scope, receive, send)

    def _closing_if_unread(self, send: Send) -> Send:
        """`send`, saying `Connection: close` on a response begun before its request's body ended.

        Such a connection is closed after the response (`close_gently`); a client told
        keep-alive would put it back in its pool and could send its next request on it
        before our FIN arrives, to have it dropped unanswered.
        """

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self._body_unread():
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"connection" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        return send_closing

    def _take_places(self, scope: Scope) -> bytes | None:
        """The request's places at the edge, held until its response ends; else the refusal."""
        headers = scope["headers"]
        if self.proxies.trusts(self._address):
            client = self.proxies.client(
                self._address, [value for name, value in headers if name == b"x-forwarded-for"])
            scope["client"] = (client, 0)
            forwarded_proto = [value for name, value in headers if name == b"x-forwarded-proto"]
            scope["scheme"] = self.proxies.scheme(self._address, forwarded_proto) or scope["scheme"]
            if not self.slots.take(client):
                return TOO_MANY_CONNECTIONS
            self._holds.append(lambda: self.slots.give(client))
        if sends_body(headers) and not has_credentials(headers):
            if not self.slots.take_anonymous():
                self._release()
                return TOO_MANY_ANONYMOUS
            self._holds.append(self.slots.give_anonymous)
        return None

    def _release(self) -> None:
        holds, self._holds = getattr(self, "_holds", []), []
        for give in holds:
            give()

    def _refuse_after_head(self) -> None:
        """Past the cap: read the request head (bounded), then answer 503 (`_edge_data`)."""
        self._edge_state = "refusing"
        self.connections.discard(self)  # uvicorn's count is of the connections it serves
        self._edge_timer = self.loop.call_later(REFUSED_HEAD_S, self._answer,
                                                TOO_MANY_CONNECTIONS)

    def _edge_data(self, data: bytes) -> None:
        if self._edge_state == "refusing":
            self._edge_bytes += data[: REFUSED_HEAD_BYTES - len(self._edge_bytes)]
            if b"\r\n\r\n" in self._edge_bytes or len(self._edge_bytes) >= REFUSED_HEAD_BYTES:
                self._answer(TOO_MANY_CONNECTIONS)
            return
        self._dropped += len(data)  # lingering: what still comes is dropped
        if self._dropped > LINGER_BYTES:
            self._real_transport.close()

    def _answer(self, refusal: bytes) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(refusal)
        self._linger()

    def _linger(self) -> None:
        """Close after an answer without a reset: FIN now, drop what comes, close in `LINGER_S`."""
        self._disarm()
        self._stop_edge_timer()
        self._unset_keepalive_if_required()
        self._release()
        self.connections.discard(self)
        self._edge_state = "lingering"
        self.flow.resume_reading()  # paused when the unread body passed uvicorn's high water
        if self._real_transport.can_write_eof():
            self._real_transport.write_eof()
        self._edge_timer = self.loop.call_later(LINGER_S, self._real_transport.close)

    def _stop_edge_timer(self) -> None:
        timer = getattr(self, "_edge_timer", None)
        if timer is not None:
            timer.cancel()
            self._edge_timer = None

    # ------------------------------------------------------------ the request's deadline

    def _in_body(self) -> bool:
        """A new request's head is in and its body is still arriving."""
        cycle = self.cycle
        return cycle is not None and cycle is not self._armed_for and cycle.more_body

    def _arm(self, *, after: RequestResponseCycle | None = None) -> None:
        """Start the deadline of the request after `after` (the one now in, by default)."""
        self._disarm()
        self._armed_for = after if after is not None else self.cycle
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
        self._real_transport.close()  # cut, not lingered: this client has had its time


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
        while EARLY_SIGNALS:  # a worker told to stop while it started: drain now
            self.handle_exit(EARLY_SIGNALS.pop(0), None)
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


def serve_forever(service: Service, sock: socket.socket, *, grace_s: float,
                  private: socket.socket | None = None) -> None:
    """Serve on the bound socket until SIGTERM or Ctrl-C, then drain and close the service.

    `private`: a worker's Unix socket, for the requests its siblings forward.
    """
    settings = service.settings
    protocol: Any = type("GuardedH11", (GuardedH11,), {
        "head_timeout_s": settings.client_timeout,
        "slots": EdgeSlots(per_client=settings.client_connections),
        "proxies": TrustedProxies(settings.trusted_proxies),
    })
    config = uvicorn.Config(
        create_app(service), http=protocol, lifespan="on", log_config=None, access_log=False,
        timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=int(grace_s) + SHUTDOWN_MARGIN_S,
        limit_concurrency=MAX_CONNECTIONS, h11_max_incomplete_event_size=64 * 1024,
        proxy_headers=False,  # the forwarded headers are read at the edge, by trusted_proxies only
    )
    freeze_heap()  # start-up's objects (sbx, the framework, the store) out of every collection
    try:
        sockets = [sock] if private is None else [sock, private]
        DrainingServer(config, service=service, grace_s=grace_s).run(sockets=sockets)
    finally:
        service.close()  # idempotent: the lifespan closed it unless uvicorn failed to start
