"""`/web/session`: sign in with an API key for a session cookie, see who is signed in, sign out.

    POST   /web/session   {"key": "sbx_..."}  -> 200, Set-Cookie, {principal, csrf_token, ...}
    GET    /web/session   -> {signed_in: true, principal, csrf_token, expires_at}
                             or {signed_in: false} (200 either way: the page asks on load)
    DELETE /web/session   -> 204, the session deleted and the cookie cleared

Signing in is itself a change: it must come from this server's page (its
Origin), so another site cannot sign a visitor in as someone else; it rotates
the session (a session cookie the browser already carried is ended). The key is
read from a JSON body, never from a form or the URL (URLs end up in logs).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from sbx.agent import lookup_key
from sbx.agent.service.api import Call, api
from sbx.agent.service.problems import Problem
from sbx.agent.service.web.signin_sessions import (
    check_csrf,
    check_origin,
    clear_cookie_header,
    cookie_token,
    csrf_token,
    end_session,
    session_key,
    set_cookie_header,
    start_session,
)

PATH = "/web/session"


class SignIn(BaseModel):
    """`POST /web/session`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=128)
    """An API key (`sbx keys create NAME` printed it)."""


class SessionOut(BaseModel):
    """Who is signed in on this browser."""

    signed_in: bool
    principal: str | None = None
    """`key:<name>`, as in the audit log."""
    csrf_token: str | None = None
    """Send it as `X-CSRF-Token` with every change."""
    expires_at: float | None = None
    """POSIX seconds; sign in again after it."""


@api("POST", PATH, body=SignIn, response=SessionOut, auth=False)
def sign_in(call: Call, body: SignIn) -> Response:
    """Sign in with an API key: a session cookie (HttpOnly, SameSite=Strict) stands for it."""
    check_origin(call.request, call.service.options.advertise_url)
    key = lookup_key(call.service.db, body.key.strip())
    if key is None:
        raise Problem(401, "unauthorized", "the API key is unknown or was revoked")
    presented = cookie_token(call.request)
    if presented is not None:  # rotate: a session carried into sign-in (planted?) ends
        end_session(call.service.db, presented)
    token, expires = start_session(call.service.db, key)
    out = SessionOut(signed_in=True, principal=key.principal, csrf_token=csrf_token(token),
                     expires_at=expires)
    response = JSONResponse(out.model_dump())
    response.headers["Set-Cookie"] = set_cookie_header(token, expires)
    return response


@api("GET", PATH, response=SessionOut, auth=False)
def who_is_signed_in(call: Call) -> Response:
    """Who this browser's session cookie signs in, and the CSRF token for changes."""
    token = cookie_token(call.request)
    found = session_key(call.service.db, token) if token else None
    if token is None or found is None:
        response = JSONResponse(SessionOut(signed_in=False).model_dump())
        if token is not None:  # a stale cookie: forget it
            response.headers["Set-Cookie"] = clear_cookie_header()
        return response
    key, expires = found
    return JSONResponse(SessionOut(signed_in=True, principal=key.principal,
                                   csrf_token=csrf_token(token), expires_at=expires).model_dump())


@api("DELETE", PATH, status=204, auth=False)
def sign_out(call: Call) -> Response:
    """Sign out: the session ends on the server and the cookie is cleared."""
    token = cookie_token(call.request)
    if token is not None and session_key(call.service.db, token) is not None:
        check_origin(call.request, call.service.options.advertise_url)
        check_csrf(call.request, token)
        end_session(call.service.db, token)
    response = Response(status_code=204)
    response.headers["Set-Cookie"] = clear_cookie_header()
    return response
