"""The relying party's half of OpenID Connect against the organization's provider.

Discovery, the authorization URL, the code exchange and the ID token's verification:

    discovery   `<issuer>/.well-known/openid-configuration`, fetched once (then cached an hour);
                its `issuer` must be the configured one exactly
    login URL   authorization code flow: `state`, `nonce`, PKCE `code_challenge` (S256)
    exchange    POST the code, its PKCE verifier and our redirect URI to the token endpoint,
                authenticated with the client secret (HTTP Basic, client_secret_basic)
    ID token    signature against the provider's JWKS (the key its `kid` names; an unknown
                `kid` refetches the set once a minute at most), alg in {RS256, ES256} only
                (never `none`, never an HMAC with a public key), `iss`, `aud` (and `azp` when
                there are several audiences), `exp`, `iat`, `sub`, and `nonce` equal to ours

Every fetch has a timeout and a size cap; every failure is an `OidcError` with a slug and a
sentence for the person signing in. Nothing here touches the store: the web face keeps the
pending logins and sessions (`sbx.agent.service.web.identities`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlencode

import httpx2
import jwt

from sbx.agent import OidcSettings, PolicyError, Role

ALGORITHMS: Final = ("RS256", "ES256")
"""The only signature algorithms an ID token may use (asymmetric: the provider's key signs)."""
MAX_DOCUMENT_BYTES: Final = 256 * 1024
"""Largest discovery document, key set or token answer read."""
LEEWAY_S: Final = 60.0
"""Clock skew allowed on `exp` and `iat`."""
DISCOVERY_TTL_S: Final = 3600.0
"""How long the discovery document and the key set are reused."""
JWKS_REFETCH_S: Final = 60.0
"""An unknown `kid` refetches the key set at most this often (a forged `kid` cannot flood it)."""


class OidcError(Exception):
    """Signing in through the provider failed; `slug` names the problem, the message says why."""

    def __init__(self, slug: str, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.slug = slug
        """The problem document's type."""
        self.status = status
        """The HTTP status to answer with."""


@dataclass(frozen=True, kw_only=True)
class Claims:
    """What a verified ID token says about who signed in."""

    subject: str
    """`sub`: the provider's stable id of the person."""
    values: dict[str, Any]
    """Every claim of the token (verified: signature, issuer, audience, expiry, nonce)."""


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of a PKCE verifier (RFC 7636 section 4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(kw_only=True)
class OidcClient:
    """One configured provider; thread-safe (handlers run on worker threads)."""

    settings: OidcSettings
    """The `[service.oidc]` table."""
    client_secret: str
    """Read from the environment variable `settings.client_secret_env` names."""
    _discovery: dict[str, Any] | None = None
    _discovered_at: float = 0.0
    _keys: dict[str, Any] = field(default_factory=dict)
    _keys_at: float = 0.0
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def authorization_url(self, *, state: str, nonce: str, verifier: str,
                          redirect_uri: str) -> str:
        """Where to send the browser: the provider's authorization endpoint with our request."""
        endpoint = self._endpoint("authorization_endpoint")
        query = urlencode({
            "response_type": "code", "client_id": self.settings.client_id,
            "redirect_uri": redirect_uri, "scope": " ".join(self.settings.scopes),
            "state": state, "nonce": nonce, "code_challenge": pkce_challenge(verifier),
            "code_challenge_method": "S256",
        })
        return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"

    def redeem(self, *, code: str, verifier: str, redirect_uri: str, nonce: str) -> Claims:
        """Exchange an authorization code for an ID token, and verify the token."""
        answer = self._fetch("token endpoint", "POST", self._endpoint("token_endpoint"), data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
            "code_verifier": verifier,
        })
        id_token = answer.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise OidcError("oidc-token-invalid", "the provider's token answer has no ID token")
        return self.verify(id_token, nonce=nonce)

    def verify(self, id_token: str, *, nonce: str, now: float | None = None) -> Claims:
        """The claims of a valid ID token for this client and this login, or `OidcError`."""
        try:
            header = jwt.get_unverified_header(id_token)
        except jwt.PyJWTError:
            raise OidcError("oidc-token-invalid", "the ID token is not a JWT") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise OidcError("oidc-token-invalid", f"the ID token's algorithm {str(alg)[:20]!r} "
                            f"is not allowed (allowed: {', '.join(ALGORITHMS)})")
        key = self._signing_key(header.get("kid"), str(alg))
        now = time.time() if now is None else now
        try:
            values: dict[str, Any] = jwt.decode(
                id_token, key=key, algorithms=[str(alg)], audience=self.settings.client_id,
                issuer=self.settings.issuer, leeway=LEEWAY_S,
                options={"require": ["iss", "aud", "exp", "iat", "sub"], "verify_exp": False},
            )
            if not isinstance(values["exp"], int | float) or values["exp"] + LEEWAY_S <= now:
                raise jwt.ExpiredSignatureError("expired")
        except jwt.ExpiredSignatureError:
            raise OidcError("oidc-token-expired", "the ID token has expired; sign in again"
                            ) from None
        except jwt.InvalidAudienceError:
            raise OidcError("oidc-token-invalid", "the ID token was issued for another client "
                            "(its audience is not this server's client_id)") from None
        except jwt.InvalidIssuerError:
            raise OidcError("oidc-token-invalid", "the ID token comes from another issuer"
                            ) from None
        except jwt.InvalidSignatureError:
            raise OidcError("oidc-token-invalid", "the ID token's signature does not verify "
                            "with the provider's keys") from None
        except jwt.PyJWTError as exc:
            raise OidcError("oidc-token-invalid", f"the ID token is invalid: {str(exc)[:200]}"
                            ) from None
        _check_claims(values, self.settings.client_id, nonce)
        return Claims(subject=str(values["sub"]), values=values)

    def _signing_key(self, kid: Any, alg: str) -> Any:
        """The provider's public key for `kid` (refetching the set once if it is unknown)."""
        for attempt in (0, 1):
            keys = self._key_set(refresh=attempt == 1)
            jwk = keys.get(kid) if isinstance(kid, str) else (
                next(iter(keys.values())) if len(keys) == 1 else None)
            if jwk is not None:
                try:
                    return jwt.PyJWK(jwk, algorithm=alg).key
                except jwt.PyJWTError:
                    raise OidcError("oidc-token-invalid", "the ID token's key does not fit its "
                                    "algorithm") from None
        raise OidcError("oidc-token-invalid", "the ID token is signed with a key the provider "
                        "does not publish")

    def _key_set(self, *, refresh: bool) -> dict[str, Any]:
        """`{kid: jwk}` of the provider's signing keys (cached; refreshed when asked, bounded)."""
        with self._lock:
            now = time.monotonic()
            stale = not self._keys or now - self._keys_at > DISCOVERY_TTL_S
            if stale or (refresh and now - self._keys_at > JWKS_REFETCH_S):
                document = self._fetch("key set", "GET", self._endpoint("jwks_uri"))
                found = document.get("keys")
                if not isinstance(found, list):
                    raise OidcError("oidc-provider-error", "the provider's key set has no keys",
                                    502)
                self._keys = {str(k.get("kid", i)): k for i, k in enumerate(found)
                              if isinstance(k, dict) and k.get("use", "sig") == "sig"}
                self._keys_at = now
            return self._keys

    def _endpoint(self, name: str) -> str:
        """One URL of the provider's discovery document."""
        with self._lock:
            if self._discovery is None or time.monotonic() - self._discovered_at > DISCOVERY_TTL_S:
                issuer = self.settings.issuer
                document = self._fetch("discovery document", "GET",
                                       issuer.rstrip("/") + "/.well-known/openid-configuration")
                if document.get("issuer") != issuer:
                    raise OidcError("oidc-provider-error", "the provider's discovery document "
                                    "names another issuer than [service.oidc] issuer", 502)
                self._discovery, self._discovered_at = document, time.monotonic()
            value = self._discovery.get(name)
        if not isinstance(value, str) or not value.startswith(("https://", "http://")):
            raise OidcError("oidc-provider-error", f"the provider's discovery document has no "
                            f"{name}", 502)
        return value

    def _fetch(self, what: str, method: str, url: str,
               data: dict[str, str] | None = None) -> dict[str, Any]:
        """A JSON object from the provider, within the timeout and the size cap."""
        auth = (self.settings.client_id, self.client_secret) if data is not None else None
        try:
            with httpx2.Client(timeout=self.settings.timeout, follow_redirects=False) as client, \
                    client.stream(method, url, data=data, auth=auth,
                                  headers={"Accept": "application/json"}) as response:
                body = _read_capped(response.iter_bytes(), what)
                status = response.status_code
        except httpx2.HTTPError as exc:
            raise OidcError("oidc-provider-unreachable", f"the provider's {what} could not be "
                            f"fetched: {type(exc).__name__}", 502) from None
        try:
            document = json.loads(body)
        except ValueError:
            document = None
        if status != 200 or not isinstance(document, dict):
            error = document.get("error") if isinstance(document, dict) else None
            reason = f" ({str(error)[:80]})" if isinstance(error, str) else ""
            raise OidcError("oidc-provider-error", f"the provider's {what} answered "
                            f"{status}{reason}", 502)
        return document


def _read_capped(chunks: Any, what: str) -> bytes:
    body = bytearray()
    for chunk in chunks:
        body.extend(chunk)
        if len(body) > MAX_DOCUMENT_BYTES:
            raise OidcError("oidc-provider-error", f"the provider's {what} is larger than "
                            f"{MAX_DOCUMENT_BYTES} bytes", 502)
    return bytes(body)


def _check_claims(values: dict[str, Any], client_id: str, nonce: str) -> None:
    """The checks PyJWT does not make: `azp` with several audiences, `nonce`, a usable `sub`."""
    audiences = values["aud"] if isinstance(values["aud"], list) else [values["aud"]]
    if len(audiences) > 1 and values.get("azp") != client_id:
        raise OidcError("oidc-token-invalid", "the ID token has several audiences and its "
                        "authorized party is not this server")
    given = values.get("nonce")
    if not isinstance(given, str) or not hmac.compare_digest(given.encode(), nonce.encode()):
        raise OidcError("oidc-token-invalid", "the ID token's nonce is not this sign-in's "
                        "(a token replayed from another sign-in)")
    sub = values["sub"]
    if not isinstance(sub, str) or not 0 < len(sub) <= 255:
        raise OidcError("oidc-token-invalid", "the ID token's subject is empty or too long")


PRINCIPAL_VALUE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=:|/-]{0,74}$")
"""What a principal claim's value may be: short, printable, no spaces (it names a tenant)."""


def principal_and_role(settings: OidcSettings, claims: Claims) -> tuple[str, Role]:
    """The principal (`oidc:<value of the principal claim>`) and the role the policy maps to.

    A person is an admin only if the role claim (a string, or a list of them) holds one
    of `admin_values`; a missing or malformed claim makes a user, never an admin.
    """
    value = claims.values.get(settings.principal_claim)
    if not isinstance(value, str) or not PRINCIPAL_VALUE.match(value):
        raise OidcError("oidc-claim-missing", f"the ID token's {settings.principal_claim!r} "
                        "claim is missing or not usable as a principal (1-75 of letters, "
                        "digits and ._@+=:|/-)", 403)
    role: Role = "user"
    if settings.role_claim is not None:
        granted = claims.values.get(settings.role_claim)
        held = [granted] if isinstance(granted, str) else (
            [g for g in granted if isinstance(g, str)] if isinstance(granted, list) else [])
        if set(held) & set(settings.admin_values):
            role = "admin"
    return f"oidc:{value}", role


def team_of(settings: OidcSettings, claims: Claims, teams: Collection[str]) -> str | None:
    """The team the policy maps the ID token to (None when it maps none).

    The first value of `team_claim` (a string, or a list of them) that names a team of
    `[service.teams]`; a value naming no team of the policy makes no one a member.
    """
    if settings.team_claim is None:
        return None
    given = claims.values.get(settings.team_claim)
    held = [given] if isinstance(given, str) else (
        [g for g in given if isinstance(g, str)] if isinstance(given, list) else [])
    return next((value for value in held if value in teams), None)


def open_client(settings: OidcSettings | None, environ: Mapping[str, str]) -> OidcClient | None:
    """The configured provider's client (None without `[service.oidc]`).

    `PolicyError` when the client secret's environment variable is unset: the start
    fails, not the first sign-in.
    """
    if settings is None:
        return None
    secret = environ.get(settings.client_secret_env, "")
    if not secret:
        raise PolicyError(f"[service.oidc] client_secret_env: the environment variable "
                          f"{settings.client_secret_env} is not set (it holds the client secret)")
    return OidcClient(settings=settings, client_secret=secret)
