"""Sign-in sessions of the web page: a cookie that stands for an API key, safe from forgery.

A browser signs in once with an API key and gets a random session token in
a cookie that scripts cannot read (`HttpOnly`), that other sites' pages never
send (`SameSite=Strict`), named `__Host-sbx_session`: the browser takes it
only `Secure`, for `Path=/` and without a `Domain`, so a sibling origin (another
subdomain) cannot plant one for this host (browsers treat http://127.0.0.1 and
localhost as secure; elsewhere the page must be served over HTTPS). Signing
in rotates the session: a session the browser already carried is ended and
a new token issued, so a session planted before sign-in never becomes the
victim's. Only
the token's SHA-256 is stored, beside the key's name and an expiry: the
session is its key (same principal, same quotas), and it ends at sign-out,
at expiry (`SESSION_TTL_S`) or when the key is revoked.

Every request that changes something (anything but GET, HEAD, OPTIONS) and
is authenticated by the cookie must also pass two checks, each enough alone
against a cross-site forged request, both kept because one may fail:

    Origin       the request's `Origin` is this server's own (its Host, or the replica's
                 `--advertise-url`); a request without one is refused
    CSRF token   `X-CSRF-Token` equals HMAC-SHA256(token, "sbx-csrf"): the page reads it
                 from `GET /web/session`, which another origin cannot read

SameSite is not enough alone: pages on another port of the same host are the
same *site* and do get the cookie. A request with `Authorization: Bearer`
needs neither check: a browser never adds that header by itself.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sqlalchemy import delete, select
from starlette.requests import Request

from sbx.agent import ApiKey, Database, KeyInfo, OidcSession, WebSession, hash_key, key_info
from sbx.agent.service.problems import Problem
from sbx.agent.service.web.identities import oidc_session

if TYPE_CHECKING:
    from sbx.agent.service.host import Service

COOKIE = "__Host-sbx_session"
"""The session cookie's name."""
CSRF_HEADER = "x-csrf-token"
"""The header that carries the CSRF token on changes."""
SESSION_TTL_S = 8 * 3600.0
"""A session's lifetime in seconds from sign-in (a working day); then sign in again."""
MAX_SESSIONS_PER_KEY = 20
"""Signed-in browsers per key; signing in once more ends the oldest."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def start_session(db: Database, key: KeyInfo, now: float | None = None) -> tuple[str, float]:
    """A new session for `key`: (the token for the cookie, its expiry in POSIX seconds).

    Expired sessions (anyone's) and this key's oldest beyond `MAX_SESSIONS_PER_KEY`
    are deleted in the same transaction, so the table stays small.
    """
    now = time.time() if now is None else now
    token = secrets.token_urlsafe(32)
    expires = now + SESSION_TTL_S
    with db.write() as session:
        session.execute(delete(WebSession).where(WebSession.expires_at <= now))
        kept = session.scalars(select(WebSession.token_hash).where(
            WebSession.key_name == key.name).order_by(WebSession.created_at.desc())).all()
        for stale in kept[MAX_SESSIONS_PER_KEY - 1:]:
            session.execute(delete(WebSession).where(WebSession.token_hash == stale))
        session.add(WebSession(token_hash=hash_key(token), key_name=key.name, created_at=now,
                               expires_at=expires))
    return token, expires


def session_key(db: Database, token: str) -> tuple[KeyInfo, float] | None:
    """The live key of a session token and the session's expiry; None if ended or unknown."""
    if not 16 <= len(token) <= 64 or not set(token) <= _TOKEN_CHARS:
        return None
    with db.read() as session:
        row = session.execute(
            select(ApiKey, WebSession.expires_at)
            .join(WebSession, ApiKey.name == WebSession.key_name)
            .where(WebSession.token_hash == hash_key(token), WebSession.expires_at > time.time(),
                   ApiKey.revoked_at.is_(None))
        ).first()
        if row is None:
            return oidc_session(db, token)  # or a person signed in through the provider
        key, expires = row
        info = key_info(key)
    return info, float(expires)


def end_session(db: Database, token: str) -> None:
    """Sign out: the session's row is deleted (its cookie authenticates nobody any more)."""
    with db.write() as session:
        session.execute(delete(WebSession).where(WebSession.token_hash == hash_key(token)))
        session.execute(delete(OidcSession).where(OidcSession.token_hash == hash_key(token)))


def csrf_token(token: str) -> str:
    """The CSRF token of a session: derived from its secret, so nothing more is stored."""
    return hmac.new(token.encode("ascii"), b"sbx-csrf", hashlib.sha256).hexdigest()


def cookie_token(request: Request) -> str | None:
    """The session token the request's cookie carries, if any."""
    return request.cookies.get(COOKIE) or None


def cookie_key(service: Service, request: Request) -> KeyInfo | None:
    """The key of the request's session cookie (None without a live session).

    A change authenticated by the cookie must come from this server's own page:
    its Origin and its CSRF token are checked (403 otherwise).
    """
    token = cookie_token(request)
    if token is None:
        return None
    found = session_key(service.db, token)
    if found is None:
        return None
    if request.method not in SAFE_METHODS:
        check_origin(request, service.options.advertise_url)
        check_csrf(request, token)
    return found[0]


def check_origin(request: Request, advertise_url: str) -> None:
    """403 unless the request's `Origin` is this server's (its Host, or its advertise URL)."""
    origin = request.headers.get("origin", "").strip().lower()
    if not origin or origin == "null":
        raise Problem(403, "cross-origin-request", "a change made with the session cookie must "
                      "carry this server's Origin header (send it from the sbx page)")
    host = request.headers.get("host", "").strip().lower()
    allowed = {f"http://{host}", f"https://{host}"} if host else set()
    advertised = urlsplit(advertise_url)
    if advertised.scheme and advertised.netloc:
        allowed.add(f"{advertised.scheme}://{advertised.netloc}".lower())
    if origin not in allowed:
        raise Problem(403, "cross-origin-request", f"requests from {origin[:100]!r} may not "
                      "change anything with this server's session cookie")


def check_csrf(request: Request, token: str) -> None:
    """403 unless `X-CSRF-Token` is the session's CSRF token (compared in constant time)."""
    given = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(given.encode("ascii", "replace"),
                               csrf_token(token).encode("ascii")):
        raise Problem(403, "csrf-token-invalid", "a change made with the session cookie needs "
                      "the X-CSRF-Token header the page got from GET /web/session")


def set_cookie_header(token: str, expires: float) -> str:
    """The `Set-Cookie` value of a new session (`__Host-`: always Secure, Path=/, no Domain)."""
    max_age = max(0, int(expires - time.time()))
    return f"{COOKIE}={token}; Path=/; Max-Age={max_age}; Secure; HttpOnly; SameSite=Strict"


def clear_cookie_header() -> str:
    """The `Set-Cookie` value that removes the session cookie from the browser."""
    return f"{COOKIE}=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Strict"
