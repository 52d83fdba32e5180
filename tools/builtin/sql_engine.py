"""Run one model-written query host-side, behind the walls each engine offers, into an Arrow table.

The model's SQL is hostile. Every wall below holds on its own:

PostgreSQL (psycopg)
    The query runs as a server-side cursor (`DECLARE ... CURSOR FOR <sql>`), which
    PostgreSQL accepts for one `SELECT` or `VALUES` only: a second statement, an
    `INSERT`, a `COMMIT`, a data-modifying `WITH` are syntax errors before anything runs.
    The transaction is `READ ONLY` (it cannot be switched back once a query ran) and
    always rolled back; `statement_timeout` and `lock_timeout` bound each statement.
SQLite
    The file is opened `mode=ro`; an authorizer allows only reads (`SELECT`, reading
    columns, functions, recursive CTEs): `ATTACH`, `PRAGMA`, writes and DDL are denied
    before they run; one statement per call (the driver refuses more); a progress
    handler interrupts a query past its deadline.
Both
    Rows are fetched in batches up to `max_rows` and an estimate of `max_bytes`, and the
    whole fetch stops at the deadline: a huge result is cut, never held in memory.

What no wall here replaces: the database role's own rights. A function with side
effects that a role may call (`dblink`, `lo_export`, `pg_terminate_backend`) runs in a
read-only transaction too; give the source a role that may only read (security.md).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import pyarrow as pa
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

FETCH_BATCH = 1000
CONNECT_TIMEOUT_S = 10
_SQLITE_READS = frozenset({
    sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE,
})


class QueryError(Exception):
    """The database refused or cancelled the query; the message is for the model."""


@dataclass(frozen=True, kw_only=True)
class QueryLimits:
    """The bounds of one query, from `[tools.query_sql]`."""

    timeout_s: float
    """Seconds the query may take, fetching included."""
    max_rows: int
    """Most rows kept."""
    max_bytes: int
    """Most bytes of values kept (estimated)."""


@dataclass(frozen=True, kw_only=True)
class QueryResult:
    """What one query returned, as a table, and whether (and why) it was cut."""

    table: pa.Table
    """The rows kept, one Arrow column per result column."""
    cut: str | None
    """None, or the policy key that cut the result (`tools.query_sql.max_rows`, ...)."""
    duration_s: float
    """Seconds from connecting to the last row fetched."""


class _Cursor(Protocol):
    @property
    def description(self) -> Any: ...

    def fetchmany(self, size: int) -> list[Any]: ...


def run_query(url: str, sql: str, limits: QueryLimits) -> QueryResult:
    """Run `sql` read-only against `url` within `limits` (`QueryError`: refused or cancelled)."""
    started = time.monotonic()
    deadline = started + limits.timeout_s
    scheme = make_url(url).get_backend_name()
    opener = _sqlite if scheme == "sqlite" else _postgresql
    try:
        with opener(url, sql, limits.timeout_s, deadline) as cursor:
            names, columns, cut = _fetch(cursor, limits, deadline)
    except (sqlite3.Error, QueryError) as exc:
        raise QueryError(_first_line(exc)) from None
    except Exception as exc:  # the driver's own errors (psycopg.Error and its subclasses)
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        raise QueryError(_first_line(exc)) from None
    return QueryResult(table=_table(names, columns), cut=cut,
                       duration_s=time.monotonic() - started)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


@contextmanager
def _postgresql(url: str, sql: str, timeout_s: float, deadline: float) -> Iterator[_Cursor]:
    """A server-side cursor over `sql` in a read-only transaction that is always rolled back."""
    target = make_url(url).set(drivername="postgresql+psycopg")
    engine = create_engine(target, poolclass=NullPool,
                           connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    try:
        raw = engine.raw_connection()
    except Exception as exc:
        engine.dispose()
        raise QueryError(f"cannot connect to the source: {_first_line(exc)}") from None
    try:
        conn = raw.driver_connection
        if conn is None:  # pragma: no cover - psycopg always has one
            raise QueryError("the source's driver gave no connection")
        conn.read_only = True
        conn.autocommit = False
        ms = max(1, int(timeout_s * 1000))
        conn.execute(f"SET LOCAL statement_timeout = {ms}")
        conn.execute(f"SET LOCAL lock_timeout = {ms}")
        cursor = conn.cursor(name="sbx_query")
        try:
            cursor.execute(sql.strip().rstrip(";"))
            yield cursor
        finally:
            with contextlib.suppress(Exception):  # in an aborted transaction: the rollback's
                cursor.close()
    finally:
        try:
            raw.rollback()
        finally:
            raw.close()
            engine.dispose()


@contextmanager
def _sqlite(url: str, sql: str, timeout_s: float, deadline: float) -> Iterator[_Cursor]:
    """The file opened read-only, reads alone authorized, interrupted past the deadline."""
    path = make_url(url).database
    if not path or path == ":memory:":
        raise QueryError("the SQLite source names no file")
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=timeout_s,
                           check_same_thread=False)
    try:
        conn.set_authorizer(_sqlite_authorizer)
        conn.set_progress_handler(_past(deadline), 1000)
        yield conn.execute(sql)
    finally:
        conn.rollback()
        conn.close()


def _sqlite_authorizer(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _SQLITE_READS else sqlite3.SQLITE_DENY


def _past(deadline: float) -> Callable[[], int]:
    return lambda: 1 if time.monotonic() > deadline else 0


def _fetch(
    cursor: _Cursor, limits: QueryLimits, deadline: float
) -> tuple[list[str], list[list[Any]], str | None]:
    """Column names and values, fetched in batches until a bound says stop."""
    names = _column_names(cursor.description)
    columns: list[list[Any]] = [[] for _ in names]
    rows = size = 0
    while True:
        if time.monotonic() > deadline:
            return names, columns, "tools.query_sql.statement_timeout"
        batch = cursor.fetchmany(min(FETCH_BATCH, limits.max_rows + 1 - rows))
        if not batch:
            return names, columns, None
        for row in batch:
            if rows >= limits.max_rows:
                return names, columns, "tools.query_sql.max_rows"
            size += sum(_size(value) for value in row)
            if size > limits.max_bytes:
                return names, columns, "tools.query_sql.max_bytes"
            for column, value in zip(columns, row, strict=True):
                column.append(value)
            rows += 1


def _column_names(description: Any) -> list[str]:
    """Names as the database gave them, made unique and non-empty."""
    names: list[str] = []
    for index, column in enumerate(description or ()):
        name = str(column[0] or f"column_{index + 1}")
        base, n = name, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def _size(value: object) -> int:
    if isinstance(value, str | bytes):
        return len(value) + 4
    return 8


def _table(names: list[str], columns: list[list[Any]]) -> pa.Table:
    """An Arrow table; a column Arrow cannot type (mixed, nested) is kept as text."""
    arrays = []
    for values in columns:
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            arrays.append(pa.array([_text(v) for v in values], type=pa.string()))
    return pa.Table.from_arrays(arrays, names=names)


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
