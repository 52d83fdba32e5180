"""`Siblings`: the other workers of this `sbx serve`, and requests forwarded to them.

A conversation's sandbox and messages live in the worker that holds it. A
change to it (a question, an answer, a delete, a run's cancel) that the kernel
handed to another worker of the same server is passed to the holder over its
private Unix socket (`WorkerSlot.socket_path`, in a directory only the
server's user can enter) and its answer returned as is: the client talks to one
address and never sees a redirect. The holder authenticates the request again
(the same headers). A forwarded request carries `Sbx-Forwarded`, and is never
forwarded a second time (ownership that moved meanwhile gets a 307 instead).
Replicas on other hosts are not siblings: those still answer 307.

The faces whose sessions live in one process and carry no conversation id in
their path (`/mcp`, whose sessionless clients share a sandbox per key and
name; E2B's `/e2b/...`) are served by worker 0 alone: `Pinned` streams such a
request, both ways, to worker 0 from any other worker (its per-key limits,
such as `mcp_sessions`, are then the host's). It relays the event stream of a
run that a sibling runs to that sibling too, whose stream comes from memory;
when the sibling does not answer, the stream is served here from the store.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.from_thread
import httpx
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sbx.agent import UNFINISHED_STATUSES, Database, Replica, RunRow
from sbx.agent.service.api import Call
from sbx.agent.service.problems import problem_response, unavailable

logger = logging.getLogger(__name__)

FORWARDED = "sbx-forwarded"
"""The header a forwarded request carries (its value: the forwarding replica's id)."""
FORWARD_TIMEOUT_S = 120.0
"""Seconds a forwarded change may take (a delete waits for its run's cancel)."""
CONNECTIONS = 8
"""Connections kept open to each sibling for forwarded changes."""
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                  "content-encoding", "te", "upgrade", "proxy-connection", "x-request-id"})
_HOP_RAW = _HOP - {"content-length", "content-encoding"}
"""What a relayed stream drops: its bytes go as they are, so their length and encoding stay."""


def to_owner(call: Call, owner: Replica) -> Response:
    """The owner's answer to a change: forwarded to a sibling worker, else a 307 to it."""
    forwarded = call.service.siblings.forward(call.request, owner.id, call.request_id)
    if forwarded is not None:
        return forwarded
    url = call.request.url
    target = owner.advertise_url.rstrip("/") + url.path + (f"?{url.query}" if url.query else "")
    return RedirectResponse(target, status_code=307)


class Siblings:
    """The other workers, by replica id; `forward` passes a request to one of them."""

    def __init__(self, me: str, sockets: dict[str, Path], *, db: Database,
                 primary: Path | None = None) -> None:
        self.me = me
        self.sockets = sockets
        self.db = db
        self.primary = primary
        """Worker 0's socket, when this is another worker: the pinned faces go there."""
        self._clients: dict[str, httpx.Client] = {}
        self._lock = threading.Lock()

    def __contains__(self, replica_id: object) -> bool:
        return replica_id in self.sockets

    def forward(self, request: Request, replica_id: str, request_id: str) -> Response | None:
        """The sibling's answer to `request` (on a handler's worker thread), or None.

        None when `replica_id` is no sibling or the request was forwarded already. A
        sibling that does not answer (it is restarting) is a 503 with `Retry-After`.
        """
        if replica_id not in self.sockets or FORWARDED in request.headers:
            return None
        body = anyio.from_thread.run(request.body)  # read already: the handler's body
        headers = [(name, value) for name, value in request.headers.items()
                   if name not in _HOP and name != FORWARDED]
        headers += [(FORWARDED, self.me), ("x-request-id", request_id)]
        url = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            answer = self._client(replica_id).request(request.method, url, content=body,
                                                      headers=headers)
        except httpx.HTTPError as exc:
            logger.warning("worker %s did not answer a forwarded request: %s", replica_id,
                           type(exc).__name__)
            raise unavailable("the worker that holds this conversation is restarting; "
                              "retry shortly", retry_after=2.0) from None
        kept = {name: value for name, value in answer.headers.items() if name not in _HOP}
        return Response(answer.content, status_code=answer.status_code, headers=kept)

    def running_at(self, run_id: str) -> Path | None:
        """The socket of the sibling running `run_id` (None: not running, or here)."""
        with self.db.read() as session:
            found = session.execute(select(RunRow.replica_id, RunRow.status)
                                    .where(RunRow.id == run_id)).first()
        if found is None or found.status not in UNFINISHED_STATUSES:
            return None
        return self.sockets.get(found.replica_id)

    def close(self) -> None:
        """Close the connections to every sibling."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    def _client(self, replica_id: str) -> httpx.Client:
        with self._lock:
            client = self._clients.get(replica_id)
            if client is None:
                transport = httpx.HTTPTransport(uds=str(self.sockets[replica_id]))
                client = httpx.Client(
                    transport=transport, base_url="http://sibling", timeout=FORWARD_TIMEOUT_S,
                    limits=httpx.Limits(max_connections=CONNECTIONS,
                                        max_keepalive_connections=CONNECTIONS))
                self._clients[replica_id] = client
            return client


PINNED = ("/mcp", "/e2b/")
"""Paths served by worker 0 alone (`Pinned`)."""


def pinned(path: str) -> bool:
    """Whether `path` belongs to a face whose sessions live in worker 0."""
    return path == PINNED[0] or path.startswith((PINNED[0] + "/", PINNED[1]))


EVENTS = re.compile(r"/v1/runs/([A-Za-z0-9_.-]{1,100})/events")
"""A run's event stream: relayed to the sibling running it, which streams it from memory."""


class Pinned:
    """ASGI: a request that a sibling serves best, streamed to it and its answer streamed back.

    Relayed: the pinned faces' requests (to worker 0), and the event stream of a run
    that a sibling is running (to that sibling, whose stream comes from memory instead
    of re-reading the store every second; if it does not answer, the stream is served
    here, from the store). The request passed this worker's gateway and is
    authenticated again by the sibling; the answer is relayed as it comes, until it
    ends or the client goes away.
    """

    def __init__(self, app: ASGIApp, siblings: Siblings) -> None:
        self.app = app
        self.siblings = siblings
        self._clients: dict[Path, httpx.AsyncClient] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Relay to the sibling that serves it; serve anything else here."""
        target, required = await self._target(scope)
        if target is None:
            await self.app(scope, receive, send)
            return
        client = self._clients.get(target)
        if client is None:
            client = self._clients[target] = httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=str(target)),
                timeout=httpx.Timeout(None, connect=5.0))
        headers = [(name, value) for name, value in scope["headers"]
                   if name.decode("latin-1").lower() not in _HOP_RAW]
        request_id = str((scope.get("state") or {}).get("request_id", ""))
        headers += [(FORWARDED.encode(), self.siblings.me.encode()),
                    (b"x-request-id", request_id.encode())]
        query = scope.get("query_string", b"").decode("latin-1")
        url = "http://sibling" + scope["path"] + (f"?{query}" if query else "")
        request = client.build_request(scope["method"], url, headers=headers,
                                       content=_body(receive))
        try:
            answer = await client.send(request, stream=True)
        except httpx.HTTPError:
            if not required:  # the store has the run's events too
                await self.app(scope, receive, send)
                return
            await problem_response(
                {"type": "about:blank", "title": "Service Unavailable", "status": 503,
                 "detail": "worker 0, which serves this, is restarting; retry shortly"},
                503, {"Retry-After": "2"})(scope, receive, send)
            return
        try:
            await _relay(answer, receive, send)
        finally:
            await answer.aclose()

    async def _target(self, scope: Scope) -> tuple[Path | None, bool]:
        """(the sibling's socket to relay to, or None; whether only it can serve this)."""
        siblings = self.siblings
        if scope["type"] != "http" or not siblings.sockets or any(
                name == FORWARDED.encode() for name, _ in scope["headers"]):
            return None, False
        if pinned(scope["path"]):
            return siblings.primary, True
        found = EVENTS.fullmatch(scope["path"])
        if found is None or scope["method"] != "GET":
            return None, False
        return await run_in_threadpool(siblings.running_at, found[1]), False


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _relay(answer: httpx.Response, receive: Receive, send: Send) -> None:
    """Send the answer as it comes; stop when the client disconnects."""
    raw = [(name, value) for name, value in answer.headers.raw
           if name.decode("latin-1").lower() not in _HOP_RAW]
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            message: Message = await receive()
            while message["type"] != "http.disconnect":
                message = await receive()
            group.cancel_scope.cancel()

        group.start_soon(watch)
        await send({"type": "http.response.start", "status": answer.status_code,
                    "headers": raw})
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        group.cancel_scope.cancel()
