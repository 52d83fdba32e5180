"""Numbers in text as a reader means them: the tokenizer under provenance (`agent.provenance`).

One scanner reads both sides, the model's answer and the programs' output,
so `1,234.5`, `41.0%`, `1.2M`, `3.4 billion`, `12k`, `-5`, `−5` (U+2212),
`$1.2M` and `1.2e6` each become one `Number`: a value, the step of its last
written digit (`resolution`: 0.1 for `41.0`, 100,000 for `1.2M`, 100 for
`1,200`), whether it is a percentage, and the few facts the skip rules need
(a bare integer, an ordinal, a list marker).

Not numbers here, by design:
- digits glued to a word or identifier (`Q4`, `FY2024`, `x2`, `sales_2024`,
  `H2O`, `v1.2`): labels, not quantities;
- dates, times and URLs (`2024-03-15`, `10:30`, `3/4/2024`, `http://...:8080`):
  their parts are returned with `masked` set, so callers can skip them;
- number words (`three`), fractions as one value (`1/3` is 1 and 3), and the
  European decimal comma (`41,5` is 41 and 5).

Callers strip terminal escape sequences first (`without_controls`): colour
codes must neither hide a printed number (`ESC[32m41.2`) nor add one; and
sbx's own marker lines (`without_sbx_markers`): a cut marker's counts are
sbx's, not the program's or the model's. Year ranges (`2024-25`) are masked
like dates.

Scanning is one compiled regex per pass with no nested ambiguous
quantifiers: linear in the text, whatever the model or the program wrote.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_NUMBER = re.compile(
    r"""
    (?<![\w.])                                     # not inside a word, identifier or number
    (?P<sign>[-+\u2212](?=[$€£¥]?\.?\d))?
    (?P<currency>[$€£¥])?
    (?:
        (?P<int>\d{1,3}(?P<sep>[,_\u00a0\u202f\u2009])\d{3}(?!\d)(?:(?P=sep)\d{3}(?!\d))*|\d+)
        (?P<frac>\.\d+)?
      | (?P<bare>\.\d+)
    )
    (?P<exp>[eE][-+]?\d{1,3}(?![\d.]))?
    (?:
        (?P<pct>[ \u00a0]?%|[ \u00a0](?:percent|per[ ]cent|percentage[ ]points?)\b|(?:pp|pct)\b)
      | (?P<word>[ \u00a0](?:thousand|million|billion|trillion)\b)
      | (?P<abbr>(?:k|K|MM|M|mn|bn|B|tn|T)(?![A-Za-z]))
      | (?P<ordinal>(?:st|nd|rd|th)\b)
    )?
    """,
    re.VERBOSE,
)
_SCALE = {
    "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12,
    "k": 1e3, "K": 1e3, "M": 1e6, "MM": 1e6, "mn": 1e6, "B": 1e9, "bn": 1e9, "T": 1e12,
    "tn": 1e12,
}
_MASKS = re.compile(
    r"""
    (?=[\dh])                                                      # fast fail elsewhere
    (?:
    https?://\S+                                                   # URLs
  | \b\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?\b   # ISO dates
  | \b\d{4}-(?:0[1-9]|1[0-2])\b(?!-)                               # year-month
  | \b(?:19|20)\d{2}[-\u2013/](?:\d{2}|(?:19|20)\d{2})\b(?![-/]\d)       # 2024-25, 2023/24
  | \b\d{1,2}/\d{1,2}/\d{2,4}\b                                    # 3/4/2024
  | \b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b                         # 10:30, 10:30:05
    )
    """,
    re.VERBOSE,
)
_CONTROLS = re.compile(
    r"""
    (?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]                      # CSI: colours, cursor moves
  | (?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?    # OSC: titles, clipboard
  | \x1b[@-_]?                                          # any other escape
  | [\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]                  # other C0 and C1 controls
    """,
    re.VERBOSE,
)
_LIST_PREFIX = re.compile(r"[ \t#>*+\-]*\(?")
MAX_TEXT_CHARS = 4_000_000
"""Longest text scanned; the rest is not read (callers bound their inputs far below)."""


@dataclass(frozen=True, kw_only=True)
class Number:
    """One number as written, and what it means."""

    text: str
    """The characters as written, e.g. `$1.2M` or `41.0%`."""
    start: int
    """Offset of the first character in the scanned text."""
    end: int
    """Offset just past the last character."""
    value: float
    """The value with its sign, scale applied (`1.2M` is 1,200,000); percentages stay in
    percent (`41%` is 41.0)."""
    resolution: float
    """The step of the last written digit, in the value's units: `41.0` 0.1, `12k` 1,000,
    `1,200` 100 (trailing zeros of a grouped or scaled integer with at least two significant
    digits count as rounding), `1200` and `100` 1. The tolerance of a match is half of it."""
    percent: bool = False
    """Written with `%`, `percent` or `pp`."""
    bare_integer: bool = False
    """Digits only: no sign, separator, decimals, exponent, scale, currency or percent."""
    ordinal: bool = False
    """`1st`, `#2`, or a list marker (`1.` or `1)` at the start of a line)."""
    masked: str | None = None
    """`date`, `time` or `url` when the digits are part of one (not a quantity)."""

    @property
    def magnitude(self) -> float:
        """The absolute value: matching ignores signs (`fell 5%` quotes `-5`)."""
        return abs(self.value)


def without_controls(text: str) -> str:
    """`text` without terminal escape sequences and control characters (newlines and tabs kept).

    The digits of `ESC [ 31 m` or of an OSC 52 sequence are not numbers a reader sees.
    """
    return _CONTROLS.sub("", text)


_SBX_MARKERS = re.compile(r"^\[(?:\.\.\. |sbx[:\] ])[^\n]{0,600}\]$", re.MULTILINE)
"""sbx's own lines inside an output or an answer: the sandbox's and the observation's cut
markers (`[... 5 bytes cut ...]`), the answer's (`[sbx: the answer was cut here: ...]`)."""


def without_sbx_markers(text: str) -> str:
    """`text` with sbx's own marker lines emptied: their numbers are neither claims nor output.

    The lines stay (empty), so line numbers still count the output's own lines.
    """
    return _SBX_MARKERS.sub("", text)


def find_numbers(text: str) -> list[Number]:
    """Every number in `text`, in order (dates, times and URLs included, marked `masked`)."""
    text = text[:MAX_TEXT_CHARS]
    masks = [(m.start(), m.end(), _mask_kind(m.group())) for m in _MASKS.finditer(text)]
    found: list[Number] = []
    index = 0
    for match in _NUMBER.finditer(text):
        while index < len(masks) and masks[index][1] <= match.start():
            index += 1
        masked = None
        if index < len(masks) and masks[index][0] <= match.start() < masks[index][1]:
            masked = masks[index][2]
        number = _number(match, text, masked)
        if number is not None:
            found.append(number)
    return found


def printed_values(text: str) -> Iterator[tuple[float, bool, int]]:
    """(magnitude, percent, offset) of each number in an output: the fast path for indexing.

    The same scanner as `find_numbers`, without dates, times and URLs, and without
    building a `Number` (outputs hold hundreds of thousands of numbers; precision is
    the answer's concern, not the output's).
    """
    text = text[:MAX_TEXT_CHARS]
    masks = [(m.start(), m.end()) for m in _MASKS.finditer(text)]
    index = 0
    for match in _NUMBER.finditer(text):
        start = match.start()
        while index < len(masks) and masks[index][1] <= start:
            index += 1
        if index < len(masks) and masks[index][0] <= start:
            continue
        int_part, sep, frac, bare, exp, pct, word, abbr = match.group(*_FAST_GROUPS)
        digits = int_part.translate(_NO_SEPARATORS) if sep else int_part or "0"
        value = float(f"{digits}{frac or bare or ''}{exp or ''}")
        scale = word or abbr
        if scale:
            value *= _SCALE[scale.strip()]
        if math.isfinite(value):
            yield value, pct is not None, start


def _mask_kind(span: str) -> str:
    if span.startswith("http"):
        return "url"
    return "time" if ":" in span and "-" not in span else "date"


def _number(match: re.Match[str], text: str, masked: str | None) -> Number | None:
    """The `Number` a regex match spells, or None when its digits do not parse."""
    groups = match.groupdict()
    digits = (groups["int"] or "").translate(_NO_SEPARATORS)
    frac = groups["frac"] or groups["bare"] or ""
    exponent = int(groups["exp"][1:]) if groups["exp"] else 0
    scale_word = (groups["word"] or groups["abbr"] or "").strip()
    scale = _SCALE.get(scale_word, 1.0)
    try:
        mantissa = Decimal(f"{digits or '0'}{frac}")
    except InvalidOperation:  # pragma: no cover - the regex admits digits only
        return None
    negative = groups["sign"] in ("-", "\u2212")
    value = float(mantissa.scaleb(exponent)) * scale * (-1 if negative else 1)
    resolution = _resolution(digits, frac, exponent, scale, grouped=bool(groups["sep"]))
    if not (math.isfinite(value) and math.isfinite(resolution)):
        return None  # `1e999`: no output can match it, and no arithmetic should see it
    bare = not any(
        groups[key] for key in ("sign", "currency", "sep", "frac", "bare", "exp", "pct", "word",
                                "abbr")
    )
    return Number(
        text=match.group(),
        start=match.start(),
        end=match.end(),
        value=value,
        resolution=resolution,
        percent=groups["pct"] is not None,
        bare_integer=bare and groups["ordinal"] is None,
        ordinal=groups["ordinal"] is not None or _is_marker(text, match, bare),
        masked=masked,
    )


_FAST_GROUPS = ("int", "sep", "frac", "bare", "exp", "pct", "word", "abbr")
_NO_SEPARATORS = str.maketrans("", "", ",_\u00a0\u202f\u2009")
_ONE = Decimal(1)


def _resolution(digits: str, frac: str, exponent: int, scale: float, *, grouped: bool) -> float:
    """The step of the last written digit (see `Number.resolution`).

    Trailing zeros count as rounding only in an integer written with a thousands
    separator or a scale (`1,200`, `120k`): a bare `1200` or `2010` is exact.
    """
    places = -(len(frac) - 1) if frac else 0
    if not places and (grouped or scale != 1.0):
        significant = digits.lstrip("0").rstrip("0")
        zeros = len(digits.lstrip("0")) - len(significant)
        places = zeros if len(significant) >= 2 else 0
    return float(_ONE.scaleb(places + exponent)) * scale  # Decimal: 1e999 is inf, not an error


def _is_marker(text: str, match: re.Match[str], bare: bool) -> bool:
    """`#2`, or a bare integer that opens a line and is followed by `.` or `)` and a space."""
    start, end = match.start(), match.end()
    if start > 0 and text[start - 1] == "#":
        return True
    if not bare:
        return False
    line_start = text.rfind("\n", 0, start) + 1
    if not _LIST_PREFIX.fullmatch(text, line_start, start):
        return False
    after = text[end : end + 2]
    return len(after) >= 1 and after[0] in ".)" and (len(after) == 1 or after[1].isspace())
