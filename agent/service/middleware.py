"""`Gateway`: the one place every HTTP request passes, outermost around the application.

For each request, in order:

    request id        `X-Request-Id` kept when it is a short token, else a new one;
                      echoed in the response and in every problem body
    draining          after SIGTERM, anything but GET/HEAD gets 503 + Retry-After
    body bounds       a declared `Content-Length` over the route's limit is 413 before a byte
                      is read; a chunked body is counted as it arrives (413), and a client
                      that pauses longer than `client_timeout` mid-body gets 408
    errors            anything unexpected is logged with the request id and answered as a
                      500 problem: never a traceback
    observer          `request_finished(...)` with method, path, the route's template,
                      status, duration, principal and bytes: the seam where the metrics
                      and the access log attach (a failing observer never fails a request)

The upload route has no byte limit here: it streams to disk and cuts the
upload at the principal's own `upload_bytes` quota (`sbx.agent.service.uploads`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sbx.agent import UNMATCHED_ROUTE, Observer, notify_observer
from sbx.agent.service.problems import Problem, respond, unavailable

logger = logging.getLogger(__name__)

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


class BodyTooLarge(Exception):
    """The request body passed the route's limit while it was being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is larger than {limit} bytes")
        self.limit = limit


class BodyTimeout(Exception):
    """The client paused too long in the middle of its request body."""


@dataclass(kw_only=True)
class GatewayState:
    """What the gateway needs from the service; changed by the lifecycle (draining)."""

    max_body: int
    """Byte limit of request bodies (routes in `unbounded` excepted)."""
    client_timeout: float
    """Seconds a client may pause between two chunks of its body."""
    observer: Observer
    """Told about every request when it ends."""
    unbounded: Callable[[str, str], bool] = lambda method, path: False
    """Routes that bound their own body (method, path) -> True."""
    draining: bool = False
    """Set on SIGTERM: only reads are still served."""
    retry_after_s: float = 5.0
    """Retry-After of a 503 while draining."""
    in_flight: int = field(default=0)
    """Requests being handled now."""


class Gateway:
    """The outermost ASGI layer (see the module docstring)."""

    def __init__(self, app: ASGIApp, state: GatewayState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one request (see the module docstring); other scopes pass through."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 0
        sizes = [0, 0]  # body bytes received, sent

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers["X-Request-Id"] = request_id
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Cache-Control", "no-store")
            elif message["type"] == "http.response.body":
                sizes[1] += len(message.get("body", b""))
            await send(message)

        async def counted_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                sizes[0] += len(message.get("body", b""))
            return message

        self.state.in_flight += 1
        try:
            early = self._refuse_early(scope)
            if early is not None:
                await respond(early, request_id)(scope, receive, send_with_id)
                return
            bounded = self._bounded_receive(scope, counted_receive)
            try:
                await self.app(scope, bounded, send_with_id)
            except Exception:  # the one net under every handler: log, answer, never a trace
                logger.exception("request %s failed", request_id)
                if status == 0:
                    problem = Problem(500, "internal", f"internal error (request {request_id})")
                    await respond(problem, request_id)(scope, receive, send_with_id)
        finally:
            self.state.in_flight -= 1
            notify_observer(
                self.state.observer.request_finished, method=scope["method"], path=scope["path"],
                route=_route(scope), status=status or 500, request_id=request_id,
                duration_s=time.perf_counter() - started, bytes_in=sizes[0], bytes_out=sizes[1],
                principal=scope["state"].get("principal"),
            )

    def _refuse_early(self, scope: Scope) -> Problem | None:
        """Draining, or a declared body over the limit: answered before the app runs."""
        if self.state.draining and scope["method"] not in _SAFE_METHODS:
            return unavailable("the server is shutting down; retry on another replica",
                               self.state.retry_after_s, slug="draining")
        limit = self._limit(scope)
        declared = _content_length(scope)
        if limit is not None and declared is not None and declared > limit:
            return Problem(413, "body-too-large",
                           f"the request body ({declared} bytes) is larger than {limit} bytes")
        return None

    def _limit(self, scope: Scope) -> int | None:
        if self.state.unbounded(scope["method"], scope["path"]):
            return None
        return self.state.max_body

    def _bounded_receive(self, scope: Scope, receive: Receive) -> Receive:
        """`receive` counting body bytes against the limit and timing out pauses mid-body."""
        limit = self._limit(scope)
        timeout = self.state.client_timeout
        received = 0
        complete = False

        async def bounded() -> Message:
            nonlocal received, complete
            if complete:  # after the body: disconnect listeners wait as long as they like
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), timeout=timeout)
            except TimeoutError:
                raise BodyTimeout(f"no request data for {timeout:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if limit is not None and received > limit:
                    raise BodyTooLarge(limit)
                complete = not message.get("more_body", False)
            else:
                complete = True
            return message

        return bounded


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text = bytes(value).decode("latin-1")
            if _REQUEST_ID.match(text):
                return text
    return uuid.uuid4().hex


def _route(scope: Scope) -> str:
    """The template of the route that took the request (`/v1/runs/{run_id}`), never the path."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else UNMATCHED_ROUTE


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
