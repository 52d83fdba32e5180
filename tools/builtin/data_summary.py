"""What is in `/data`, computed on the host before the first turn, for the system prompt.

For every file: its path in the sandbox and its size. For tables (CSV with
any common delimiter, TSV, JSON Lines, JSON records: `tools.builtin.tables`,
the parser `preview_data_file` shares, so column rules see the same columns):
the columns with a dtype inferred from the first rows (int, float, bool,
date, datetime, text; `?` marks a column with empty cells), the row count
(exact when the whole file was read, else estimated), and a few rows. The
standard library does this without loading pandas on the host.
Parquet, Excel and other binary files get their name, size and the library
that reads them in the sandbox: parsing them here would need pyarrow and
openpyxl on the host, and the model reads them with one line of pandas.

Files are found and opened with the tools layer's confined index (no
symlinks followed, regular files only), the same one `list_data_files` uses.
Reads stop at `HEAD_BYTES` per file and `MAX_FILES` files are described.
Cell values are data, not instructions: the prompt says so, and cells are
cut to `MAX_CELL` characters.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from sbx.sandbox.units import format_size
from sbx.tools.builtin.data_files import DataFile, index_data_files, open_data_file
from sbx.tools.builtin.tables import TableError, is_table, read_table
from sbx.tools.guard import DataGuard

HEAD_BYTES = 64 * 1024
MAX_FILES = 20
SAMPLE_ROWS = 3
INFER_ROWS = 200
MAX_CELL = 40
MAX_COLUMNS = 40
_READERS = {
    ".parquet": "pd.read_parquet", ".feather": "pd.read_feather", ".xlsx": "pd.read_excel",
    ".xls": "pd.read_excel", ".json": "pd.read_json or json", ".jsonl": "pd.read_json(lines=True)",
    ".pkl": "pd.read_pickle (only if you trust it)",
}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
_BOOLS = {"true", "false", "yes", "no"}


def summarize_data(paths: Sequence[Path], *, guard: DataGuard | None = None) -> str:
    """The `/data` section of the system prompt; `guard`'s column rules apply to its tables."""
    index = index_data_files(list(paths), max_files=MAX_FILES + 1)
    if not index.files and not index.refused:
        return "No data files were given for this run; /data is empty."
    parts = [describe_file(item, guard) for item in index.files[:MAX_FILES]]
    if len(index.files) > MAX_FILES:
        parts.append("(more files: call list_data_files, or os.listdir('/data'))")
    parts += [f"- not available: {reason}" for reason in index.refused]
    return "\n\n".join(parts)


def describe_file(item: DataFile, guard: DataGuard | None = None) -> str:
    """One file's entry: path and size, plus the table view for the tables sbx parses."""
    header = f"- /data/{item.name} ({format_size(item.size)})"
    suffix = Path(item.name).suffix.lower()
    reader = _READERS.get(suffix)
    if is_table(item.name):
        try:
            head = _read_head(item)
        except OSError as exc:
            return f"{header}: cannot be read here ({exc.strerror})"
        table = describe_table(head, size=item.size, name=item.name, guard=guard)
        if table is not None and reader is None:
            return f"{header}\n{table}"
        if table is not None:
            return f"{header}: read it in the sandbox with {reader}\n{table}"
    return f"{header}: read it in the sandbox with {reader}" if reader else header


def _read_head(item: DataFile) -> bytes:
    fd = open_data_file(item)
    try:
        return os.read(fd, HEAD_BYTES)
    finally:
        os.close(fd)


def describe_table(
    head: bytes, *, size: int, name: str, guard: DataGuard | None = None
) -> str | None:
    """Columns with inferred dtypes, the row count and the first rows of a table's head.

    None when the file is not the table its name says (JSON that is not records).
    """
    complete = len(head) >= size
    if not complete and b"\n" in head:
        head = head[: head.rfind(b"\n") + 1]  # never parse a half row
    try:
        table = read_table(name, head.decode("utf-8-sig", errors="replace"), complete=complete)
    except TableError as exc:
        return f"  ({exc})"
    if table is None:
        return None
    if not table.header:
        return "  (empty file)"
    header, rows = table.header, table.rows
    dtypes = [infer_dtype([row[i] for row in rows[:INFER_ROWS] if i < len(row)])
              for i in range(len(header))]
    if complete:
        count = f"{table.count} rows"
    else:
        count = f"about {round(table.count * size / max(len(head), 1))} rows (estimated)"
    shown = rows[:SAMPLE_ROWS]
    note = ""
    if guard is not None:
        columns = guard.columns(header)
        header, dtypes, note = columns.header(header), columns.header(dtypes), columns.note()
        shown = [columns.row(row) for row in shown] if columns.rows else []
    pairs = zip(header[:MAX_COLUMNS], dtypes[:MAX_COLUMNS], strict=True)
    listed = ", ".join(f"{_cell(name)} ({dtype})" for name, dtype in pairs)
    more = f" and {len(header) - MAX_COLUMNS} more" if len(header) > MAX_COLUMNS else ""
    kind = "" if table.kind == "CSV" else f"{table.kind}; "
    lines = [f"  {kind}columns: {listed}{more}"]
    if note:
        lines.append(f"  ({note})")
    lines.append(f"  {count}; first rows:" if shown else f"  {count}")
    for row in shown:
        lines.append("    " + ",".join(_cell(value) for value in row[:MAX_COLUMNS]))
    return "\n".join(lines)


def infer_dtype(values: Sequence[str]) -> str:
    """A pandas-like dtype name for a column's sample; `?` marks empty cells."""
    present = [value.strip() for value in values if value.strip()]
    gaps = "?" if len(present) < len(values) else ""
    if not present:
        return "empty"
    for name, test in (("int", _is_int), ("float", _is_float), ("bool", _is_bool),
                       ("date", _DATE.match), ("datetime", _DATETIME.match)):
        if all(test(value) for value in present):
            return name + gaps
    return "text" + gaps


def _is_int(value: str) -> bool:
    return re.fullmatch(r"[+-]?\d+", value) is not None


def _is_float(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return "_" not in value


def _is_bool(value: str) -> bool:
    return value.lower() in _BOOLS


def _cell(value: str) -> str:
    value = value.replace("\n", " ").replace("\r", " ")
    return value if len(value) <= MAX_CELL else value[: MAX_CELL - 1] + "…"
