"""API keys: created once (the key is shown once), stored as a SHA-256, revoked by name.

A key is `sbx_` followed by 43 URL-safe characters (256 random bits). Only
its SHA-256 is stored: with that much entropy a fast hash is enough, and a
leaked table does not leak keys. The principal of a key is `key:<name>`;
the server derives it from the key, never from anything the client sends.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from sbx.agent.core.config import ServiceQuotas
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import ApiKey
from sbx.sandbox.errors import SbxError

Role = Literal["admin", "user"]
KEY_PREFIX = "sbx_"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
QUOTA_FIELDS = tuple(ServiceQuotas.model_fields)
_REVOCATIONS = [0]
"""Keys revoked by this process: a `KeyCache` forgets what it holds when this moves."""
_REVOKING = threading.Lock()


class KeyAdminError(SbxError):
    """A key cannot be created or revoked as asked; the message says why."""


@dataclass(frozen=True, kw_only=True)
class KeyInfo:
    """A key as listed: never the key itself."""

    name: str
    """The key's name; its principal is `key:<name>`."""
    role: Role
    """`admin` or `user`."""
    created_at: float
    """POSIX seconds."""
    revoked_at: float | None
    """When it was revoked (it then authenticates nobody)."""
    overrides: dict[str, Any]
    """Per-key quota values that replace the policy's `[service.quotas]` defaults."""
    team: str | None = None
    """The team the key (or the signed-in person) belongs to; None: no team."""

    @property
    def principal(self) -> str:
        """`key:<name>`."""
        return principal_of(self.name)


@dataclass(frozen=True, kw_only=True)
class SignedInUser(KeyInfo):
    """A person signed in through the provider; acts as a key with the policy's default quotas."""

    identity: str
    """`oidc:<claim value>`: the principal."""

    @property
    def principal(self) -> str:
        """`oidc:<claim value>`."""
        return self.identity


def principal_of(name: str) -> str:
    """The principal a key name stands for."""
    return f"key:{name}"


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()


def create_key(
    db: Database, name: str, *, role: Role = "user", overrides: dict[str, Any] | None = None,
    team: str | None = None,
) -> str:
    """Store a new key named `name` (in `team`, if given) and return it (seen only now)."""
    if not NAME_PATTERN.match(name):
        raise KeyAdminError(f"key name {name!r}: use 1-63 of a-z, 0-9, '.', '_', '-' "
                        "(starting with a letter or digit)")
    if team is not None and not NAME_PATTERN.match(team):
        raise KeyAdminError(f"team {team!r}: use 1-63 of a-z, 0-9, '.', '_', '-' "
                            "(starting with a letter or digit)")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(given) - set(QUOTA_FIELDS)
    if unknown:
        known = ", ".join(QUOTA_FIELDS)
        raise KeyAdminError(f"unknown quota {sorted(unknown)[0]!r} (known: {known})")
    ServiceQuotas.model_validate(given)  # the same bounds as the policy file's
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(name=name, key_hash=hash_key(key), role=role, created_at=time.time(),
                 team=team, **given)
    try:
        with db.write() as session:
            session.add(row)
    except IntegrityError:
        raise KeyAdminError(f"a key named {name!r} exists already (revoke it or pick another name)"
                        ) from None
    return key


def list_keys(db: Database) -> list[KeyInfo]:
    """Every key, revoked ones included, by name."""
    with db.read() as session:
        rows = session.scalars(select(ApiKey).order_by(ApiKey.name)).all()
        return [key_info(row) for row in rows]


def revoke_key(db: Database, name: str) -> None:
    """Revoke a key: its next request gets 401 (within `[service] key_cache` elsewhere)."""
    with db.write() as session:
        row = session.get(ApiKey, name)
        if row is None:
            raise KeyAdminError(f"no key named {name!r}")
        if row.revoked_at is None:
            row.revoked_at = time.time()
    with _REVOKING:
        _REVOCATIONS[0] += 1


def lookup_key(db: Database, key: str) -> KeyInfo | None:
    """The live key a bearer token stands for, or None (unknown, malformed or revoked)."""
    if not key.startswith(KEY_PREFIX) or len(key) > 128:
        return None
    return _live_key(db, hash_key(key))


def _live_key(db: Database, digest: str) -> KeyInfo | None:
    with db.reading() as connection:  # every request asks: no ORM session
        row = connection.execute(select(*ApiKey.__table__.columns)
                                 .where(ApiKey.key_hash == digest)).first()
    if row is None or row.revoked_at is not None:
        return None
    return key_info(row)


class KeyCache:
    """Live keys a replica looked up, trusted for `ttl` seconds before the store is asked again.

    Every request of a client presents its key; asking the store each time is most
    of what an unauthenticated-looking request costs. A key revoked in this process
    (`revoke_key`) is refused at its next request; one revoked elsewhere (the CLI,
    another replica) within `ttl`. Unknown keys are not remembered: a key created
    anywhere works at once. At most `size` keys are held (then the cache starts over).
    """

    def __init__(self, db: Database, ttl: float, size: int = 10_000) -> None:
        self.db = db
        self.ttl = ttl
        self.size = size
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[float, KeyInfo]] = {}
        self._revocations = _REVOCATIONS[0]

    def lookup(self, key: str) -> KeyInfo | None:
        """The live key a bearer token stands for, or None (unknown, malformed or revoked)."""
        if not key.startswith(KEY_PREFIX) or len(key) > 128:
            return None
        digest, now = hash_key(key), time.monotonic()
        with self._lock:
            if self._revocations != _REVOCATIONS[0]:  # revoked here: forget them all
                self._keys, self._revocations = {}, _REVOCATIONS[0]
            held = self._keys.get(digest)
        if held is not None and held[0] > now:
            return held[1]
        info = _live_key(self.db, digest)
        with self._lock:
            if info is None:
                self._keys.pop(digest, None)
            else:
                if len(self._keys) >= self.size:
                    self._keys = {}
                self._keys[digest] = (now + self.ttl, info)
        return info


def key_named(db: Database, name: str) -> KeyInfo | None:
    """The key called `name`, revoked or not (None if there is none)."""
    with db.read() as session:
        row = session.get(ApiKey, name)
        return key_info(row) if row is not None else None


def key_info(row: Any) -> KeyInfo:
    """A stored key as `KeyInfo`: the one place a row becomes a caller (role, team, quotas).

    `row` is an `ApiKey` or a plain row of its table (the columns have the same names).
    """
    overrides = {f: getattr(row, f) for f in QUOTA_FIELDS if getattr(row, f) is not None}
    role: Role = "admin" if row.role == "admin" else "user"
    return KeyInfo(
        name=row.name, role=role, created_at=row.created_at, revoked_at=row.revoked_at,
        overrides=overrides, team=row.team,
    )
