"""E2B's control plane at `/e2b/api`: the SDK's `Sandbox.create`, `connect`, `list`, `kill`...

Every request carries `X-API-Key: <an sbx API key>`; its principal owns what
it creates, and sees nothing of another key's (a foreign id is 404, the
SDK's `NotFoundException`). Errors are E2B's `{code, message}`: 401, 404,
429 (the SDK's `RateLimitException`, with `Retry-After`), 400, 503.

Templates: `code-interpreter-v1` and `base` (and the SDK's `-v1` aliases) mean
sbx's one image; any other template is 404, as E2B answers an unknown one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sbx.agent import HostBusy, Owner, SessionNotFound, describe_validation_error
from sbx.agent.e2b.files import HOME
from sbx.agent.e2b.sandboxes import E2bSandbox, Refused, Sandboxes

TEMPLATES = {"code-interpreter-v1": "code-interpreter-v1",
             "code-interpreter": "code-interpreter-v1", "base": "base", "base-v1": "base"}
"""The templates sbx serves, each by sbx's default image (E2B's names and aliases)."""
ENVD_VERSION = "0.5.6"
"""The envd features the face speaks: multipart uploads, no file metadata, no PTY."""
BUSY_RETRY_S = 10.0
"""Retry-After when the host's sandbox cap stays full (`HostBusy`)."""
FAILURES = (Refused, SessionNotFound, HostBusy, ValueError)
"""What a handler may raise for its caller to read (`error`)."""
Handler = Callable[[Request, Owner, Sandboxes], Awaitable[Response]]


class Body(BaseModel):
    """What a create, connect or timeout request may say (the rest is ignored)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    templateID: str = "base"
    timeout: int = Field(default=300, ge=1)
    """Seconds from now (E2B's default 300); `duration` is the refresh's name for it."""
    duration: int | None = Field(default=None, ge=1)
    metadata: dict[str, str] | None = None
    envVars: dict[str, str] | None = None


def error(exc: Exception) -> Response:
    """E2B's error body for a refusal (`FAILURES`); `Retry-After` when the host said when."""
    if isinstance(exc, ValidationError):
        exc = Refused(400, describe_validation_error(exc))
    elif not isinstance(exc, Refused):
        busy = isinstance(exc, HostBusy)
        status = 404 if isinstance(exc, SessionNotFound) else 503 if busy else 400
        exc = Refused(status, str(exc), retry_after=BUSY_RETRY_S if busy else None)
    headers = {"Retry-After": str(max(1, int(exc.retry_after)))} if exc.retry_after else None
    return JSONResponse({"code": exc.status, "message": exc.message}, exc.status,
                        headers=headers)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def created(sandbox: E2bSandbox) -> dict[str, Any]:
    """The SDK's `Sandbox`: ids, envd version and the access token for the sandbox URL."""
    return {"templateID": sandbox.template, "sandboxID": sandbox.id,
            "clientID": "sbx", "envdVersion": ENVD_VERSION, "envdAccessToken": sandbox.token,
            "trafficAccessToken": sandbox.token, "domain": None}


def detail(sandbox: E2bSandbox) -> dict[str, Any]:
    """The SDK's `SandboxDetail` / `ListedSandbox`."""
    limits = sandbox.limits
    return {**created(sandbox), "startedAt": _iso(sandbox.started_at),
            "endAt": _iso(sandbox.end_at), "cpuCount": max(1, int(limits.cpus)),
            "memoryMB": int(limits.memory) // 2**20, "diskSizeMB": 0,
            "state": "paused" if sandbox.paused else "running",
            "metadata": sandbox.metadata}


async def _body(request: Request) -> Body:
    raw = await request.body()
    return Body.model_validate_json(raw) if raw.strip() else Body()


async def create(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`POST /sandboxes`: a new sandbox of the default image (its container opens on use)."""
    body = await _body(request)
    template = TEMPLATES.get(body.templateID)
    if template is None:
        raise Refused(404, f"template {body.templateID!r} not found: sbx serves "
                      "code-interpreter-v1 and base (its one image); custom templates are not "
                      "supported")
    sandbox = await run_in_threadpool(
        sandboxes.create, owner, timeout_s=body.timeout, run_kind="e2b",
        envs=body.envVars or {}, cwd=HOME, template=template, metadata=body.metadata or {})
    return JSONResponse(created(sandbox), 201)


async def listing(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`GET /v2/sandboxes`: the key's sandboxes, filtered by metadata and state (one page)."""
    wanted = dict(parse_qsl(request.query_params.get("metadata", "")))
    states = set(filter(None, request.query_params.get("state", "").split(",")))
    rows = [detail(s) for s in sandboxes.of(owner)
            if all(s.metadata.get(k) == v for k, v in wanted.items())]
    return JSONResponse([row for row in rows if not states or row["state"] in states])


async def get(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`GET /sandboxes/{id}`."""
    return JSONResponse(detail(_found(request, owner, sandboxes)))


def acting(action: Callable[[Sandboxes, E2bSandbox], None]) -> Handler:
    """A handler doing `action` to the caller's sandbox, then answering 204.

    `DELETE /sandboxes/{id}` (`kill`: a running execution ends with the SDK's error)
    and `POST .../pause` (`pause`: sbx's idle release; the state comes back on resume).
    """
    async def handler(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
        await run_in_threadpool(action, sandboxes, _found(request, owner, sandboxes))
        return Response(status_code=204)
    return handler


async def set_timeout(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`POST /sandboxes/{id}/timeout` (and `/refreshes`): killed that long from now."""
    sandbox = _found(request, owner, sandboxes)
    body = await _body(request)
    sandboxes.set_timeout(sandbox, body.duration or body.timeout)
    return Response(status_code=204)


async def connect(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`POST /sandboxes/{id}/connect` and `/resume`: running again (state restored on use)."""
    sandbox = _found(request, owner, sandboxes)
    body = await _body(request)
    if "timeout" in body.model_fields_set:
        sandboxes.set_timeout(sandbox, body.timeout)
    resumed, sandbox.paused = sandbox.paused, False
    status = 201 if resumed or request.url.path.endswith("/resume") else 200
    return JSONResponse(created(sandbox), status)


def _found(request: Request, owner: Owner, sandboxes: Sandboxes) -> E2bSandbox:
    return sandboxes.find(owner, request.path_params["sandbox_id"])


def routes(sandboxes: Sandboxes, authenticate: Callable[[str], Owner]) -> list[Route]:
    """The control plane's routes, each behind the `X-API-Key` check."""

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                key = request.headers.get("x-api-key", "")
                if not key:
                    raise Refused(401, "send your sbx API key as X-API-Key (E2B_API_KEY)")
                owner = await run_in_threadpool(authenticate, key)
                return await handler(request, owner, sandboxes)
            except FAILURES as exc:
                return error(exc)
        return endpoint

    one = "/sandboxes/{sandbox_id}"
    table: list[tuple[str, Handler, list[str]]] = [
        ("/sandboxes", create, ["POST"]), ("/v2/sandboxes", create, ["POST"]),
        ("/sandboxes", listing, ["GET"]), ("/v2/sandboxes", listing, ["GET"]),
        (one, get, ["GET"]), (one, acting(Sandboxes.kill), ["DELETE"]),
        (one + "/timeout", set_timeout, ["POST"]), (one + "/refreshes", set_timeout, ["POST"]),
        (one + "/pause", acting(Sandboxes.pause), ["POST"]), (one + "/resume", connect, ["POST"]),
        (one + "/connect", connect, ["POST"]), ("/v2" + one + "/connect", connect, ["POST"]),
    ]
    return [Route(path, guarded(handler), methods=methods) for path, handler, methods in table]
