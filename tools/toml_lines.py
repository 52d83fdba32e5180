"""Find the line of a key in a TOML file, so a validation error can point at it.

`tomllib` reports line numbers for syntax errors only; pydantic reports a key
path (`("tools", "http_get", "allowed_domains", 0)`). This scanner maps each
table header and `key = value` line to its dotted path. It is a best effort
for messages, not a parser: the file has already been parsed by `tomllib`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_PART_RE = r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'"""
_KEY = re.compile(rf"^\s*((?:{_PART_RE})(?:\s*\.\s*(?:{_PART_RE}))*)\s*=")
_PART = re.compile(_PART_RE)


def _split(dotted: str) -> tuple[str, ...]:
    """Split a dotted TOML key into its parts, unquoting quoted parts."""
    return tuple(part.strip("\"'") for part in _PART.findall(dotted))


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map every table and key path in `text` to the 1-based line where it first appears."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _split(header.group(1))
            lines.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            lines.setdefault(table + _split(key.group(1)), number)
    return lines


def line_of(lines: dict[tuple[str, ...], int], loc: Sequence[int | str]) -> int | None:
    """Return the line of the longest prefix of `loc` that appears in the file, if any."""
    path = tuple(str(part) for part in loc if isinstance(part, str))
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None
