"""The store's engine: SQLite (WAL) under the data dir by default, PostgreSQL by URL.

Two kinds of transaction, so that checks and the writes they allow cannot
interleave across threads or replicas:

    db.read()    a plain transaction, for lookups
    db.write()   a write transaction; `lock_principal` then serializes one principal's
                 check-and-reserve (quotas) across every replica

On PostgreSQL the lock is a row lock (`SELECT ... FOR UPDATE` on the
principal's key row); on SQLite a write transaction starts with `BEGIN
IMMEDIATE`, which takes the database's single write lock at once (SQLite has
no row locks, and a deferred transaction could read, then fail to upgrade).
Writers of one process first queue on a lock of their own (`_gate`, one per
database file): SQLite's busy handler polls with sleeps of up to 100 ms, so
32 runs storing events at once waited far longer than the lock was held; a
thread lock wakes the next writer as soon as the last one commits, and keeps
the waiting writers from holding pooled connections. Other processes on the
same file still meet the busy timeout.

Migrations (Alembic, `agent/core/hosting/store/migrations/`) are applied at start under
a lock (`pg_advisory_xact_lock` on PostgreSQL, the write lock on SQLite), so
replicas starting together migrate once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from sbx.agent.core.hosting.store.models import ApiKey, OidcIdentity
from sbx.sandbox.errors import SbxError

DATABASE_ENV = "SBX_DATABASE_URL"
DATA_DIR_ENV = "SBX_DATA_DIR"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_MIGRATE_LOCK = 0x5B7_5E7E  # any constant: the advisory lock id of "sbx migrations"
_WRITE = "sbx_write"
_GATES: dict[str, threading.RLock] = {}
_GATES_LOCK = threading.Lock()


class StoreError(SbxError):
    """The store cannot be opened or used; the message names the database (never a password)."""


def data_dir(option: Path | None, environ: Mapping[str, str]) -> Path:
    """`--data-dir` > `SBX_DATA_DIR` > `./sbx-data`."""
    return option or Path(environ.get(DATA_DIR_ENV) or "sbx-data")


def database_url(option: str | None, data_dir: Path, environ: Mapping[str, str]) -> str:
    """`--database` > `SBX_DATABASE_URL` > SQLite at `<data dir>/sbx.db`.

    `postgresql://` and `postgres://` mean the psycopg 3 driver.
    """
    url = option or environ.get(DATABASE_ENV) or f"sqlite:///{data_dir / 'sbx.db'}"
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


class Database:
    """An engine and its two session factories; `open()`, `migrate()`, then `close()`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"
        self._gate = _gate(engine) if self.sqlite else None
        """This process's queue for SQLite's write lock (none on PostgreSQL: row locks)."""
        self._read = sessionmaker(bind=engine, expire_on_commit=False)
        self._write = sessionmaker(
            bind=engine.execution_options(**{_WRITE: True}), expire_on_commit=False
        )

    @classmethod
    def open(cls, url: str) -> Database:
        """Create the engine (no connection yet); SQLite gets WAL and a busy timeout."""
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise StoreError("the database URL is not valid (expected e.g. "
                             "postgresql://user@host/db or sqlite:///path)") from None
        if parsed.get_backend_name() == "sqlite":
            return cls(_sqlite_engine(url))
        if parsed.get_backend_name() != "postgresql":
            raise StoreError(f"unsupported database {parsed.get_backend_name()!r}: "
                             "use SQLite or PostgreSQL")
        engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
        return cls(engine)

    @property
    def display(self) -> str:
        """The URL with any password hidden, for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    def migrate(self) -> None:
        """Apply every Alembic migration not applied yet, once across replicas."""
        try:
            with self._write_connection() as connection:
                if not self.sqlite:
                    connection.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                       {"id": _MIGRATE_LOCK})
                config = Config()
                config.set_main_option("script_location", str(MIGRATIONS))
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot migrate the database {self.display}: "
                             f"{_cause(exc, self.engine.url.password)}") from None

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session in a plain transaction, committed at the end."""
        with self._read.begin() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in a write transaction (SQLite: `BEGIN IMMEDIATE`), committed at the end."""
        with self._queued(), self._write.begin() as session:
            yield session

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection in a plain transaction, for a hot read path that needs no ORM session.

        A session costs several times the query it runs (the event stream reads once
        per stored event of every run it follows).
        """
        with self.engine.connect() as connection, connection.begin():
            yield connection

    def session_factories(self) -> tuple[sessionmaker[Session], ...]:
        """The factories of every session it hands out (to hook what is written)."""
        return (self._read, self._write)

    def ping(self) -> None:
        """One round trip; raises `StoreError` when the database does not answer."""
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except SQLAlchemyError as exc:
            raise StoreError(f"the database {self.display} does not answer: "
                             f"{_cause(exc, self.engine.url.password)}") from None

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def _write_connection(self) -> Iterator[Connection]:
        with self._queued(), self.engine.execution_options(**{_WRITE: True}).begin() as connection:
            yield connection

    @contextmanager
    def _queued(self) -> Iterator[None]:
        """This process's turn at SQLite's write lock (see the module docstring)."""
        if self._gate is None:
            yield
            return
        with self._gate:  # reentrant: a nested write meets SQLite's own lock, as before
            yield


def _gate(engine: Engine) -> threading.RLock:
    """One lock per SQLite file in this process (every `Database` on it shares it)."""
    path = engine.url.database or ""
    key = str(Path(path).resolve()) if path and path != ":memory:" else f"memory:{id(engine)}"
    with _GATES_LOCK:
        return _GATES.setdefault(key, threading.RLock())


def lock_principal(session: Session, principal: str) -> None:
    """Serialize this principal's quota check-and-reserve across threads and replicas.

    PostgreSQL: a row lock on the principal's key (or, for a person signed in
    through the OpenID Connect provider, their identity row), held to the end of
    the transaction. SQLite: the write transaction already holds the database's
    write lock (its first statement, whichever it is, begins it `IMMEDIATE`), so
    nothing is sent.
    """
    if session.get_bind().dialect.name == "sqlite":
        return
    if principal.startswith("oidc:"):
        session.execute(select(OidcIdentity.principal).where(
            OidcIdentity.principal == principal).with_for_update())
        return
    name = principal.removeprefix("key:")
    session.execute(select(ApiKey.name).where(ApiKey.name == name).with_for_update())


def _sqlite_engine(url: str) -> Engine:
    """SQLite in WAL mode; transactions begun by us (BEGIN, or BEGIN IMMEDIATE to write)."""
    path = make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _connect(dbapi: Any, record: Any) -> None:
        dbapi.isolation_level = None  # we issue BEGIN ourselves (below)
        dbapi.execute("PRAGMA journal_mode=WAL")
        dbapi.execute("PRAGMA synchronous=NORMAL")
        dbapi.execute("PRAGMA foreign_keys=ON")
        dbapi.execute("PRAGMA busy_timeout=30000")

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        write = connection.get_execution_options().get(_WRITE)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    if path and path != ":memory:" and not os.path.exists(path):
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)  # private from the start
        os.close(fd)
    return engine


MAX_CAUSE = 300
"""Characters of the driver's message kept in an error."""


def _cause(exc: SQLAlchemyError, password: str | None = None) -> str:
    """The driver's error class and message on one line, bounded, the URL's password hidden.

    The message says what to fix (a refused connection, a wrong password, a missing
    database). The message of a connection failure comes from the driver and the server, never from
    the rows: it names the host, the port, the user or the database, as the URL does.
    """
    error = getattr(exc, "orig", None) or exc
    message = " ".join(str(error).split())
    if password:
        message = message.replace(password, "***")
    if len(message) > MAX_CAUSE:
        message = message[: MAX_CAUSE - 1] + "…"
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
