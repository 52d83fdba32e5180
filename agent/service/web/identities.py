"""People signed in through the OpenID Connect provider: pending logins, identities, sessions.

    begin_login    a new login: random `state`, `nonce`, PKCE verifier and a browser binding,
                   stored (hashes of state and binding) for `LOGIN_TTL_S`, on any replica
    finish_login   the callback's `state`: the row is deleted as it is read, so a state is
                   good once (a replay, a second replica racing, an expired one: refused);
                   the browser's binding cookie must match (a login started elsewhere is
                   refused: nobody can sign a visitor in as themselves)
    sign_in        the identity row (`oidc:<claim value>`, subject, role) and a session
    oidc_session   the signed-in person of a session cookie, as a `SignedInUser`

A `SignedInUser` is a `KeyInfo` whose principal is `oidc:...`: everything downstream
(quotas with the policy's defaults, ownership, the audit log, the admin checks) treats it
as it treats a key, and nothing else had to learn a second kind of caller.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Final

from sqlalchemy import delete, func, select

from sbx.agent import Database, OidcIdentity, OidcLogin, OidcSession, Role, SignedInUser, hash_key
from sbx.agent.service.problems import Problem

LOGIN_TTL_S: Final = 600.0
"""Seconds a person has to finish signing in at the provider."""
MAX_PENDING: Final = 10_000
"""Logins pending at once (anyone may start one: the table stays bounded)."""
MAX_SESSIONS_PER_PRINCIPAL: Final = 20
"""Signed-in browsers per person; signing in once more ends the oldest."""


@dataclass(frozen=True, kw_only=True)
class PendingLogin:
    """What the browser is sent to the provider with (`state`, `nonce`, the PKCE verifier)."""

    state: str
    nonce: str
    verifier: str
    browser: str
    """The value of the browser's binding cookie."""
    redirect_uri: str


def begin_login(db: Database, redirect_uri: str, now: float | None = None) -> PendingLogin:
    """Store a new pending login (expired ones are deleted; 503 when too many are pending)."""
    now = time.time() if now is None else now
    login = PendingLogin(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32),
                         verifier=secrets.token_urlsafe(48), browser=secrets.token_urlsafe(32),
                         redirect_uri=redirect_uri)
    with db.write() as session:
        session.execute(delete(OidcLogin).where(OidcLogin.expires_at <= now))
        if (session.scalar(select(func.count()).select_from(OidcLogin)) or 0) >= MAX_PENDING:
            raise Problem(503, "too-many-sign-ins", "too many sign-ins are under way; try "
                          "again in a few minutes", headers={"Retry-After": "60"})
        session.add(OidcLogin(state_hash=hash_key(login.state),
                              browser_hash=hash_key(login.browser), nonce=login.nonce,
                              verifier=login.verifier, redirect_uri=redirect_uri,
                              expires_at=now + LOGIN_TTL_S))
    return login


def finish_login(db: Database, state: str, browser: str | None) -> PendingLogin:
    """The pending login of `state`, consumed; 400 if unknown, used, expired or another's."""
    refused = Problem(400, "oidc-state-invalid", "this sign-in is unknown, was already used "
                      "or has expired; start again with 'Sign in with your organization'")
    if not 16 <= len(state) <= 128:
        raise refused
    with db.write() as session:
        row = session.get(OidcLogin, hash_key(state))
        if row is None:
            raise refused
        found = PendingLogin(state=state, nonce=row.nonce, verifier=row.verifier,
                             browser=browser or "", redirect_uri=row.redirect_uri)
        expired, binding = row.expires_at <= time.time(), row.browser_hash
        gone = session.execute(delete(OidcLogin).where(OidcLogin.state_hash == hash_key(state)))
        if getattr(gone, "rowcount", 0) != 1 or expired:
            raise refused
    if browser is None or not secrets.compare_digest(hash_key(browser), binding):
        raise Problem(400, "oidc-state-invalid", "this sign-in was started in another browser "
                      "(or its cookie is gone); start again from this server's page")
    return found


def sign_in(db: Database, *, principal: str, issuer: str, subject: str, role: Role,
            ttl_s: float, team: str | None = None) -> tuple[str, float]:
    """Record the identity and start a session: (the cookie's token, its expiry).

    The role and the team are the ones the provider's claims give at this sign-in.

    A principal already held by another account of the provider (the principal claim is
    not `sub` and was reassigned) is refused: that person's data is not handed over.
    """
    now = time.time()
    token = secrets.token_urlsafe(32)
    with db.write() as session:
        row = session.get(OidcIdentity, principal)
        if row is None:
            session.add(OidcIdentity(principal=principal, issuer=issuer, subject=subject,
                                     role=role, created_at=now, signed_in_at=now, team=team))
        elif (row.issuer, row.subject) != (issuer, subject):
            raise Problem(403, "oidc-principal-taken", f"{principal!r} belongs to another "
                          "account of the provider; ask the operator")
        else:
            row.role, row.signed_in_at, row.team = role, now, team
        session.execute(delete(OidcSession).where(OidcSession.expires_at <= now))
        kept = session.scalars(select(OidcSession.token_hash).where(
            OidcSession.principal == principal).order_by(OidcSession.created_at.desc())).all()
        for stale in kept[MAX_SESSIONS_PER_PRINCIPAL - 1:]:
            session.execute(delete(OidcSession).where(OidcSession.token_hash == stale))
        session.add(OidcSession(token_hash=hash_key(token), principal=principal,
                                created_at=now, expires_at=now + ttl_s))
    return token, now + ttl_s


def oidc_session(db: Database, token: str) -> tuple[SignedInUser, float] | None:
    """The person a live session token signs in, and the session's expiry; None otherwise."""
    with db.read() as session:
        row = session.execute(
            select(OidcIdentity, OidcSession.expires_at)
            .join(OidcSession, OidcIdentity.principal == OidcSession.principal)
            .where(OidcSession.token_hash == hash_key(token),
                   OidcSession.expires_at > time.time())
        ).first()
        if row is None:
            return None
        identity, expires = row
        role: Role = "admin" if identity.role == "admin" else "user"
        user = SignedInUser(name=identity.principal, role=role, created_at=identity.created_at,
                            revoked_at=None, overrides={}, identity=identity.principal,
                            team=identity.team)
    return user, float(expires)
