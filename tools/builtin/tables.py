"""The tables sbx reads on the host: one parser for the data summary and `preview_data_file`.

Whatever shows a table's rows to the model (the system prompt's data summary,
`preview_data_file`) parses it here, so the data guard's column rules
(`mask_columns`, `drop_columns`, `schema_only`) see the same columns in every
format a table comes in:

    .csv             the delimiter the header line uses most: `,` `;` tab or `|`
                     (Excel writes `;` where the decimal mark is a comma)
    .tsv             tab
    .jsonl .ndjson   one JSON object per line; columns in order of first appearance
    .json            an array of objects (records), read as far as the head goes

Parquet, Feather and Excel are binary: sbx shows their name and size, never
their cells, so no column rule is needed on the host for them. Only the head
of a file is parsed (the caller reads a bounded number of bytes); a record cut
off at its end is left out.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_ROWS = 1000
"""Rows kept of a head (more are counted, for the row estimate, not held)."""
MAX_COLUMNS = 200
"""Columns of JSON records: keys past these are not shown (a head of ever-new keys stays small)."""
DELIMITERS = (",", ";", "\t", "|")
"""What a `.csv` may be delimited with; the header line's most frequent one wins (`,` on a tie)."""
TABLE_SUFFIXES = frozenset({".csv", ".tsv", ".jsonl", ".ndjson", ".json"})


class TableError(ValueError):
    """The head does not parse as the table its name says."""


@dataclass(frozen=True, kw_only=True)
class Table:
    """The head of a table: its columns and the rows the head holds, cells as text."""

    kind: str
    """How it was read, for the model: `CSV`, `CSV (;)`, `TSV`, `JSON Lines`, `JSON records`."""
    header: list[str]
    """Column names."""
    rows: list[list[str]]
    """The first `MAX_ROWS` rows the head holds; a JSON record without a column has `""`."""
    count: int
    """How many rows the head holds."""


def is_table(name: str) -> bool:
    """Whether sbx parses this file as a table on the host (by its suffix)."""
    return Path(name).suffix.lower() in TABLE_SUFFIXES


def read_table(name: str, text: str, *, complete: bool) -> Table | None:
    """The table in `text` (a file's head, whole lines), or None when it is not one.

    Raises `TableError` when a CSV/TSV head does not parse; JSON that is not
    records is not a table (None), so the caller shows it as text.
    """
    suffix = Path(name).suffix.lower()
    if suffix in (".csv", ".tsv"):
        delimiter = "\t" if suffix == ".tsv" else sniff_delimiter(text)
        kind = "TSV" if suffix == ".tsv" else "CSV" if delimiter == "," else f"CSV ({delimiter})"
        try:
            records = list(csv.reader(io.StringIO(text), delimiter=delimiter))
        except csv.Error as exc:
            raise TableError(f"not parseable as {kind}: {exc}") from None
        if not records:
            return Table(kind=kind, header=[], rows=[], count=0)
        return Table(kind=kind, header=records[0], rows=records[1 : MAX_ROWS + 1],
                     count=len(records) - 1)
    if suffix in (".jsonl", ".ndjson"):
        return _records("JSON Lines", _json_lines(text))
    if suffix == ".json":
        return _records("JSON records", _json_array(text, complete=complete))
    return None


def sniff_delimiter(text: str) -> str:
    """The delimiter the first line uses most, outside quotes (`,` when none is used)."""
    line = text.split("\n", 1)[0]
    unquoted = "".join(part for index, part in enumerate(line.split('"')) if index % 2 == 0)
    counts = {delimiter: unquoted.count(delimiter) for delimiter in DELIMITERS}
    best = max(DELIMITERS, key=lambda delimiter: counts[delimiter])
    return best if counts[best] > counts[","] else ","


def _records(kind: str, records: Iterator[Any]) -> Table | None:
    """Objects as rows under the union of their keys; None when any item is not an object."""
    found: list[dict[str, Any]] = []
    header: dict[str, None] = {}
    count = 0
    for record in records:
        if not isinstance(record, dict):
            return None
        count += 1
        if len(found) < MAX_ROWS:
            found.append(record)
            for key in record:
                if len(header) < MAX_COLUMNS:
                    header[str(key)] = None
    rows = [[_cell(record.get(key)) for key in header] for record in found]
    return Table(kind=kind, header=list(header), rows=rows, count=count)


def _json_lines(text: str) -> Iterator[Any]:
    for line in text.splitlines():
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError:
                yield None  # not JSON Lines after all: not a table


def _json_array(text: str, *, complete: bool) -> Iterator[Any]:
    """The items of a JSON array, as far as `text` holds whole ones."""
    decoder = json.JSONDecoder()
    at = _skip(text, 0)
    if not text.startswith("[", at):
        yield None
        return
    at = _skip(text, at + 1)
    while at < len(text) and text[at] != "]":
        try:
            item, at = decoder.raw_decode(text, at)
        except ValueError:
            if complete:
                yield None
            return  # the head ends inside this item
        yield item
        at = _skip(text, at)
        if text.startswith(",", at):
            at = _skip(text, at + 1)


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
