"""E2B's control plane at `/e2b/api`: the SDK's `Sandbox.create`, `connect`, `list`, `kill`...

Every request carries `X-API-Key: <an sbx API key>`; its principal owns what
it creates, and sees nothing of another key's (a foreign id is 404, the
SDK's `NotFoundException`). Errors are E2B's `{code, message}`: 401, 404,
429 (the SDK's `RateLimitException`, with `Retry-After`), 400.

Templates: `code-interpreter-v1` and `base` (and the SDK's `-v1` aliases) mean
sbx's one image; any other template is 404, as E2B answers an unknown one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sbx.agent import Owner, SessionNotFound
from sbx.agent.e2b.host import Refused
from sbx.agent.e2b.sandboxes import E2bSandbox, Sandboxes

TEMPLATES = {"code-interpreter-v1": "code-interpreter-v1",
             "code-interpreter": "code-interpreter-v1", "base": "base", "base-v1": "base"}
"""The templates sbx serves, each by sbx's default image (E2B's names and aliases)."""
ENVD_VERSION = "0.5.6"
"""The envd features the face speaks: multipart uploads, no file metadata, no PTY."""
DEFAULT_TIMEOUT_S = 300
"""E2B's default sandbox timeout when the create names none."""
Handler = Callable[[Request, Owner, Sandboxes], Awaitable[Response]]


def error(exc: Refused) -> Response:
    """E2B's error body; 429 with `Retry-After` when the host said when."""
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
    limits = sandbox.workspace.config.limits
    return {**created(sandbox), "startedAt": _iso(sandbox.started_at),
            "endAt": _iso(sandbox.end_at), "cpuCount": max(1, int(limits.cpus)),
            "memoryMB": int(limits.memory) // 2**20, "diskSizeMB": 0,
            "state": "paused" if sandbox.paused else "running",
            "metadata": sandbox.metadata}


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = await request.json()
    except ValueError:
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(data, dict):
        raise Refused(400, "the body is not a JSON object")
    return data


def _strings(value: object, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise Refused(400, f"{name}: an object of strings")
    return dict(value)


def _timeout(body: dict[str, Any]) -> int:
    value = body.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refused(400, "timeout: whole seconds")
    return value


async def create(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`POST /sandboxes`: a new sandbox of the default image (its container opens on use)."""
    body = await _body(request)
    template = TEMPLATES.get(str(body.get("templateID", "")))
    if template is None:
        raise Refused(404, f"template {body.get('templateID')!r} not found: sbx serves "
                      "code-interpreter-v1 and base (its one image); custom templates are not "
                      "supported")
    sandbox = await run_in_threadpool(
        sandboxes.create, owner, timeout_s=_timeout(body), run_kind="e2b",
        envs=_strings(body.get("envVars"), "envVars"), template=template,
        metadata=_strings(body.get("metadata"), "metadata"))
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

    `DELETE /sandboxes/{id}` (`Sandboxes.kill`: a running execution ends with the SDK's
    error) and `POST .../pause` (`Sandboxes.pause`: sbx's idle release; the state comes
    back on resume).
    """
    async def handler(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
        await run_in_threadpool(action, sandboxes, _found(request, owner, sandboxes))
        return Response(status_code=204)
    return handler


async def set_timeout(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`POST /sandboxes/{id}/timeout` (and `/refreshes`): killed that long from now."""
    sandbox = _found(request, owner, sandboxes)
    body = await _body(request)
    seconds = body.get("duration", body.get("timeout", DEFAULT_TIMEOUT_S))
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise Refused(400, "timeout: whole seconds")
    sandboxes.set_timeout(sandbox, seconds)
    return Response(status_code=204)


async def connect(request: Request, owner: Owner, sandboxes: Sandboxes) -> Response:
    """`POST /sandboxes/{id}/connect` and `/resume`: running again (state restored on use)."""
    sandbox = _found(request, owner, sandboxes)
    body = await _body(request)
    if "timeout" in body:
        sandboxes.set_timeout(sandbox, _timeout(body))
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
            except Refused as exc:
                return error(exc)
            except SessionNotFound as exc:
                return error(Refused(404, str(exc)))
            except ValueError as exc:  # a timeout out of range
                return error(Refused(400, str(exc)))
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
