"""`Siblings`: the other workers of this `sbx serve`, and requests forwarded to them.

A conversation's sandbox and messages live in the worker that holds it. A
change to it (a question, an answer, a delete, a run's cancel) that the kernel
handed to another worker of the same server is passed to the holder over its
private Unix socket (`workers.WorkerSlot.socket_path`, in a directory only the
server's user can enter) and its answer returned as is: the client talks to one
address and never sees a redirect. The holder authenticates the request again
(the same headers). A forwarded request carries `Sbx-Forwarded`, and is never
forwarded a second time (ownership that moved meanwhile gets a 307 instead).
Replicas on other hosts are not siblings: those still answer 307.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import anyio.from_thread
import httpx
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sbx.agent.service.api import Call
from sbx.agent.service.problems import unavailable
from sbx.agent.store.models import Replica

logger = logging.getLogger(__name__)

FORWARDED = "sbx-forwarded"
"""The header a forwarded request carries (its value: the forwarding replica's id)."""
FORWARD_TIMEOUT_S = 120.0
"""Seconds a forwarded change may take (a delete waits for its run's cancel)."""
CONNECTIONS = 8
"""Connections kept to each sibling (far below its per-client cap)."""
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                  "content-encoding", "te", "upgrade", "proxy-connection", "x-request-id"})


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

    def __init__(self, me: str, sockets: dict[str, Path]) -> None:
        self.me = me
        self.sockets = sockets
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
