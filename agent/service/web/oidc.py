"""`/web/oidc/*`: the web page's sign-in through the organization's OpenID Connect provider.

    GET /web/oidc            -> {enabled, login_url}: whether the page shows the
                                "Sign in with your organization" link
    GET /web/oidc/login      -> 303 to the provider (code flow, PKCE S256, state, nonce);
                                sets the browser binding cookie (`sbx_oidc_login`)
    GET /web/oidc/callback   -> the provider sends the browser back with `code` and `state`:
                                the state is used up, the code exchanged, the ID token
                                verified, the claims mapped; then the session cookie and a
                                303 to the page (a problem document when anything fails)

The pending login lives in the store (any replica may get the callback) and is bound to
the browser that started it by a random cookie whose SHA-256 the row keeps, so a
callback URL carried to another browser signs nobody in. A signed cookie alone was the
other choice: it would need a signing key shared by every replica, and still a record
on the server to make its state good only once; the store gives both. Signing out is the page's
usual `DELETE /web/session`: it ends either kind of session. The session itself is the
same cookie as an API-key session (`web/signin_sessions.py`); its principal is `oidc:<claim>`.
"""

from __future__ import annotations

import logging
from typing import Final

from pydantic import BaseModel
from starlette.responses import JSONResponse, RedirectResponse, Response

from sbx.agent.service.api import Call, api
from sbx.agent.service.oidc_client import OidcClient, OidcError, principal_and_role, team_of
from sbx.agent.service.problems import Problem
from sbx.agent.service.web.identities import LOGIN_TTL_S, begin_login, finish_login, sign_in
from sbx.agent.service.web.signin_sessions import (
    SESSION_TTL_S,
    cookie_token,
    end_session,
    set_cookie_header,
)

logger = logging.getLogger(__name__)

PATH: Final = "/web/oidc"
LOGIN_PATH: Final = "/web/oidc/login"
CALLBACK_PATH: Final = "/web/oidc/callback"
BROWSER_COOKIE: Final = "sbx_oidc_login"
"""The cookie binding a pending login to the browser that started it."""


class OidcOut(BaseModel):
    """Whether the server signs in through an OpenID Connect provider."""

    enabled: bool
    login_url: str | None = None
    """Where the page's "Sign in with your organization" link points."""


@api("GET", PATH, response=OidcOut, auth=False)
def oidc_status(call: Call) -> Response:
    """Whether sign-in through the organization's provider is configured."""
    enabled = call.service.oidc is not None
    return JSONResponse(OidcOut(enabled=enabled,
                                login_url=LOGIN_PATH if enabled else None).model_dump())


@api("GET", LOGIN_PATH, status=303, auth=False)
def oidc_login(call: Call) -> Response:
    """Start signing in: a redirect to the provider's authorization endpoint."""
    client = _client(call)
    redirect_uri = client.settings.redirect_url or (
        call.service.options.advertise_url.rstrip("/") + CALLBACK_PATH)
    login = begin_login(call.service.db, redirect_uri)
    try:
        target = client.authorization_url(state=login.state, nonce=login.nonce,
                                          verifier=login.verifier, redirect_uri=redirect_uri)
    except OidcError as exc:
        raise _problem(exc) from None
    response = RedirectResponse(target, status_code=303, headers={"Cache-Control": "no-store"})
    response.headers.append("Set-Cookie", _browser_cookie(login.browser, _secure(call)))
    return response


@api("GET", CALLBACK_PATH, status=303, auth=False)
def oidc_callback(call: Call) -> Response:
    """The provider's answer: verify it, sign the browser in, go back to the page."""
    client = _client(call)
    query = call.request.query_params
    login = finish_login(call.service.db, query.get("state", ""),
                         call.request.cookies.get(BROWSER_COOKIE))
    if "error" in query:
        reason = "".join(c for c in query.get("error", "")[:64] if c.isalnum() or c in "_-")
        raise Problem(401, "oidc-denied", f"the provider did not sign you in ({reason}); "
                      "start again with 'Sign in with your organization'")
    code = query.get("code", "")
    if not 0 < len(code) <= 2048:
        raise Problem(400, "oidc-code-missing", "the provider sent no authorization code")
    try:
        claims = client.redeem(code=code, verifier=login.verifier,
                               redirect_uri=login.redirect_uri, nonce=login.nonce)
        principal, role = principal_and_role(client.settings, claims)
        team = team_of(client.settings, claims, call.service.settings.teams)
    except OidcError as exc:
        raise _problem(exc) from None
    presented = cookie_token(call.request)
    if presented is not None:  # rotate, as the API-key sign-in does: a carried session ends
        end_session(call.service.db, presented)
    token, expires = sign_in(call.service.db, principal=principal,
                             issuer=client.settings.issuer, subject=claims.subject, role=role,
                             team=team, ttl_s=SESSION_TTL_S)
    logger.info("signed in %s (%s, team %s) through the OpenID Connect provider", principal,
                role, team)
    response = RedirectResponse("/", status_code=303, headers={"Cache-Control": "no-store"})
    response.headers.append("Set-Cookie", set_cookie_header(token, expires))
    response.headers.append("Set-Cookie", _browser_cookie("", _secure(call), max_age=0))
    return response


def _client(call: Call) -> OidcClient:
    if call.service.oidc is None:
        raise Problem(404, "oidc-not-configured", "this server signs in with API keys only "
                      "(no [service.oidc] in its policy)")
    return call.service.oidc


def _problem(exc: OidcError) -> Problem:
    return Problem(exc.status, exc.slug, str(exc))


def _browser_cookie(value: str, secure: bool, max_age: int = int(LOGIN_TTL_S)) -> str:
    """SameSite=Lax, not Strict: it must come back on the provider's redirect to us."""
    flags = f"{BROWSER_COOKIE}={value}; Path={CALLBACK_PATH}; Max-Age={max_age}; HttpOnly; " \
            "SameSite=Lax"
    return flags + ("; Secure" if secure else "")


def _secure(call: Call) -> bool:
    return call.request.url.scheme == "https"
