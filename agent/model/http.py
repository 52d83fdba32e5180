"""The HTTP client under the `openai` SDK: a deadline on every socket operation, a cap on bodies.

httpx's timeouts are per operation: a server that sends a byte every few
seconds, in the headers or the body, never trips a read timeout, and one
attempt can outlast the run's wall-time budget. So the SDK gets an httpx
client whose connections come from a network backend that wraps every
stream: each connect, TLS handshake, read and write is given at most the time
left before the attempt's deadline (`attempt_deadline`, a context variable
set by `ModelClient` around each attempt, so one client can serve several
runs' threads), and fails as a timeout once it has passed. When the attempt
carries a cancellation token, reads wait in slices of at most
`CANCEL_POLL_S` and look at the token between them: a cancelled run abandons
a request the endpoint never answers within that slice (`Cancelled`).

Bodies are counted as they arrive and refused past `max_bytes`, error bodies
included (the SDK reads those whole). sbx asks for `Accept-Encoding:
identity` and refuses a compressed reply, whose decoded size no cap on the
wire would bound. An `HTTP(S)_PROXY` from the environment is honoured, with
the same guards (httpx drops environment proxies once a transport is given).
"""

from __future__ import annotations

import functools
import os
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import httpcore2
import httpx2

from sbx.agent.model.cancellation import Cancellation, Cancelled

_DEADLINE: ContextVar[float | None] = ContextVar("sbx_model_deadline", default=None)
_CANCEL: ContextVar[Cancellation | None] = ContextVar("sbx_model_cancel", default=None)
CANCEL_POLL_S = 0.2
"""Longest socket wait between two looks at the attempt's cancellation token."""


class UnusableReply(Exception):
    """The reply is refused before the SDK sees it (too large, compressed)."""


@contextmanager
def attempt_deadline(deadline: float, cancel: Cancellation | None = None) -> Iterator[None]:
    """Within the block, every socket operation of this thread ends by `deadline` (monotonic).

    With `cancel`, it also ends (`Cancelled`) within `CANCEL_POLL_S` of the token firing.
    """
    token = _DEADLINE.set(deadline)
    watched = _CANCEL.set(cancel)
    try:
        yield
    finally:
        _CANCEL.reset(watched)
        _DEADLINE.reset(token)


def _sliced(operation: Callable[[float | None], Any], timeout: float | None,
            error: type[Exception]) -> Any:
    """`operation(timeout)`, waiting in slices while a cancellation token is watched."""
    cancel = _CANCEL.get()
    if cancel is None:
        return operation(_bounded(timeout, error))
    while True:
        cancel.check()
        bounded = _bounded(timeout, error)
        step = CANCEL_POLL_S if bounded is None else min(bounded, CANCEL_POLL_S)
        started = time.monotonic()
        try:
            return operation(step)
        except httpcore2.ReadTimeout:
            if cancel.is_set():
                raise Cancelled(cancel.reason) from None
            if bounded is not None and step >= bounded:
                raise
            if timeout is not None:
                timeout -= time.monotonic() - started


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout`, shortened to the time left before the deadline; `error` once it has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the attempt's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    """A connection whose every operation ends by the current attempt's deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = _sliced(lambda step: self._inner.read(max_bytes, step), timeout,
                              httpcore2.ReadTimeout)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        cancel = _CANCEL.get()  # not sliced: a write cut short cannot be resumed
        if cancel is not None:
            cancel.check()
        self._inner.write(buffer, _bounded(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        bounded = _bounded(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    """Opens connections as `inner` does and wraps each in a `_DeadlineStream`."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        bounded = _bounded(timeout, httpcore2.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, bounded, local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        bounded = _bounded(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _CappedStream(httpx2.SyncByteStream):
    """A response body that raises `UnusableReply` past `limit` bytes."""

    def __init__(self, inner: httpx2.SyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise UnusableReply(
                    f"the model endpoint's reply is larger than max_reply_bytes of {self._limit}"
                )
            yield chunk

    def close(self) -> None:
        self._inner.close()


class GuardedTransport(httpx2.HTTPTransport):
    """httpx's own transport, with the deadline backend, identity encoding and a body cap."""

    def __init__(self, *, max_bytes: int, proxy: str | None = None) -> None:
        super().__init__(verify=shared_ssl_context(), proxy=proxy)
        pool = self._pool  # httpcore's pool (or proxy pool): swap in the guarded backend
        pool._network_backend = _DeadlineBackend(pool._network_backend)
        self._max_bytes = max_bytes

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send with `Accept-Encoding: identity`; refuse encoded replies; cap the body."""
        request.headers["accept-encoding"] = "identity"
        response = super().handle_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.close()
            raise UnusableReply(
                f"the model endpoint compressed its reply ({encoding[:40]!r}) although sbx "
                "asked for identity encoding"
            )
        if not isinstance(response.stream, httpx2.SyncByteStream):  # pragma: no cover
            raise TypeError("a sync transport returned an async stream")
        response.stream = _CappedStream(response.stream, self._max_bytes)
        return response


_SSL_CONTEXT_LOCK = threading.Lock()


def shared_ssl_context() -> ssl.SSLContext:
    """The TLS settings every model client verifies with: httpx's defaults, made once.

    Building them loads the CA bundle (26 ms of CPU here), and a client is built
    for every conversation; the environment's `SSL_CERT_FILE` and `SSL_CERT_DIR`,
    which httpx honours, key the shared copy. Built under a lock: a burst of new
    conversations would otherwise each build one while the first is being made (an
    `lru_cache` does not hold callers back), 26 ms apiece at the worst moment.
    """
    with _SSL_CONTEXT_LOCK:
        return _ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _ssl_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    del cert_file, cert_dir  # the cache key: httpx reads them from the environment itself
    return httpx2.create_ssl_context()


def guarded_client(base_url: str | None, *, max_bytes: int) -> httpx2.Client:
    """The httpx client the SDK sends through (redirects followed as the SDK's own does)."""
    transport = GuardedTransport(max_bytes=max_bytes, proxy=_env_proxy(base_url))
    return httpx2.Client(transport=transport, follow_redirects=True)


def _env_proxy(base_url: str | None) -> str | None:
    """The proxy the environment names for this URL (`HTTPS_PROXY`, `NO_PROXY`...), if any."""
    parts = urlsplit(base_url or "https://api.openai.com/v1")
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy
