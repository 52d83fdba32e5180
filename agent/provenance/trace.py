"""Provenance: which output printed each number of an answer, and which numbers none did.

sbx's users act on the numbers in its answers, so each one is traced to the
output that printed it: an `execute_python` call's stdout, exactly as the
sandbox returned it, or a `calculate` result (earlier runs of a conversation
count too, through the observations the model received). A number matches an
output number when they agree to the answer's own precision (`41.3` matches
`41.27`, not `41.2`; `1.2M` matches `1,234,567`), as a percentage and a
fraction (`41.0%` matches `0.41`), and whatever their signs (`fell 5%` quotes
`-0.05`). A match says the value was printed, not that it means what the
answer says it means.

Numbers that no output printed are `unsupported`, except those skipped (see
`skip_reason`): an answer's years, list markers, ordinals and small counts,
numbers the question itself gave, and digits in dates, times, URLs and
```python blocks. The skips are a judgement: each is a kind of number that
is rarely a computed claim, and an unsupported one would cost the model a
validation turn for nothing. A skipped number is not checked at all, printed
or not: `2024` found in a table's header (`year 2023 2024 growth_pct`) proves
nothing, so the traced count a user reads counts checked claims only.

Everything here is pure and bounded: at most `MAX_OUTPUT_NUMBERS` output
numbers are indexed (the newest outputs first) and matching is a binary
search per answer number.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sbx.agent.provenance.numbers import (
    Number,
    find_numbers,
    printed_values,
    without_controls,
    without_sbx_markers,
)

MAX_OUTPUT_NUMBERS = 200_000
"""Most output numbers indexed for one answer (newest outputs first); the rest are not read."""
MAX_LINE_CHARS = 200
"""Longest output line a source keeps."""
SMALL_COUNT = 10
"""Bare integers up to this are counts and steps ("the top 3", "in 2 steps"): skipped."""
YEARS = (1900, 2100)
"""Bare four-digit integers in this range read as years: skipped."""
_PYTHON_FENCE = re.compile(r"^```[ \t]*(?:python|py)[ \t]*\n.*?^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, kw_only=True)
class Output:
    """One text the answer may quote: an execution's stdout or another tool's result."""

    tool: str
    """`execute_python`, `calculate`, or `earlier run` (an observation from a previous run)."""
    call_id: str
    """The tool call's id, as the model's `tool` message carries it."""
    audit_id: str = ""
    """The gate's id of the call (the audit records' key); empty for earlier runs."""
    execution: int | None = None
    """For `execute_python`: which execution of the run (1, 2, ...), as re-run and export
    number them."""
    text: str
    """The output: stdout as the sandbox returned it, or the tool's result text."""


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where one number of the answer was printed."""

    number: str
    """The number as the answer wrote it."""
    tool: str
    """The tool whose output printed it."""
    call_id: str
    """The call's id (the model's)."""
    audit_id: str
    """The gate's id of the call (audit log key)."""
    execution: int | None
    """Which execution of the run, for `execute_python`."""
    line: int
    """The output line (1-based) that printed it."""
    text: str
    """That line, clipped to `MAX_LINE_CHARS`."""

    def as_dict(self) -> dict[str, Any]:
        """For `--json`, the transcript's `run_end` and exports."""
        return {
            "number": self.number, "tool": self.tool, "call_id": self.call_id,
            "audit_id": self.audit_id, "execution": self.execution, "line": self.line,
            "text": self.text,
        }


@dataclass(frozen=True, kw_only=True)
class Skipped:
    """A number of the answer that was not checked, and why."""

    number: str
    """As written."""
    reason: str
    """`year`, `ordinal`, `small count`, `in the question`, `date`, `time`, `url` or `code`."""


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """The answer's numbers: traced, unsupported, or skipped (each distinct text once)."""

    sources: tuple[Source, ...] = ()
    """Numbers found in an output, each with the output line that printed it."""
    unsupported: tuple[str, ...] = ()
    """Numbers no output printed (as written)."""
    skipped: tuple[Skipped, ...] = ()
    """Numbers not checked (see `skip_reason`)."""

    @property
    def verified(self) -> bool:
        """Every checked number was printed by an output (vacuously, when none was checked)."""
        return not self.unsupported

    @property
    def verdict(self) -> bool | None:
        """What a face shows: None when the answer states no number to check, else `verified`.

        An answer without numbers is not "Verified".
        """
        if not self.sources and not self.unsupported:
            return None
        return self.verified


@dataclass(frozen=True)
class _Printed:
    """One output number found for an answer number: where it was printed."""

    output: Output
    line: int
    text: str


class OutputIndex:
    """Output numbers sorted by magnitude, for a binary search per answer number.

    Kept as flat lists (magnitude; output, offset): an output may hold hundreds of
    thousands of numbers, and only the matched ones need their line.
    """

    def __init__(self, outputs: Sequence[Output]) -> None:
        self._outputs = list(outputs)
        self._texts: dict[int, str] = {}
        entries: list[tuple[float, int, int]] = []
        for order in range(len(outputs) - 1, -1, -1):  # newest first, under the cap
            self._texts[order] = without_sbx_markers(without_controls(outputs[order].text))
            for magnitude, percent, offset in printed_values(self._texts[order]):
                entries.append((magnitude, order, offset))
                if percent:  # `41%` printed is also the fraction 0.41
                    entries.append((magnitude / 100, order, offset))
                if len(entries) >= MAX_OUTPUT_NUMBERS:
                    break
            if len(entries) >= MAX_OUTPUT_NUMBERS:
                break
        entries.sort()
        self._keys = [entry[0] for entry in entries]
        self._places = [(entry[1], entry[2]) for entry in entries]

    def find(self, number: Number) -> _Printed | None:
        """The printed number closest to `number` within half its resolution, or None.

        A percentage is also looked for as a fraction (`41.0%` as 0.41). Ties go to
        the newest output, then to its later line (a program's summary comes last).
        """
        tolerance = number.resolution / 2 * (1 + 1e-9) + 1e-12 * number.magnitude
        targets = [(number.magnitude, tolerance)]
        if number.percent:
            targets.append((number.magnitude / 100, tolerance / 100))
        best: tuple[tuple[float, int, int], int] | None = None
        for target, allowed in targets:
            low = bisect.bisect_left(self._keys, target - allowed)
            high = bisect.bisect_right(self._keys, target + allowed)
            for position in range(low, high):
                closeness = abs(self._keys[position] - target) / allowed if allowed else 0.0
                order, offset = self._places[position]
                rank = (closeness, -order, -offset)
                if best is None or rank < best[0]:
                    best = (rank, position)
        return self._printed(best[1]) if best is not None else None

    def _printed(self, position: int) -> _Printed:
        order, offset = self._places[position]
        text = self._texts[order]
        begin = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        line = text[begin : end if end >= 0 else len(text)]
        return _Printed(self._outputs[order], text.count("\n", 0, offset) + 1, line)


def trace_numbers(answer: str, outputs: Sequence[Output], *, question: str = "") -> Provenance:
    """Trace every number of `answer` to `outputs` (see the module's docstring)."""
    answer = without_sbx_markers(without_controls(answer))
    index = OutputIndex(outputs)
    given = [n for n in find_numbers(question) if n.masked is None]
    code = [(m.start(), m.end()) for m in _PYTHON_FENCE.finditer(answer)]
    sources: dict[str, Source] = {}
    unsupported: dict[str, None] = {}
    skipped: dict[str, Skipped] = {}
    for number in find_numbers(answer):
        text = number.text.strip()
        if text in sources or text in unsupported or text in skipped:
            continue
        reason = number.masked or ("code" if _inside(number, code) else None)
        reason = reason or skip_reason(number, given)
        if reason is not None:  # not checked, so not counted as traced even when printed
            skipped[text] = Skipped(number=text, reason=reason)
            continue
        found = index.find(number)
        if found is not None:
            sources[text] = _source(text, found)
        else:
            unsupported[text] = None
    return Provenance(
        sources=tuple(sources.values()), unsupported=tuple(unsupported),
        skipped=tuple(skipped.values()),
    )


def skip_reason(number: Number, given: Sequence[Number]) -> str | None:
    """Why a number no output printed is not a claim to check, or None when it is one."""
    if number.ordinal:
        return "ordinal"
    if any(_same(number, other) for other in given):
        return "in the question"
    if is_year(number):
        return "year"
    if number.bare_integer and number.value <= SMALL_COUNT:
        return "small count"
    return None


def is_year(number: Number) -> bool:
    """A bare four-digit integer in `YEARS`: read as a year."""
    return bool(
        number.bare_integer and YEARS[0] <= number.value <= YEARS[1] and len(number.text) == 4
    )


def _same(number: Number, other: Number) -> bool:
    tolerance = max(number.resolution, other.resolution) / 2 * (1 + 1e-9)
    return abs(number.magnitude - other.magnitude) <= tolerance


def _inside(number: Number, spans: Sequence[tuple[int, int]]) -> bool:
    return any(start <= number.start < end for start, end in spans)


def _source(text: str, found: _Printed) -> Source:
    output = found.output
    line = found.text.strip()
    if len(line) > MAX_LINE_CHARS:
        line = line[: MAX_LINE_CHARS - 1] + "…"
    return Source(
        number=text, tool=output.tool, call_id=output.call_id, audit_id=output.audit_id,
        execution=output.execution, line=found.line, text=line,
    )


MAX_NAMED = 20
"""Most unsupported numbers the validation request names."""


def validation_request(unsupported: Sequence[str]) -> str:
    """The one harness message that asks the model to back its numbers or correct them."""
    named = ", ".join(number[:40] for number in unsupported[:MAX_NAMED])
    more = len(unsupported) - MAX_NAMED
    if more > 0:
        named += f" and {more} more"
    return (
        f"[sbx] These numbers in your answer were not printed by any output of this run: "
        f"{named}. Print each one from code (or compute it with a tool), or correct the "
        "answer; then give your final answer again."
    )
