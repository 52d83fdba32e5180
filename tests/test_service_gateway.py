"""The gateway every request passes: draining, request ids, the observer seam, the error net.

In-process (httpx's ASGI transport): the application behind the gateway is a
stand-in, because the gateway is what these tests are about.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sbx.agent.core.hosting.observer import Observer
from sbx.agent.service.middleware import Gateway, GatewayState
from sbx.agent.service.server import bind_listener


class Recorder(Observer):
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, int, str]] = []

    def request_finished(self, *, method, path, status, duration_s, request_id, **_) -> None:
        self.requests.append((method, path, status, request_id))


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


async def broken(scope, receive, send) -> None:
    """A bare ASGI app that fails before it answers (no framework handler in between)."""
    raise RuntimeError("secret internals /etc/sbx")


def _run(state: GatewayState, *calls: tuple[str, str, dict], inner=None) -> list[httpx.Response]:
    inner = inner or Starlette(routes=[Route("/x", ok, methods=["GET", "POST"])])

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=Gateway(inner, state), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return [await client.request(method, path, **kw) for method, path, kw in calls]

    return asyncio.run(go())


def test_while_draining_reads_pass_and_changes_get_503_and_every_request_is_observed():
    recorder = Recorder()
    state = GatewayState(max_body=100, client_timeout=5, observer=recorder, draining=True)
    get, post = _run(state, ("GET", "/x", {"headers": {"x-request-id": "abc-1"}}),
                     ("POST", "/x", {"headers": {"x-request-id": "bad id!"}}))
    assert get.status_code == 200 and get.headers["x-request-id"] == "abc-1"
    assert post.status_code == 503 and int(post.headers["retry-after"]) >= 1
    assert post.json()["type"].endswith("/draining")
    assert post.headers["x-request-id"] != "bad id!"  # a malformed id is replaced
    assert post.json()["request_id"] == post.headers["x-request-id"]
    assert [(m, p, s) for m, p, s, _ in recorder.requests] == [("GET", "/x", 200),
                                                               ("POST", "/x", 503)]
    assert recorder.requests[0][3] == "abc-1"


def test_an_unexpected_error_is_a_500_problem_without_internals(caplog):
    state = GatewayState(max_body=100, client_timeout=5, observer=Observer())
    with caplog.at_level(logging.ERROR):
        (answer,) = _run(state, ("GET", "/boom", {}), inner=broken)
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/problem+json"
    assert "secret" not in answer.text and "Traceback" not in answer.text
    assert answer.json()["request_id"] in caplog.text  # the operator can find it in the log


def test_accepted_connections_do_not_wait_for_nagle():
    listener = bind_listener("127.0.0.1", 0)

    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await asyncio.get_running_loop().create_server(Probe, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname())
        try:
            return await asyncio.wait_for(accepted, 30)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(accept_one()) == 1  # small responses leave at once on kept-alive links
