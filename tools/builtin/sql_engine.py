"""Run one model-written query host-side, behind the walls each engine offers, into an Arrow table.

The model's SQL is hostile. Every wall below holds on its own:

PostgreSQL (psycopg)
    The query runs as a server-side cursor (`DECLARE ... CURSOR FOR <sql>`), which
    PostgreSQL accepts for one `SELECT` or `VALUES` only: a second statement, an
    `INSERT`, a `COMMIT`, a data-modifying `WITH` are syntax errors before anything runs.
    The transaction is `READ ONLY` (it cannot be switched back once a query ran) and
    always rolled back; `statement_timeout` and `lock_timeout` bound each statement, and
    since a query may lift its own `statement_timeout` (`set_config`), a timer cancels the
    running statement from the server's side at the deadline (or when the run is
    cancelled), whatever the session says; the connection is closed then.
    The database bounds what it sends: the cursor reads the query through a wrapper that
    counts each row's bytes and a running total, and sends NULLs for every row past
    `max_bytes`; the first such row ends the fetch.
SQLite
    The file is opened `mode=ro`; an authorizer allows only reads (`SELECT`, reading
    columns, functions, recursive CTEs): `ATTACH`, `PRAGMA`, writes and DDL are denied
    before they run; one statement per call (the driver refuses more); a progress
    handler interrupts a query past its deadline. `SQLITE_LIMIT_LENGTH` is set to
    `max_bytes`, so no value larger than the cap is ever built (a stored one is refused
    before it is read); rows are read one at a time.
Both
    Rows are fetched until `max_rows` or `max_bytes` (the running byte count of what is
    kept) or the deadline says stop: a huge result is cut before it is held, never after.

What no wall here replaces: the database role's own rights. A function with side
effects that a role may call (`dblink`, `lo_export`, `pg_terminate_backend`) runs in a
read-only transaction too; give the source a role that may only read (security.md).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import pyarrow as pa
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from sbx.sandbox.units import format_size

FETCH_BATCH = 1000
"""Most rows asked of PostgreSQL at once (fewer when the rows seen so far are wide)."""
FIRST_BATCH = 10
"""Rows asked first: a result of wide rows costs the database little before the cut."""
VALUE_BYTES = 8
"""Bytes counted for each value on top of its text (a number, a NULL, the Python object)."""
CONNECT_TIMEOUT_S = 10
CANCEL_EVERY_S = 0.5
"""Past the deadline, a PostgreSQL cancel is sent again this often until the call ends."""
WATCH_S = 0.1
"""How often the canceller looks at the deadline and the run's cancel."""
APPLICATION_NAME = "sbx query_sql"
"""How the session shows in `pg_stat_activity`."""
BYTES_KEY = "tools.query_sql.max_bytes"
ROWS_KEY = "tools.query_sql.max_rows"
TIMEOUT_KEY = "tools.query_sql.statement_timeout"
_SQLITE_READS = frozenset({
    sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE,
})


class QueryError(Exception):
    """The database refused or cancelled the query; the message is for the model."""


class _RowTooLarge(Exception):
    """The engine refused to build a value larger than `max_bytes`: the result is cut there."""


@dataclass(frozen=True, kw_only=True)
class QueryLimits:
    """The bounds of one query, from `[tools.query_sql]`."""

    timeout_s: float
    """Seconds the query may take, fetching included; the statement is cancelled then."""
    max_rows: int
    """Most rows kept."""
    max_bytes: int
    """Most bytes of values kept, counted as they arrive (their text, plus `VALUE_BYTES` each)."""


@dataclass(frozen=True)
class _Bound:
    """When a query must end: at its deadline, or when its run is cancelled (`stop`)."""

    deadline: float
    stop: threading.Event | None

    def cancelled(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def over(self) -> bool:
        return time.monotonic() > self.deadline or self.cancelled()


@dataclass(frozen=True, kw_only=True)
class QueryResult:
    """What one query returned, as a table, and whether (and why) it was cut."""

    table: pa.Table
    """The rows kept, one Arrow column per result column."""
    cut: str | None
    """None, or the policy key that cut the result (`tools.query_sql.max_rows`, ...)."""
    duration_s: float
    """Seconds from connecting to the last row fetched."""


class _Rows(Protocol):
    """A running query's rows, each with its size in bytes, as the engine bounded them."""

    names: list[str]

    def fetch(self, count: int) -> list[tuple[int, Sequence[Any]]]:
        """At most `count` rows (fewer is fine), [] at the end; `_RowTooLarge` at a refused one."""
        ...


def run_query(
    url: str, sql: str, limits: QueryLimits, *, stop: threading.Event | None = None
) -> QueryResult:
    """Run `sql` read-only against `url` within `limits` (`QueryError`: refused or cancelled).

    `stop` (the run's cancel) ends the query as its deadline does: the statement is
    cancelled and the connection released, not left to run for an abandoned call.
    """
    started = time.monotonic()
    bound = _Bound(started + limits.timeout_s, stop)
    scheme = make_url(url).get_backend_name()
    opener = _sqlite if scheme == "sqlite" else _postgresql
    try:
        with opener(url, sql, limits, bound) as rows:
            columns, cut = _fetch(rows, limits, bound)
    except (sqlite3.Error, QueryError) as exc:
        raise QueryError(_refusal(exc, limits, bound)) from None
    except Exception as exc:  # the driver's own errors (psycopg.Error and its subclasses)
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise
        raise QueryError(_refusal(exc, limits, bound)) from None
    return QueryResult(table=_table(rows.names, columns), cut=cut,
                       duration_s=time.monotonic() - started)


def _refusal(exc: BaseException, limits: QueryLimits, bound: _Bound) -> str:
    """The database's first line, and what cut the query when its bound did."""
    text = str(exc).strip() or type(exc).__name__
    first = text.splitlines()[0][:500]
    if isinstance(exc, QueryError) or not bound.over():
        return first
    if bound.cancelled():
        return f"{first}: cancelled with the run"
    return f"{first}: cancelled at the statement timeout of {limits.timeout_s:g} s ({TIMEOUT_KEY})"


def _fetch(
    rows: _Rows, limits: QueryLimits, bound: _Bound
) -> tuple[list[list[Any]], str | None]:
    """The values kept, by column, fetched until a bound says stop (and which one)."""
    columns: list[list[Any]] = [[] for _ in rows.names]
    kept = size = 0
    batch = FIRST_BATCH
    while True:
        if bound.cancelled():
            raise QueryError("cancelled with the run")
        if bound.over():
            return columns, TIMEOUT_KEY
        try:
            fetched = rows.fetch(min(batch, limits.max_rows + 1 - kept))
        except _RowTooLarge:
            return columns, BYTES_KEY
        if not fetched:
            return columns, None
        for row_bytes, values in fetched:
            if kept >= limits.max_rows:
                return columns, ROWS_KEY
            size += row_bytes
            if size > limits.max_bytes:
                return columns, BYTES_KEY
            for column, value in zip(columns, values, strict=True):
                column.append(value)
            kept += 1
        widest = max(row_bytes for row_bytes, _ in fetched)
        batch = max(1, min(FETCH_BATCH, (limits.max_bytes - size) // max(widest, 1)))


# ------------------------------------------------------------------ PostgreSQL


@contextmanager
def _postgresql(url: str, sql: str, limits: QueryLimits, bound: _Bound) -> Iterator[_Rows]:
    """A server-side cursor over `sql`, bounded by the database, in a read-only transaction."""
    target = make_url(url).set(drivername="postgresql+psycopg")
    engine = create_engine(target, poolclass=NullPool, connect_args={
        "connect_timeout": CONNECT_TIMEOUT_S, "application_name": APPLICATION_NAME})
    try:
        raw = engine.raw_connection()
    except Exception as exc:
        engine.dispose()
        raise QueryError(f"cannot connect to the source: {_refusal(exc, limits, bound)}"
                         ) from None
    try:
        conn = raw.driver_connection
        if conn is None:  # pragma: no cover - psycopg always has one
            raise QueryError("the source's driver gave no connection")
        with _cancelled_at(conn, bound):
            conn.read_only = True
            conn.autocommit = False
            ms = max(1, int(limits.timeout_s * 1000))
            conn.execute(f"SET LOCAL statement_timeout = {ms}")
            conn.execute(f"SET LOCAL lock_timeout = {ms}")
            body = sql.strip().rstrip(";")
            names = _result_names(conn, body)
            cursor = conn.cursor(name="sbx_query")
            try:
                cursor.execute(bounded_select(body, len(names), limits.max_bytes))
                yield _PgRows(names, cursor)
            finally:
                with contextlib.suppress(Exception):  # in an aborted transaction: the rollback's
                    cursor.close()
    finally:
        try:
            raw.rollback()
        finally:
            raw.close()
            engine.dispose()


def bounded_select(body: str, width: int, max_bytes: int) -> str:
    """`body` wrapped so that PostgreSQL sends each row's size and no values past `max_bytes`.

    The first column is the row's size (the text of each value plus `VALUE_BYTES`); a
    running total over the rows in their order decides whether the values are sent or
    NULLs. `body` was declared on its own first (one `SELECT` or `VALUES`, else refused),
    and it ends with a newline here so that a trailing `--` comment cannot swallow the
    wrapper's closing parenthesis; the wrapper is declared as a cursor too, which takes
    one query and nothing else.
    """
    names = [f"sbx_c{index}" for index in range(1, width + 1)]
    size = " + ".join(f"coalesce(octet_length({name}::text), 0)::bigint" for name in names)
    sent = "".join(f", CASE WHEN sbx_total <= {int(max_bytes)} THEN {name} END" for name in names)
    alias = f"q({', '.join(names)})" if names else "q"
    return (
        f"SELECT sbx_n{sent} FROM ("
        "SELECT s.*, sum(s.sbx_n) OVER (ROWS UNBOUNDED PRECEDING) AS sbx_total FROM ("
        f"SELECT q.*, ({size or '0'} + {VALUE_BYTES * width})::bigint AS sbx_n "
        f"FROM (\n{body}\n) AS {alias}) AS s) AS w"
    )


def _result_names(conn: Any, body: str) -> list[str]:
    """The query's column names, from declaring it alone (which also refuses a non-query)."""
    shape = conn.cursor(name="sbx_shape")
    try:
        shape.execute(body)
        return _column_names(shape.description)
    finally:
        with contextlib.suppress(Exception):
            shape.close()


class _PgRows:
    def __init__(self, names: list[str], cursor: Any) -> None:
        self.names = names
        self._cursor = cursor

    def fetch(self, count: int) -> list[tuple[int, Sequence[Any]]]:
        return [(int(row[0]), row[1:]) for row in self._cursor.fetchmany(count)]


@contextmanager
def _cancelled_at(conn: Any, bound: _Bound) -> Iterator[None]:
    """Cancel the connection's running statement once `bound` is over, until the block ends.

    The session's `statement_timeout` is the query's to change (`set_config(...)` in a
    select list), a cancel request from outside is not: whatever the query set, its
    statement ends at the deadline (or when the run is cancelled), and the connection is
    released by the caller.
    """
    done = threading.Event()

    def cancel() -> None:
        while not done.wait(WATCH_S):
            if bound.over():
                with contextlib.suppress(Exception):  # a failed cancel is retried; close ends it
                    conn.cancel_safe(timeout=CANCEL_EVERY_S * 4)
                done.wait(CANCEL_EVERY_S)

    canceller = threading.Thread(target=cancel, name="sbx-sql-cancel", daemon=True)
    canceller.start()
    try:
        yield
    finally:
        done.set()
        canceller.join()


# ------------------------------------------------------------------ SQLite


@contextmanager
def _sqlite(url: str, sql: str, limits: QueryLimits, bound: _Bound) -> Iterator[_Rows]:
    """The file opened read-only, reads alone authorized, values bounded, interrupted in time."""
    path = make_url(url).database
    if not path or path == ":memory:":
        raise QueryError("the SQLite source names no file")
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=limits.timeout_s,
                           check_same_thread=False)
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(1, limits.max_bytes))
        conn.set_authorizer(_sqlite_authorizer)
        conn.set_progress_handler(lambda: 1 if bound.over() else 0, 1000)
        try:
            cursor = conn.execute(sql)
        except sqlite3.DataError as exc:
            if not _too_big(exc):
                raise
            raise QueryError(
                f"a value of the result is larger than {BYTES_KEY} "
                f"({format_size(limits.max_bytes)}): select less of it or aggregate in SQL"
            ) from None
        yield _SqliteRows(cursor)
    finally:
        conn.rollback()
        conn.close()


class _SqliteRows:
    """One row at a time: SQLite builds values in this process, each at most `max_bytes`.

    The driver steps one row ahead, so when the next row holds a refused value the
    row before it is lost too: the result is cut one row earlier, never wrong.
    """

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.names = _column_names(cursor.description)
        self._cursor = cursor

    def fetch(self, count: int) -> list[tuple[int, Sequence[Any]]]:
        try:
            row = self._cursor.fetchone()
        except sqlite3.DataError as exc:
            if not _too_big(exc):
                raise
            raise _RowTooLarge from None
        return [] if row is None else [(sum(_size(value) for value in row), row)]


def _too_big(exc: sqlite3.DataError) -> bool:
    return "too big" in str(exc)


def _sqlite_authorizer(action: int, *_: object) -> int:
    return sqlite3.SQLITE_OK if action in _SQLITE_READS else sqlite3.SQLITE_DENY


# ------------------------------------------------------------------ Arrow


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
        return len(value) + VALUE_BYTES
    return VALUE_BYTES


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
