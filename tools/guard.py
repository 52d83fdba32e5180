"""The data guard: personal data and secrets replaced before any text leaves for the model.

The sandbox's code still reads the real data (it runs on the operator's
machine); only what sbx sends to the model provider is filtered. The guarantee
is the model client's boundary (`sbx.agent.model.boundary`): every request,
whatever built its messages. Filtering early saves work and keeps the audit
precise: tool observations and tool errors at the gate (`ToolGate`), previews
and the system prompt's data summary (column rules too, on every table format
`tools.builtin.tables` reads). The person who asked sees the real output; the
audit log records each redaction's rule and count, never the value.

Detectors (each a typed placeholder):

    [card]    13 to 19 digits, alone or in 4-4-4-4 / 4-6-5 groups, first digit 2-6
              (the card networks), and a valid Luhn checksum
    [secret]  API-key shapes (sk-..., AKIA..., ghp_..., xox?-..., AIza..., JWTs)
              and PEM private-key blocks
    [email]   local@domain.tld
    [phone]   +<country> numbers with 8 to 15 digits, or (555) 123-4567 shapes
    [iban]    two letters, two check digits, 11 to 30 characters, valid mod-97

Before matching, the text is folded character for character (`fold`): every
Unicode decimal digit (full-width, Arabic-Indic, ...) becomes its ASCII digit,
every space separator (no-break, narrow, thin) a space, and each compatibility
form with one ASCII equivalent (full-width letters, `＠`) that character. The
folded text has the same length, so what matches in it is replaced in the
original. A number or key joined to a word by `_` (`acct_4111...`,
`4111..._statement.pdf`) is matched; one inside a word or after a decimal point
is not. E-mail local parts and domains may be non-ASCII; IBANs any case.

Every pattern has bounded quantifiers, so a scan is linear in the text: a
hostile program's output cannot make the host spin. What the detectors cannot
catch (free text, encodings the code invents) is in security.md.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from sbx.tools.guard_policy import GuardRules

MASKED = "[masked]"

_START = r"(?<![^\W_])"
"""Not inside a word: no letter or digit before (an underscore may join it to one)."""
_END = r"(?![^\W_])"
"""Nor a letter or digit after."""
_CARD = re.compile(
    _START + r"(?<!\.)[2-6](?:\d{12,18}|\d{3}(?:[ .-]\d{4}){3}(?:[ .-]\d{3})?"
    r"|\d{3}[ .-]\d{6}[ .-]\d{5})" + _END
)
_SECRET = re.compile(
    _START + r"sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,200}"
    r"|" + _START + r"(?:AKIA|ASIA)[0-9A-Z]{16}" + _END
    + r"|" + _START + r"gh[pousr]_[A-Za-z0-9]{30,80}" + _END
    + r"|" + _START + r"github_pat_[A-Za-z0-9_]{40,120}"
    r"|" + _START + r"xox[abprs]-[A-Za-z0-9-]{10,120}"
    r"|" + _START + r"AIza[0-9A-Za-z_-]{35}"
    r"|" + _START + r"(?:sk|rk)_live_[A-Za-z0-9]{16,120}"
    r"|" + _START + r"eyJ[A-Za-z0-9_-]{8,2000}\.eyJ[A-Za-z0-9_-]{8,4000}\.[A-Za-z0-9_-]{8,2000}"
)
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----")
_PEM_END = re.compile(r"-----END [A-Z ]{0,40}PRIVATE KEY-----")
MAX_PEM = 16 * 1024
"""Longest private-key block replaced whole (an RSA-8192 PEM is under 7 KiB)."""
_EMAIL = re.compile(
    r"(?<![\w.%+-])[\w.%+-]{1,64}@[^\W_](?:[\w-]{0,62})(?:\.[\w-]{1,63}){0,8}"
    r"\.[^\W\d_]{2,24}(?![\w-])"
)
_PHONE = re.compile(
    r"(?<![\w+.])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{1,6}(?:[ .-]\d{1,6}){0,4}"
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}|\d{3}[.-]\d{3}[.-]\d{4})(?![\w.])"
)
_LAST_GROUP = re.compile(r"[ .-]\d{1,6}$")
_IBAN = re.compile(
    _START + r"[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]{4}){2,7}(?: ?[A-Za-z0-9]{1,3})?" + _END
)
_DASHES = frozenset("\u2010\u2011\u2012\u2013\u2014\u2212\ufe63\uff0d")
MAX_FOLDED_CHARS = 4096
"""Distinct non-ASCII characters whose folding is remembered (the rest is computed each time)."""


def _fold_char(char: str) -> str:
    """The one ASCII character `char` stands for where detectors are concerned, else `char`."""
    digit = unicodedata.decimal(char, None)
    if digit is not None:
        return str(digit)
    if unicodedata.category(char) == "Zs":
        return " "
    if char in _DASHES:
        return "-"
    compatible = unicodedata.normalize("NFKC", char)
    return compatible if len(compatible) == 1 and compatible.isascii() else char


class _Folding(dict[int, str]):
    """A `str.translate` table that computes (and remembers) each character's folding."""

    def __missing__(self, code: int) -> str:
        folded = _fold_char(chr(code))
        if len(self) < MAX_FOLDED_CHARS:
            self[code] = folded
        return folded


_FOLDING = _Folding()


def fold(text: str) -> str:
    """`text` as the detectors read it: Unicode digits, spaces and compatibility forms as ASCII.

    One character for one, so a position in the folded text is the same position in `text`.
    """
    return text if text.isascii() else text.translate(_FOLDING)


def luhn_valid(digits: str) -> bool:
    """Whether a digit string passes the Luhn checksum (payment card numbers do)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """Whether `text` (spaces allowed) is an IBAN with a valid ISO 13616 mod-97 checksum."""
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in moved)
    return int(number) % 97 == 1


def _digits(text: str) -> str:
    return "".join(char for char in text if char.isdigit())


def _phone(text: str) -> str | None:
    """The phone number at the start of a match, else None.

    Trailing groups past 15 digits belong to whatever followed it (a year, a count).
    """
    while len(_digits(text)) > 15 and _LAST_GROUP.search(text):
        text = _LAST_GROUP.sub("", text)
    return text if 8 <= len(_digits(text)) <= 15 else None


def _whole(check: Callable[[str], bool]) -> Callable[[str], str | None]:
    return lambda match: match if check(match) else None


@dataclass(frozen=True)
class _Detector:
    name: str
    pattern: re.Pattern[str]
    found: Callable[[str], str | None] = lambda match: match
    """The part of a match that is what the detector looks for (None: a false alarm)."""


_DETECTORS: dict[str, _Detector] = {
    "secrets": _Detector("secret", _SECRET),
    "cards": _Detector("card", _CARD, _whole(lambda match: luhn_valid(_digits(match)))),
    "ibans": _Detector("iban", _IBAN, _whole(iban_valid)),
    "emails": _Detector("email", _EMAIL),
    "phones": _Detector("phone", _PHONE, _phone),
}
"""In the order they run: secrets first (a key may contain digits a card check would take)."""


@dataclass(frozen=True, kw_only=True)
class Guarded:
    """Text as it may leave for the model, and what was replaced in it."""

    text: str
    """The filtered text."""
    counts: dict[str, int] = field(default_factory=dict)
    """Replacements by placeholder name (`card`, `email`, ...); empty when none."""


@dataclass(frozen=True)
class DataGuard:
    """The rules of one principal, applied to text and to tables bound for the model."""

    rules: GuardRules

    def text(self, text: str) -> Guarded:
        """Replace every enabled detector's matches in `text` by its placeholder."""
        counts: Counter[str] = Counter()
        if self.rules.secrets:
            text = _replace_pem(text, counts)
        for key, detector in _DETECTORS.items():
            if getattr(self.rules, key):
                text = _replace(text, detector, counts)
        return Guarded(text=text, counts=dict(counts))

    def outcome(self, text: str, audit: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
        """A tool's observation filtered, and its audit fields with the counts (never values)."""
        guarded = self.text(text)
        if not guarded.counts:
            return guarded.text, audit
        return guarded.text, {**audit, "redactions": guarded.counts}

    def columns(self, header: Sequence[str]) -> Columns:
        """The column rules applied to one table's header (drop and mask by name)."""
        return Columns(
            drop=frozenset(i for i, n in enumerate(header) if _matches(n, self.rules.drop_columns)),
            mask=frozenset(i for i, n in enumerate(header) if _matches(n, self.rules.mask_columns)),
            rows=not self.rules.schema_only,
        )


@dataclass(frozen=True, kw_only=True)
class Columns:
    """What a table bound for the model may show: which columns, masked or not, and rows."""

    drop: frozenset[int]
    """Column indexes left out."""
    mask: frozenset[int]
    """Column indexes whose cells are shown as `[masked]`."""
    rows: bool
    """Whether rows may be shown at all (not `schema_only`)."""

    def header(self, names: Sequence[str]) -> list[str]:
        """The header (or any per-column line, such as dtypes) without the dropped columns."""
        return [value for i, value in enumerate(names) if i not in self.drop]

    def row(self, values: Sequence[str]) -> list[str]:
        """One data row: dropped columns left out, masked ones replaced."""
        return [MASKED if i in self.mask else value
                for i, value in enumerate(values) if i not in self.drop]

    def note(self) -> str:
        """What the policy withheld, for the model ("" when nothing)."""
        notes = []
        if self.drop:
            notes.append(f"{len(self.drop)} column(s) withheld by policy")
        if self.mask and self.rows:
            notes.append(f"{len(self.mask)} column(s) masked by policy")
        if not self.rows:
            notes.append("rows withheld by policy (schema only)")
        return "; ".join(notes)


def _replace(text: str, detector: _Detector, counts: Counter[str]) -> str:
    """Each match in the folded text replaced, at the same place, in the original."""
    parts: list[str] = []
    position = 0
    for match in detector.pattern.finditer(fold(text)):
        found = detector.found(match.group(0))
        if found is None:
            continue
        counts[detector.name] += 1
        parts += [text[position:match.start()], f"[{detector.name}]"]
        position = match.start() + len(found)
    return "".join(parts) + text[position:] if parts else text


def _replace_pem(text: str, counts: Counter[str]) -> str:
    """PEM private-key blocks replaced whole; one pass, each END found once (linear)."""
    if "PRIVATE KEY-----" not in text:
        return text
    ends = list(_PEM_END.finditer(text))
    parts: list[str] = []
    position = 0
    end_index = 0
    for begin in _PEM_BEGIN.finditer(text):
        if begin.start() < position:
            continue
        while end_index < len(ends) and ends[end_index].start() < begin.end():
            end_index += 1
        if end_index == len(ends):
            break
        end = ends[end_index]
        if end.end() - begin.start() > MAX_PEM:
            continue
        parts += [text[position:begin.start()], "[secret]"]
        counts["secret"] += 1
        position = end.end()
    return "".join(parts) + text[position:]


def _matches(name: str, patterns: Sequence[str]) -> bool:
    lowered = name.strip().lower()
    return any(fnmatchcase(lowered, pattern.lower()) for pattern in patterns)


def merge_counts(*counts: dict[str, int]) -> dict[str, int]:
    """Several `Guarded.counts` added up (one audit record per place)."""
    total: Counter[str] = Counter()
    for one in counts:
        total.update(one)
    return dict(total)
