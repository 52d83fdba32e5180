"""Render the head of a data file for the model: tables aligned, other text as lines.

Tables (CSV with any common delimiter, TSV, JSON Lines, JSON records) are parsed
by `tools.builtin.tables`, the data summary's parser, so the guard's column
rules apply to each of them alike.
"""

from __future__ import annotations

from sbx.sandbox.units import format_size
from sbx.tools.builtin.tables import Table, TableError, read_table
from sbx.tools.guard import DataGuard
from sbx.tools.registry import ToolFailure

MAX_CELL = 40
MAX_COLUMNS = 30


def preview_text(
    name: str, head: bytes, *, rows: int, size: int, guard: DataGuard | None = None
) -> str:
    """The preview of `head` (the first bytes of a file of `size` bytes).

    A table passes `guard`'s column rules; text lines are withheld in schema-only mode.
    """
    if b"\0" in head:
        raise ToolFailure(f"{name} looks binary; read it with execute_python")
    cut = len(head) < size
    if cut and b"\n" in head:
        head = head[: head.rfind(b"\n") + 1]  # never show a half line
    text = head.decode("utf-8-sig", errors="replace")
    try:
        table = read_table(name, text, complete=not cut)
    except TableError as exc:
        raise ToolFailure(f"cannot parse {name}: {exc}") from None
    if table is not None:
        body, shown = _table(table, rows=rows, guard=guard)
    elif guard is not None and guard.rules.schema_only:
        body, shown = "(lines withheld by policy: schema only)", 0
    else:
        lines = text.splitlines()[:rows]
        body, shown = "\n".join(lines), len(lines)
    note = f"{name}: {format_size(size)}; showing {shown} row(s)"
    if cut:
        note += f" from the first {format_size(len(head))}"
    return f"{note}\n{body}"


def _table(table: Table, *, rows: int, guard: DataGuard | None) -> tuple[str, int]:
    """Header plus `rows` records, cells cut to `MAX_CELL`, columns aligned, columns guarded."""
    records = [[_cell(value) for value in record[:MAX_COLUMNS]]
               for record in [table.header, *table.rows[:rows]]]
    if not table.header:
        return "(empty file)", 0
    note = ""
    if guard is not None:
        columns = guard.columns(records[0])
        body = [columns.row(row) for row in records[1:]] if columns.rows else []
        records, note = [columns.header(records[0]), *body], columns.note()
    if table.kind not in ("CSV", "TSV"):
        note = f"{table.kind}; {note}" if note else table.kind
    widths = [max(len(r[i]) for r in records if i < len(r)) for i in range(len(records[0]))]
    lines = [" | ".join(v.ljust(widths[i]) if i < len(widths) else v for i, v in enumerate(r))
             for r in records]
    text = "\n".join(line.rstrip() for line in lines)
    return (f"({note})\n{text}" if note else text), len(records) - 1


def _cell(value: str) -> str:
    value = value.replace("\n", " ")
    return value if len(value) <= MAX_CELL else value[: MAX_CELL - 1] + "…"
