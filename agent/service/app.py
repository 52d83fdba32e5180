"""The ASGI application of `sbx serve`: declared routes, problem answers, the gateway around it.

    Gateway (request id, draining, body bounds, error net, observer)   middleware.py
      └─ Pinned: /mcp and /e2b/ on worker 0 of `--workers N`          siblings.py
      └─ Starlette: exception handlers turn every error into a problem document
           ├─ /healthz /readyz                                        health.py
           ├─ /metrics (admin keys)                                   metrics.py
           ├─ /openapi.json                                           openapi.py
           ├─ /v1/datasets ...                                        datasets.py
           ├─ /v1/datasets/{id}/notes ...                             notes.py
           ├─ /v1/conversations ...                                   conversations.py
           ├─ /v1/runs ... (SSE events, artifacts)                    runs_api.py, sse.py
           ├─ /v1/execute                                             execute.py
           ├─ /v1/usage, /v1/conversations/{id}/export|transcript     usage.py, exports.py
           ├─ /mcp (MCP streamable HTTP)                              mcp_http.py
           ├─ /e2b/api, /e2b/sandbox (E2B's SDK, unchanged)           sbx.agent.e2b, e2b_host.py
           └─ the web page: /, /static/*, /web/session, /web/oidc/*    web/
    every answer gets the security headers (CSP, framing, resource policy)  web/headers.py

The service is opened before the server starts (so a bad policy or an
unreachable database fails the start, not the first request); the lifespan's
shutdown ends every MCP session, then closes it after uvicorn has stopped
accepting and drained.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from sbx.agent import notify_observer
from sbx.agent.e2b.app import E2bFace
from sbx.agent.service import (
    conversations,
    datasets,
    execute,
    exports,
    health,
    metrics,
    notes,
    runs_api,
    usage,
)
from sbx.agent.service.api import ROUTES, starlette_routes
from sbx.agent.service.e2b_host import ServiceE2bHost
from sbx.agent.service.host import Service
from sbx.agent.service.mcp_http import MCP_PATH, McpEndpoint
from sbx.agent.service.middleware import BodyTimeout, BodyTooLarge, Gateway
from sbx.agent.service.openapi import openapi_document
from sbx.agent.service.problems import Problem, respond
from sbx.agent.service.siblings import Pinned
from sbx.agent.service.web import oidc, pages, signin
from sbx.agent.service.web.headers import SecurityHeaders

ENDPOINT_MODULES = (
    conversations, datasets, execute, exports, health, metrics, notes, oidc, runs_api, signin,
    usage,
)
"""Imported for their `@api` declarations."""


def create_app(service: Service) -> ASGIApp:
    """The ASGI application serving `service` (which the lifespan closes at shutdown)."""
    document = openapi_document(ROUTES)
    mcp = McpEndpoint(service)
    e2b = E2bFace(ServiceE2bHost(service))
    sandboxes = e2b.sandboxes  # their idle sandboxes share the host too
    service.share.add_sessions(lambda: ((kept.principal, kept) for kept in sandboxes.live()))

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.running(), e2b.running(service.settings.heartbeat):
            yield
        await run_in_threadpool(service.close)

    app = Starlette(
        routes=[*starlette_routes(ROUTES), Route("/openapi.json", openapi, methods=["GET"]),
                Route(MCP_PATH, mcp), Mount("/e2b/api", e2b.api),
                Mount("/e2b/sandbox", e2b.sandbox), *pages.routes()],
        exception_handlers={
            Problem: _problem, HTTPException: _http_error, BodyTooLarge: _too_large,
            BodyTimeout: _client_timeout, ClientDisconnect: _gone, Exception: _internal,
        },
        lifespan=lifespan,
    )
    app.state.service = service
    service.gateway.unbounded = (
        lambda method, path: method == "POST" and path == datasets.UPLOAD_PATH
    )
    return Gateway(Pinned(SecurityHeaders(app), service.siblings), service.gateway)


def _request_id(request: Request) -> str | None:
    state = request.scope.get("state") or {}
    value = state.get("request_id")
    return str(value) if value else None


async def _problem(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, Problem):  # pragma: no cover - registered for Problem only
        raise exc
    quota = exc.extra.get("quota")
    if quota:
        service: Service = request.app.state.service
        principal = (request.scope.get("state") or {}).get("principal", "-")
        notify_observer(service.observer.quota_rejected, principal=principal, quota=str(quota))
    return respond(exc, _request_id(request))


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    slug = {404: "not-found", 405: "method-not-allowed"}.get(status, "http-error")
    detail = {404: f"no such endpoint {request.url.path[:200]!r}",
              405: f"{request.method} is not allowed here"}.get(status, str(exc)[:200])
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    return respond(Problem(status, slug, detail, headers=headers), _request_id(request))


async def _too_large(request: Request, exc: Exception) -> Response:
    limit = exc.limit if isinstance(exc, BodyTooLarge) else 0
    problem = Problem(413, "body-too-large", f"the request body is larger than {limit} bytes",
                      headers={"Connection": "close"})
    return respond(problem, _request_id(request))


async def _client_timeout(request: Request, exc: Exception) -> Response:
    problem = Problem(408, "body-timeout", f"{exc}; send the body without pauses",
                      headers={"Connection": "close"})
    return respond(problem, _request_id(request))


async def _gone(request: Request, exc: Exception) -> Response:
    """The client hung up mid-body: nobody will read the answer, and nothing failed here."""
    return Response(status_code=400, headers={"Connection": "close"})


async def _internal(request: Request, exc: Exception) -> Response:
    rid = _request_id(request)
    return respond(Problem(500, "internal", f"internal error (request {rid})"), rid)
