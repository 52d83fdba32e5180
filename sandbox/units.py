"""Parse the units a person writes in a policy file or on a command line.

`"512m"`, `"1.5"` and `"30s"` are what operators type; the engine wants bytes,
nano-CPUs and seconds. Every parser raises `ValueError` with a message that
says what was expected, so pydantic can report it next to the field's name.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_SIZE_FACTORS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$", re.IGNORECASE)
_DURATION_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_size(value: str | int | float) -> int:
    """Return a byte count from `512m`, `1.5g`, `64MiB` or `4096` (binary units, as Docker)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as '512m', not a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return int(value)
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a size; write e.g. '512m', '2g', '64k' or a byte count")
    number, unit, _ = match.groups()
    return int(float(number) * _SIZE_FACTORS[unit.lower()])


def parse_duration(value: str | int | float) -> float:
    """Return seconds from `30s`, `2m`, `500ms`, `1h` or a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '30s', not a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration; write e.g. '30s', '2m', '500ms'")
    number, unit = match.groups()
    return float(number) * _DURATION_FACTORS[(unit or "s").lower()]


def parse_cpus(value: str | int | float) -> float:
    """Return a CPU count from `"1.5"`, `2` or `0.5`."""
    if isinstance(value, bool):
        raise ValueError("expected a CPU count such as '1.5', not a boolean")
    try:
        cpus = float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a CPU count; write e.g. '1', '1.5' or '0.5'") from None
    if cpus <= 0:
        raise ValueError("cpus must be greater than 0")
    return cpus


def format_size(num_bytes: int) -> str:
    """Render a byte count the way the limits are written (`512 MiB`), for messages."""
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return (
                f"{size:.0f} {unit}" if unit == "B" or size == int(size) else f"{size:.1f} {unit}"
            )
        size /= 1024
    return f"{num_bytes} B"  # pragma: no cover - loop always returns
