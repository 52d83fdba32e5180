"""The service's tables: what survives a restart and what replicas share.

    api_keys       who may call (only a SHA-256 of each key), role, team, quota overrides
    datasets       uploaded files: owner, display name, format, size, preview
    conversations  owner, replica holding its sandbox, datasets, model, limits, status
    runs           questions and `/v1/execute` calls: status, result, CPU seconds (quotas),
                   cost in money and team (budgets)
    events         each run's transcript events as the client sees them, in order (SSE replay)
    artifacts      files a run copied out of `/output`, looked up by run and name
    replicas       serving processes: where to redirect, last heartbeat
    web_sessions   the web page's signed-in browsers: a SHA-256 of each cookie, its key, expiry
    oidc_logins    sign-ins through the OpenID Connect provider not yet back (one-time state)
    oidc_identities  people signed in through the provider: principal, subject, role
    oidc_sessions  browsers signed in through the provider: a SHA-256 of each cookie, expiry
    notes          notes about a dataset (its name and digest): author, team if shared, text

Times are POSIX seconds (floats): the same type on SQLite and PostgreSQL, and
quota windows are plain subtraction. Every row that belongs to someone carries
its `principal`, and every query of a tenant's data filters on it. The schema
is created and changed by Alembic migrations (`agent/core/hosting/store/migrations/`),
never by `create_all`; `tests/test_service_store.py` checks the two agree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """The declarative base of every service table."""


class ApiKey(Base):
    """One API key: its principal is `key:<name>`."""

    __tablename__ = "api_keys"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float, default=None)
    max_conversations: Mapped[int | None] = mapped_column(Integer, default=None)
    runs_per_hour: Mapped[int | None] = mapped_column(Integer, default=None)
    cpu_seconds_per_day: Mapped[float | None] = mapped_column(Float, default=None)
    dataset_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    upload_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    storage_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    cost_per_day: Mapped[float | None] = mapped_column(Float, default=None)
    cost_per_month: Mapped[float | None] = mapped_column(Float, default=None)
    team: Mapped[str | None] = mapped_column(String(64), default=None)


class Dataset(Base):
    """An uploaded file, stored as `<data dir>/datasets/<id>/<name>`."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    principal: Mapped[str] = mapped_column(String(80), index=True)
    name: Mapped[str] = mapped_column(String(128))
    format: Mapped[str] = mapped_column(String(16))
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    preview: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class Conversation(Base):
    """A conversation; it lives on the replica that holds its sandbox and messages."""

    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_principal_status", "principal", "status"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    principal: Mapped[str] = mapped_column(String(80))
    status: Mapped[str] = mapped_column(String(16))
    replica_id: Mapped[str] = mapped_column(String(128), index=True)
    datasets: Mapped[list[str]] = mapped_column(JSON)
    model: Mapped[str] = mapped_column(String(128))
    limits: Mapped[dict[str, Any]] = mapped_column(JSON)
    sandbox: Mapped[str] = mapped_column(String(16), default="none")
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    last_active_at: Mapped[float] = mapped_column(Float)
    closed_at: Mapped[float | None] = mapped_column(Float, default=None)


UNFINISHED_STATUSES = ("queued", "running")
"""A run's statuses before it ends; every other status is final."""


class Run(Base):
    """One question of a conversation (`kind="question"`) or one `/v1/execute` call."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_principal_created", "principal", "created_at"),
                      Index("ix_runs_team_created", "team", "created_at"))

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    principal: Mapped[str] = mapped_column(String(80))
    conversation_id: Mapped[str | None] = mapped_column(String(32), index=True, default=None)
    replica_id: Mapped[str] = mapped_column(String(128), index=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    question: Mapped[str] = mapped_column(Text, default="")
    answer: Mapped[str | None] = mapped_column(Text, default=None)
    message: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    cpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    cost: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    """What the run cost in `[agent.prices]`' currency (the money budgets sum it)."""
    cost_estimated: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Some of its token counts were estimated (the endpoint sent none)."""
    team: Mapped[str | None] = mapped_column(String(64), default=None)
    """The principal's team when the run was admitted (the team's budget counts it)."""
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, default=None)
    ended_at: Mapped[float | None] = mapped_column(Float, default=None)


def _data_length(context: Any) -> int:
    """`events.size` of the row being inserted (one row of a bulk insert too)."""
    return len(context.get_current_parameters()["data"])


class EventRow(Base):
    """One event of a run; `seq` is its SSE id (`Last-Event-ID` resumes after it)."""

    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_events_run_seq"),
                      Index("ix_events_run_size", "run_id", "size"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(32))
    seq: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(32))
    data: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    size: Mapped[int] = mapped_column(Integer, default=_data_length, server_default="0")
    """Characters of `data` (bytes, for the ASCII most events are made of), set from it on
    every insert: what the storage quota counts, summed from the index with `run_id`
    instead of reading every event's text."""


class ArtifactRow(Base):
    """A file a run produced; served only from the run's own output directory."""

    __tablename__ = "artifacts"
    __table_args__ = (UniqueConstraint("run_id", "name", name="uq_artifacts_run_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(32), index=True)
    principal: Mapped[str] = mapped_column(String(80))
    name: Mapped[str] = mapped_column(String(512))
    path: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInteger)
    content_type: Mapped[str] = mapped_column(String(128))


class Replica(Base):
    """A serving process: requests for its conversations are redirected to `advertise_url`."""

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    advertise_url: Mapped[str] = mapped_column(String(512))
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)


class WebSession(Base):
    """A browser signed in to the web page (`sbx.agent.service.web.signin_sessions`).

    Only a SHA-256 of the cookie is kept, as for keys; the session acts as its key
    and stops when the key is revoked, when it expires, or at sign-out.
    """

    __tablename__ = "web_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_name: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class OidcLogin(Base):
    """A sign-in sent to the OpenID Connect provider that has not come back yet.

    Kept in the store so the callback may reach any replica; used once (deleted as it is
    read), dead after a few minutes. `state` and the browser's binding cookie are stored
    as SHA-256s; the nonce and the PKCE verifier are needed in clear at the callback.
    """

    __tablename__ = "oidc_logins"

    state_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    browser_hash: Mapped[str] = mapped_column(String(64))
    nonce: Mapped[str] = mapped_column(String(64))
    verifier: Mapped[str] = mapped_column(String(128))
    redirect_uri: Mapped[str] = mapped_column(String(512))
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class OidcIdentity(Base):
    """A person who signed in through the provider: principal `oidc:<claim value>`, role."""

    __tablename__ = "oidc_identities"

    principal: Mapped[str] = mapped_column(String(80), primary_key=True)
    issuer: Mapped[str] = mapped_column(String(512))
    subject: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    signed_in_at: Mapped[float] = mapped_column(Float)
    team: Mapped[str | None] = mapped_column(String(64), default=None)
    """The team the provider's claim gave at the last sign-in (None: no team)."""


class OidcSession(Base):
    """A browser signed in through the provider (the same cookie as `WebSession`'s).

    Separate from `web_sessions`, whose rows act as an API key and end with it; these
    act as their identity, with the role the provider's claims gave at sign-in.
    """

    __tablename__ = "oidc_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal: Mapped[str] = mapped_column(String(80), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)


class NoteRow(Base):
    """A note about a dataset (`sbx.agent.core.notes.Note`): who wrote it, shared or not."""

    __tablename__ = "notes"
    __table_args__ = (Index("ix_notes_dataset_author", "dataset", "author"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    dataset: Mapped[str] = mapped_column(String(255))
    digest: Mapped[str] = mapped_column(String(64))
    text: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(80))
    team: Mapped[str | None] = mapped_column(String(64), default=None)
    by_model: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
