"""Does a re-run's output match the recorded one? Line by line, numbers with tolerance.

Two outputs match when they have the same lines, each line the same text
around its numbers, and each pair of numbers equal at the coarser of the two
printed precisions (`0.30000000000000004` and `0.3` match; `41.2` and `41.7`
do not). Signs count here: this compares a program with itself. The first
difference is described in words ("line 3: 41.2 recorded, 41.7 now") with
the number of lines that differ. An execution that raised must raise the same
exception type again; stderr is not compared (warnings vary with versions).
"""

from __future__ import annotations

from dataclasses import dataclass

from sbx.agent.provenance.numbers import Number, find_numbers, without_controls

MAX_SHOWN = 80
"""Longest excerpt of a line quoted in a difference."""


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What one execution did, on either side of the comparison."""

    stdout: str
    error_type: str | None = None
    error_message: str | None = None
    timed_out: bool = False


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """The verdict on one execution."""

    matches: bool
    detail: str
    """`12 numbers on 5 lines match`, or the first difference and how many lines differ."""


def compare(recorded: Observed, now: Observed, *, relative: float = 1e-9) -> Comparison:
    """Compare a recorded execution with its re-run (see the module).

    `relative` is the float noise tolerated on top of the printed precision;
    restore passes a tighter one, so a printed clock (`time.time()`) differs.
    """
    failure = _failure_difference(recorded, now)
    old_lines = without_controls(recorded.stdout).splitlines()
    new_lines = without_controls(now.stdout).splitlines()
    differences: list[str] = []
    numbers = 0
    for index in range(max(len(old_lines), len(new_lines))):
        old = old_lines[index] if index < len(old_lines) else None
        new = new_lines[index] if index < len(new_lines) else None
        difference, count = _line_difference(old, new, relative)
        numbers += count
        if difference is not None:
            differences.append(f"line {index + 1}: {difference}")
    if failure is None and not differences:
        lines = len(old_lines)
        return Comparison(matches=True, detail=f"{numbers} number(s) on {lines} line(s) match")
    parts = [failure] if failure else []
    if differences:
        more = len(differences) - 1
        parts.append(differences[0] + (f" ({more} more line(s) differ)" if more else ""))
    return Comparison(matches=False, detail="; ".join(parts))


def _failure_difference(recorded: Observed, now: Observed) -> str | None:
    """How the executions ended differently (raised, timed out), or None."""
    if recorded.timed_out != now.timed_out:
        return "timed out now" if now.timed_out else "timed out when recorded, finishes now"
    if recorded.error_type == now.error_type:
        return None
    if now.error_type is None:
        return f"raised {recorded.error_type} when recorded, runs without error now"
    said = _excerpt(f"{now.error_type}: {now.error_message or ''}")
    before = f"raised {recorded.error_type}" if recorded.error_type else "ran without error"
    return f"{before} when recorded, raises {said} now"


def _line_difference(
    old: str | None, new: str | None, relative: float = 1e-9
) -> tuple[str | None, int]:
    """The difference between two lines (None when they match) and the numbers compared."""
    if old is None or new is None:
        if old is None:
            return f"not printed when recorded, now {_excerpt(str(new))!r}", 0
        return f"{_excerpt(old)!r} recorded, not printed now", 0
    old_numbers, new_numbers = find_numbers(old), find_numbers(new)
    if _skeleton(old, old_numbers) != _skeleton(new, new_numbers) or len(old_numbers) != len(
        new_numbers
    ):
        return f"{_excerpt(old)!r} recorded, {_excerpt(new)!r} now", 0
    for before, after in zip(old_numbers, new_numbers, strict=True):
        if not close(before, after, relative):
            return f"{before.text} recorded, {after.text} now", len(old_numbers)
    return None, len(old_numbers)


def close(a: Number, b: Number, relative: float = 1e-9) -> bool:
    """Equal at the coarser printed precision (with a `relative` tolerance for float noise)."""
    allowed = max(a.resolution, b.resolution) / 2
    bound = allowed * (1 + relative) + relative * max(abs(a.value), abs(b.value))
    return abs(a.value - b.value) <= bound


def _skeleton(line: str, numbers: list[Number]) -> str:
    """The line with every number replaced by `#`: the text a re-run must repeat exactly."""
    parts: list[str] = []
    position = 0
    for number in numbers:
        parts.append(line[position : number.start])
        parts.append("#")
        position = number.end
    parts.append(line[position:])
    return "".join(parts).strip()


def _excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"
