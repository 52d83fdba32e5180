"""`/mcp` on `sbx serve`: the MCP streamable HTTP transport, behind the service's keys and quotas.

    request ─▶ Gateway (request id, body bound, draining) ─▶ McpEndpoint
        1. the bearer key, as for every API route (401 without a live one); the principal
           is the key's, never the client's word
        2. `Sbx-Session`, if sent, must be a name ([A-Za-z0-9._-], 1 to 64): 400 otherwise
        3. the MCP SDK's session manager serves the request; a transport session is bound
           to the key that opened it (another key's request for it answers 404), and a
           key holds at most `[service] mcp_sessions` of them (a request that would open
           another is 429)
        4. each tool call finds its sbx session (`caller_of`), one sandbox each:
             with `Mcp-Session-Id` (a handshake-era client)   that transport session's
             without (a 2026-07-28 client opens none)         the key's session named by
                                                              `Sbx-Session`, default "default"

What a session is for a client that opens none: every sessionless request
with the same key and the same `Sbx-Session` name shares one sandbox, like
one notebook per name. Two agents on one key that must not share state send
different names (or use different keys); two keys never share anything.

A session ends (sandbox removed, `run_end` audited, its `max_conversations`
slot freed, its artifacts deleted) on the client's `DELETE` with its
`Mcp-Session-Id`, after `[service] idle_timeout` without a call (the next
call with that key gets a new session and is told earlier variables are
gone), and at shutdown (uvicorn's shutdown ends the open GET streams, so
they do not hold it for the grace). The quotas are the hosting's
(`ServiceAdmission`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from sbx.agent import (
    Caller,
    KeyInfo,
    LimitsRequest,
    ServiceAdmission,
    describe_validation_error,
    limited,
)
from sbx.agent.mcp.server import Face, SbxServer, build_server
from sbx.agent.mcp.upload import register_upload
from sbx.agent.service.api import authenticate
from sbx.agent.service.host import Service
from sbx.agent.service.problems import Problem, quota_exceeded

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"
LIMITS_HEADER = "sbx-limits"
"""JSON sandbox limits for the session the request opens, e.g. `{"timeout": "10s"}`."""
SESSION_HEADER = "sbx-session"
"""Names the session of a client that opens none (2026-07-28); ignored with Mcp-Session-Id."""
DEFAULT_SESSION = "default"
MAX_TRANSPORT_SESSIONS = 1000
"""Handshake-era transport sessions open at once on one replica (then 503); each key holds
at most `[service] mcp_sessions` of them (then 429)."""
SESSION_RETRY_S = 60.0
"""Retry-After when a key's MCP sessions are all open: ending one frees a place at once."""
DATA_NOTE = "the datasets of your API key, the newest of each name; list_data_files names them"
_SESSION_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_GRANT = "sbx.mcp.grant"


@dataclass(frozen=True, kw_only=True)
class Grant:
    """What `McpEndpoint` established for one HTTP request, for the tool handlers."""

    key: KeyInfo
    """The API key that authenticated it."""
    session_name: str
    """`Sbx-Session` (or the default): which named session a sessionless request uses."""
    limits: LimitsRequest
    """`Sbx-Limits`: the sandbox limits a session opened by this request gets (only below
    the policy's; a session already open keeps its own)."""


def session_key(principal: str, *, transport: str | None, name: str) -> str:
    """The sbx session of a request: always under its principal, so keys never meet."""
    which = f"transport:{transport}" if transport else f"named:{name}"
    return f"{principal}\n{which}"


def requested_limits(service: Service, headers: Mapping[str, str]) -> LimitsRequest:
    """`Sbx-Limits` as the core's `LimitsRequest`; malformed or above the policy: a 422."""
    raw = headers.get(LIMITS_HEADER)
    if raw is None:
        return LimitsRequest()
    try:
        request = LimitsRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise Problem(422, "bad-limits", "Sbx-Limits: a JSON object of limits (memory, cpus, "
                      f"pids, timeout, runtime, network): {describe_validation_error(exc)}"
                      ) from None
    limited(service.config, request)  # above the policy's [sandbox]: 422 naming the knob
    return request


def caller_of(ctx: Context[Any, Any]) -> Caller:
    """Who sends this MCP request and which session it belongs to (see the module docstring)."""
    request = ctx.request_context.request
    grant = request.scope.get("state", {}).get(_GRANT) if isinstance(request, Request) else None
    if not isinstance(grant, Grant):  # pragma: no cover - every /mcp request passes McpEndpoint
        raise RuntimeError("an MCP request reached sbx without its authenticated HTTP request")
    principal = grant.key.principal
    transport = request.headers.get(MCP_SESSION_ID_HEADER) if request is not None else None
    key = session_key(principal, transport=transport, name=grant.session_name)
    return Caller(key=key, principal=principal, team=grant.key.team, grant=grant.key,
                  limits=grant.limits)


class McpEndpoint:
    """The ASGI app at `/mcp`: authentication, then the SDK's transport (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        settings = service.settings
        output_root = service.paths.root / "mcp"
        output_root.mkdir(mode=0o700, exist_ok=True)
        face = Face(
            caller=caller_of, admission=ServiceAdmission(service, output_root),
            data_note=DATA_NOTE, output_root=output_root, idle_s=settings.idle_timeout,
            idle_ends_session=True, extra_tools=(register_upload,),
        )
        self.server: SbxServer = build_server(service.app, face)
        # Creates the session manager (`server.session_manager`); the Starlette app it
        # returns is not used: this endpoint is mounted in the service's own app.
        self.server.streamable_http_app(
            streamable_http_path=MCP_PATH, max_request_body_size=settings.max_body,
            session_idle_timeout=settings.idle_timeout, max_sessions=MAX_TRANSPORT_SESSIONS,
            # Every request needs the bearer key, which a page rebinding DNS to us lacks.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.manager = self.server.session_manager
        sessions = self.server.sessions  # their idle sandboxes share the host too
        service.share.add_sessions(
            lambda: ((session.caller.principal, session) for session in sessions.live()))
        self._opening: dict[str, int] = {}
        """Requests of each principal that may open a session, being served now."""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The transport's and the MCP server's lifetime: every session ends when it exits."""
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One `/mcp` request: authenticated, bound to its key, served by the SDK."""
        request = Request(scope, receive)
        key = await run_in_threadpool(authenticate, self.service, request.headers)
        state = scope.setdefault("state", {})
        state["principal"] = key.principal
        name = request.headers.get(SESSION_HEADER, DEFAULT_SESSION)
        if not _SESSION_NAME.match(name):
            raise Problem(400, "bad-session-name",
                          "Sbx-Session: a name of 1 to 64 characters from A-Za-z0-9._-")
        state[_GRANT] = Grant(key=key, session_name=name,
                              limits=requested_limits(self.service, request.headers))
        # The SDK binds each transport session to the identity that opened it.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=key.principal,
                                                      scopes=[]))
        transport = request.headers.get(MCP_SESSION_ID_HEADER)
        opening = False
        if transport is None and request.method == "POST":  # an initialize opens a session
            body = await request.body()  # bounded by the gateway (max_body)
            receive = _replay(body, receive)
            opening = _initializes(body)
        if opening:
            self._admit_opening(key.principal)
        try:
            status = await self._serve(scope, receive, send)
        finally:
            if opening:
                self._opening[key.principal] -= 1
        if request.method == "DELETE" and transport and 200 <= status < 300:
            ended = session_key(key.principal, transport=transport, name=name)
            await anyio.to_thread.run_sync(self.server.sessions.end, ended)

    def _admit_opening(self, principal: str) -> None:
        """Count a request that may open a transport session; 429 past the key's share.

        The SDK's session limit is one for the replica: without a share per key, one
        key's `initialize`s would lock every other key out for the idle timeout.
        """
        held = self.sessions_of(principal) + self._opening.get(principal, 0)
        limit = self.service.settings.mcp_sessions
        if held >= limit:
            raise quota_exceeded(
                "mcp_sessions", f"{held} MCP sessions of this key are open, the most allowed "
                f"is {limit}; end one (DELETE /mcp with its Mcp-Session-Id) or let it idle out",
                SESSION_RETRY_S)
        self._opening[principal] = self._opening.get(principal, 0) + 1

    def sessions_of(self, principal: str) -> int:
        """Transport sessions `principal` holds open now (the SDK binds each to its opener)."""
        owners: dict[str, Any] = getattr(self.manager, "_session_owners", {})  # pinned SDK
        return sum(1 for owner in owners.values() if owner.get("client_id") == principal)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> int:
        """The SDK's answer to the request; the HTTP status it sent (0: none)."""
        status = 0

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.manager.handle_request(scope, receive, watched)
        return status


def _initializes(body: bytes) -> bool:
    """Whether a JSON-RPC message (or batch) asks to `initialize`: only that opens a session."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False  # the SDK answers what it cannot parse
    messages = message if isinstance(message, list) else [message]
    return any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the SDK the body already read, then waits as the original does."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
