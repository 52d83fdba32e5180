"""Parse the units a person writes in a policy file or on a command line.

`"512m"`, `"1.5"` and `"30s"` are what operators type; the engine wants bytes,
nano-CPUs and seconds. Every parser raises `ValueError` with a message that
says what was expected, so pydantic can report it next to the field's name.

Every value is bounded here, before any arithmetic: a size past `MAX_SIZE`, a
duration past `MAX_DURATION_S`, infinity and NaN are refused with the bound in
the message (`--timeout 99999999999h` once reached the socket layer and
overflowed a C `time_t`). Fields with tighter limits add `at_most_seconds` or
`at_most_bytes`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

MAX_SIZE = 1024**4
"""No size anywhere may pass 1 TiB: past it a typo, not a plan (and floats lose bytes)."""
MAX_DURATION_S = 7 * 86400.0
"""No duration anywhere may pass a week: the engine's and the OS's timers overflow far above."""
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_SIZE_FACTORS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_DURATION_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_size(value: str | int | float) -> int:
    """Return a byte count from `512m`, `1.5g`, `64MiB` or `4096` (binary units, as Docker)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as '512m', not a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return _bounded_size(value, str(value))
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a size; write e.g. '512m', '2g', '64k' or a byte count")
    number, unit, _ = match.groups()
    return _bounded_size(float(number) * _SIZE_FACTORS[unit.lower()], value.strip())


def _bounded_size(num_bytes: float, shown: str) -> int:
    """An int byte count, refusing what is past `MAX_SIZE` (and infinity) before converting."""
    if not num_bytes <= MAX_SIZE:
        limit = format_size(MAX_SIZE)
        raise ValueError(f"{_clip(shown)} is more than the most sbx accepts, {limit}")
    return int(num_bytes)


def parse_duration(value: str | int | float) -> float:
    """Return seconds from `30s`, `2m`, `500ms`, `1h`, `1d` or a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '30s', not a boolean")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return _bounded_duration(float(value), str(value))
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a duration; write e.g. '30s', '2m', '500ms'")
    number, unit = match.groups()
    seconds = float(number) * _DURATION_FACTORS[(unit or "s").lower()]
    return _bounded_duration(seconds, value.strip())


def _bounded_duration(seconds: float, shown: str) -> float:
    """Seconds, refusing what is past `MAX_DURATION_S` (and infinity, NaN)."""
    if not (math.isfinite(seconds) and seconds <= MAX_DURATION_S):
        limit = format_duration(MAX_DURATION_S)
        raise ValueError(f"{_clip(shown)} is longer than the most sbx accepts, {limit}")
    return seconds


def at_most_seconds(limit: float) -> Callable[[float], float]:
    """A validator refusing a duration over `limit`, with a message that names the bound."""

    def check(seconds: float) -> float:
        if seconds > limit:
            shown = format_duration(seconds)
            raise ValueError(f"{shown} is longer than the most allowed, {format_duration(limit)}")
        return seconds

    return check


def at_most_bytes(limit: int) -> Callable[[int], int]:
    """A validator refusing a size over `limit`, with a message that names the bound."""

    def check(num_bytes: int) -> int:
        if num_bytes > limit:
            shown = format_size(num_bytes)
            raise ValueError(f"{shown} is more than the most allowed, {format_size(limit)}")
        return num_bytes

    return check


def parse_cpus(value: str | int | float) -> float:
    """Return a CPU count from `"1.5"`, `2` or `0.5`."""
    if isinstance(value, bool):
        raise ValueError("expected a CPU count such as '1.5', not a boolean")
    try:
        cpus = float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a CPU count; write e.g. '1', '1.5' or '0.5'") from None
    if not math.isfinite(cpus):
        raise ValueError(f"{value!r} is not a CPU count; write e.g. '1', '1.5' or '0.5'")
    if cpus <= 0:
        raise ValueError("cpus must be greater than 0")
    return cpus


def format_size(num_bytes: int) -> str:
    """Render a byte count the way the limits are written (`512 MiB`), for messages."""
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return (
                f"{size:.0f} {unit}" if unit == "B" or size == int(size) else f"{size:.1f} {unit}"
            )
        size /= 1024
    return f"{num_bytes} B"  # pragma: no cover - loop always returns


def format_duration(seconds: float) -> str:
    """Render seconds the way durations are written (`24h`, `90s`, `500ms`), for messages."""
    for unit, factor in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= factor and (seconds / factor).is_integer():
            return f"{seconds / factor:.0f}{unit}"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def _clip(shown: str) -> str:
    return shown if len(shown) <= 24 else f"{shown[:20]}..."
