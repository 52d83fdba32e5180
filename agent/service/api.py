"""How an endpoint is declared, authenticated and fed: one decorator, one `Call`.

    @api("POST", "/v1/conversations", body=CreateConversation, response=ConversationOut,
         status=201)
    def create(call: Call, body: CreateConversation) -> Response: ...

Each declared route, in this order: the bearer key is looked up (401 when it
is missing, unknown or revoked; the principal comes from the key and only
from it), or, without one, the web page's session cookie (a change made with
the cookie must also pass its Origin and CSRF checks: `web/signin_sessions.py`);
the JSON body is read (bounded by the gateway), parsed and validated against
the declared model (400 malformed, 415 not JSON, 422 invalid, unknown keys
included); then the handler runs, a plain function on
a worker thread (database and sandbox calls block). Handlers that stream
(uploads, Server-Sent Events) are `async` and run on the event loop. A
handler declared `work=True` (it waits for the host and runs code) runs on a
work thread instead, in one of its key's `max_in_flight` slots
(`sbx.agent.service.admission`), so request threads stay free.

The same declarations build `/openapi.json` (`sbx.agent.service.openapi`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sbx.agent import KeyInfo
from sbx.agent.service.admission import Held
from sbx.agent.service.problems import Problem
from sbx.agent.service.web.signin_sessions import cookie_key

if TYPE_CHECKING:
    from sbx.agent.service.host import Service

JSON_TYPES = ("application/json",)


@dataclass(frozen=True, kw_only=True)
class Call:
    """One authenticated request, as a handler sees it."""

    service: Service
    """The running service (store, run manager, configuration)."""
    key: KeyInfo
    """The API key that authenticated the request."""
    params: Mapping[str, str]
    """Path parameters."""
    request: Request
    """The request (headers, query; streaming handlers read the body from it)."""
    request_id: str
    """The gateway's request id."""

    @property
    def principal(self) -> str:
        """Who asks: `key:<name>` from the key alone, or `oidc:<claim>` from a verified ID token."""
        return self.key.principal

    @property
    def headers(self) -> Headers:
        """The request headers."""
        return self.request.headers


Handler = Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class Spec:
    """A declared endpoint."""

    method: str
    path: str
    handler: Handler
    body: type[BaseModel] | None
    response: type[BaseModel] | None
    status: int
    summary: str
    streams: str | None
    """The media type of a streamed answer (`text/event-stream`), else None."""
    auth: bool
    work: bool = False
    """Long work (waits for the host, runs code): off the request threads, in the key's
    `max_in_flight` slots (`sbx.agent.service.admission`)."""


ROUTES: list[Spec] = []


def api(
    method: str,
    path: str,
    *,
    body: type[BaseModel] | None = None,
    response: type[BaseModel] | None = None,
    status: int = 200,
    streams: str | None = None,
    auth: bool = True,
    work: bool = False,
) -> Callable[[Handler], Handler]:
    """Declare an endpoint (see the module docstring)."""

    def register(handler: Handler) -> Handler:
        doc = inspect.getdoc(handler) or ""
        ROUTES.append(Spec(
            method=method, path=path, handler=handler, body=body, response=response,
            status=status, summary=doc.splitlines()[0] if doc else "", streams=streams,
            auth=auth, work=work,
        ))
        return handler

    return register


def starlette_routes(specs: list[Spec]) -> list[Route]:
    """Starlette routes for the declared endpoints, grouped by path."""
    by_path: dict[str, dict[str, Spec]] = {}
    for spec in specs:
        by_path.setdefault(spec.path, {})[spec.method] = spec
    return [Route(path, _dispatch(methods), methods=list(methods)) for path, methods in
            by_path.items()]


def _dispatch(methods: dict[str, Spec]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        spec = methods[request.method if request.method != "HEAD" else "GET"]
        service: Service = request.app.state.service
        key = await run_in_threadpool(authenticate_request, service, request) if spec.auth \
            else ANONYMOUS
        request.scope["state"]["principal"] = key.principal
        body = await read_json(request, spec.body) if spec.body is not None else None
        call = Call(service=service, key=key, params=dict(request.path_params),
                    request=request, request_id=request.scope["state"]["request_id"])
        args = (call, body) if spec.body is not None else (call,)
        if inspect.iscoroutinefunction(spec.handler):
            result: Response = await spec.handler(*args)
            return result
        if spec.work:
            return await _work(service, key, spec.handler, args)
        answer: Response = await run_in_threadpool(spec.handler, *args)
        return answer

    return endpoint


async def _work(service: Service, key: KeyInfo, handler: Handler, args: tuple[Any, ...]
                ) -> Response:
    """A work handler: in one of the key's slots, on a work thread, until its answer is sent."""
    release = service.admission.take(key.principal, service.settings.max_in_flight)
    try:
        answer: Response = await service.admission.work(handler, *args)
    except BaseException:
        release()
        raise
    return Held(answer, release)


ANONYMOUS = KeyInfo(name="-", role="user", created_at=0.0, revoked_at=None, overrides={})


def authenticate_request(service: Service, request: Request) -> KeyInfo:
    """The bearer key of the request, else its web session's key (checked for forgery), or 401."""
    if "authorization" not in request.headers:
        key = cookie_key(service, request)
        if key is not None:
            return key
    return authenticate(service, request.headers)


def authenticate(service: Service, headers: Headers) -> KeyInfo:
    """The live key of `Authorization: Bearer KEY`, or 401."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("send your API key as 'Authorization: Bearer KEY'")
    key = service.keys.lookup(token.strip())
    if key is None:
        raise _unauthorized("the API key is unknown or was revoked")
    return key


def _unauthorized(detail: str) -> Problem:
    return Problem(401, "unauthorized", detail, headers={"WWW-Authenticate": 'Bearer realm="sbx"'})


async def read_json(request: Request, model: type[BaseModel]) -> BaseModel:
    """The body validated against `model`: 415, 400 or 422 problems otherwise.

    An empty body is `{}` (every field's default). Duplicate keys are refused:
    two parsers could disagree on which one counts.
    """
    raw = await request.body()
    if not raw.strip():
        data: Any = {}
    else:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media not in JSON_TYPES:
            raise Problem(415, "unsupported-media-type",
                          f"send the body as application/json (got {media or 'no content type'})")
        try:
            data = json.loads(raw, object_pairs_hook=_no_duplicates)
        except (ValueError, RecursionError) as exc:
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:200]
            raise Problem(400, "malformed-json", f"the body is not valid JSON: {detail}") from None
    if not isinstance(data, dict):
        raise Problem(400, "malformed-json", "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": [str(part) for part in error["loc"]], "msg": error["msg"],
             "type": error["type"]}
            for error in exc.errors(include_url=False, include_input=False)[:20]
        ]
        first = errors[0]
        where = ".".join(first["loc"]) or "body"
        message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise Problem(422, "invalid-request", f"{where}: {message}", errors=errors) from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def json_response(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None
                  ) -> Response:
    """A pydantic model as a JSON answer."""
    return Response(model.model_dump_json(), status_code=status, headers=headers,
                    media_type="application/json")
