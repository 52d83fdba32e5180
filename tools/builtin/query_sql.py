"""`query_sql`: read-only SQL against the operator's named sources; the result lands in `/data`.

The gate has checked, before this runs, that the source is one the principal may
query (`tools.query_sql.sources.NAME.principals`) and that the SQL fits
`max_sql_chars`. The query runs host-side (`sql_engine`: read-only transaction,
statement timeout, row and byte caps); the sandbox keeps no network. The rows
become a Parquet file that the workspace puts into the running sandbox's
`/data/queries/` (`ToolContext.data_drop`), and the model is told its path, its
columns and types, its row count and its first rows. The audit's outcome record
keeps the source, the SQL text, the row count and the principal.
"""

from __future__ import annotations

import io
import re
import time
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sbx.sandbox.units import format_size
from sbx.tools.builtin.sql_engine import QueryError, QueryLimits, QueryResult, run_query
from sbx.tools.context import ToolContext
from sbx.tools.guard import DataGuard
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, build_tool
from sbx.tools.sql_policy import QuerySqlRule

HEAD_ROWS = 5
"""Rows shown in the observation (the file has them all)."""
MAX_CELL_CHARS = 40
"""Longest value shown in the head; the rest is cut with an ellipsis."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
ONE_SELECT = "query_sql runs one read-only SELECT (or WITH ... SELECT, or VALUES) per call"

_DOC = """Run one read-only SQL query on a database the operator named; the rows become Parquet.

The result is saved in the sandbox at /data/queries/NAME.parquet (read it in
execute_python with pandas.read_parquet); you are told its columns, types, row count
and first rows. Only reads are allowed; large results are cut, so aggregate in SQL.

Sources you may query:
{sources}

Args:
    source: The source's name, one of those listed.
    sql: One SELECT (or WITH ... SELECT, or VALUES) statement in the source's dialect.
    name: The result's file name without suffix (letters, digits, _ and -); empty: q1, q2, ...
    ctx: The run's context, injected by the gate (not part of the schema).
"""


def make_query_sql(rule: QuerySqlRule, principal: str, guard: DataGuard | None = None) -> Tool:
    """The `query_sql` tool for `principal`: its description lists the sources they may query."""
    mine = rule.sources_for(principal)
    listed = "\n".join(
        f"- {name}: {_dialect(src.url or '')}{' - ' + src.description if src.description else ''}"
        for name, src in sorted(mine.items())
    )
    # the gate abandons a call at `timeout` (plus a grace): its statement is cancelled by then
    timeout_s = min(rule.statement_timeout, rule.timeout or rule.statement_timeout)
    limits = QueryLimits(timeout_s=timeout_s, max_rows=rule.max_rows, max_bytes=rule.max_bytes)
    counter = iter(range(1, 1_000_000))

    def query_sql(source: str, sql: str, ctx: ToolContext, name: str = "") -> ToolReturn:
        if ctx.data_drop is None:
            raise ToolFailure("no sandbox in this run to receive the result")
        stem = name or f"q{next(counter)}"
        if not _NAME.match(stem):
            raise ToolFailure(f"name {stem[:80]!r} must be letters, digits, _ or - (at most 64)")
        found = mine.get(source)
        if found is None:  # the gate refuses it first; never trust one check alone
            raise ToolFailure(f"source {source!r} is not one you may query")
        audit: dict[str, Any] = {"principal": ctx.principal, "source": source, "sql": sql}
        try:
            result = run_query(found.resolved_url(), sql, _within_run(limits, ctx), stop=ctx.stop)
        except (QueryError, ValueError) as exc:
            message = f"{exc} ({ONE_SELECT}; the database refused or cancelled it)"
            raise ToolFailure(message) from None
        data = _parquet(result.table)
        path = ctx.data_drop.put(f"{stem}.parquet", data)
        audit |= {"rows": result.table.num_rows, "columns": result.table.num_columns,
                  "cut": result.cut, "parquet_bytes": len(data), "path": path,
                  "query_s": round(result.duration_s, 3)}
        text = render_query(source, path, result, len(data), guard)
        return ToolReturn(text=text, value=path, audit=audit)

    query_sql.__doc__ = _DOC.format(sources=listed or "(none)")
    return build_tool(query_sql)


def _within_run(limits: QueryLimits, ctx: ToolContext) -> QueryLimits:
    """The limits, with the timeout cut to what is left of the run's time (`--max-time`)."""
    if ctx.deadline is None:
        return limits
    left = max(0.001, ctx.deadline - time.monotonic())
    return replace(limits, timeout_s=min(limits.timeout_s, left))


def _dialect(url: str) -> str:
    if not url:
        return "database"
    return "SQLite" if url.lower().startswith("sqlite") else "PostgreSQL"


def _parquet(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def render_query(
    source: str, path: str, result: QueryResult, size: int, guard: DataGuard | None = None
) -> str:
    """What the model reads: where the file is, its shape and types, the first rows, any cut.

    The first rows pass the principal's column rules (`[guard]`: dropped and masked
    columns, schema only), as a preview of a data file does; the gate's detectors then
    filter the whole text. The file itself holds every column, as a data file would.
    """
    table = result.table
    columns = guard.columns(table.column_names) if guard is not None else None
    lines = [
        f"Query on {source!r}: {table.num_rows} rows x {table.num_columns} columns in "
        f"{result.duration_s:.2f} s, saved to {path} ({format_size(size)}).",
        "Columns:",
        *(f"  {field.name}: {field.type}" for field in table.schema),
    ]
    if result.cut is not None:
        lines.append(f"[the result was cut at {table.num_rows} rows by {result.cut}: the file "
                     "holds only these; filter or aggregate in SQL to see everything]")
    if columns is not None and columns.note():
        lines.append(f"({columns.note()})")
    if table.num_rows and (columns is None or columns.rows):
        lines.append(f"First {min(HEAD_ROWS, table.num_rows)} rows:")
        for row in table.slice(0, HEAD_ROWS).to_pylist():
            cells = [_cell(value) for value in row.values()]
            lines.append("  " + " | ".join(columns.row(cells) if columns else cells))
    lines.append(f'Read it in execute_python: df = pd.read_parquet("{path}")')
    return "\n".join(lines)


def _cell(value: object) -> str:
    text = "NULL" if value is None else str(value)
    text = text.replace("\n", " ").replace("\r", " ")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"
