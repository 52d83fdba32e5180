"""The table of APIs the image's stack removed or renamed, and what replaces each.

Models write the pandas, NumPy and SciPy of their training data; each major release
removes some of it (`np.NAN`, `DataFrame.append`, `applymap`, `interp2d`, ...), and each
such failure used to cost the model a turn of guessing. The table of what the image's
stack removed is kept beside the image recipe (`images/removed_apis.toml`) and names the
lock it was checked against (`lock_sha256`), so a new lock cannot ship with a stale table
(`tests/test_removed_apis.py`). The match is on the error the program raised (its type and
message), never on the code's text: a hint is given only for an error that happened
(`sbx.tools.hints` renders it host-side, as the observation's last line). An entry's
`rewrite` (a regular expression and its replacement) is what `sbx bench ds1000 --hints`
applies to measure whether the hint is right; the model only ever reads `hint`.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

TABLE_FILE = "removed_apis.toml"
MAX_MESSAGE_CHARS = 4000
"""Characters of an error message searched (messages come from the model's code)."""


class TableError(ValueError):
    """The table cannot be used; the message names the entry."""


@dataclass(frozen=True, kw_only=True)
class RemovedApi:
    """One removed or renamed API and what replaces it."""

    name: str
    """What was removed, as models write it (`np.NAN`, `DataFrame.append`)."""
    error: str
    """The exception type it raises now (`AttributeError`)."""
    message: re.Pattern[str]
    """Searched in the error's message."""
    hint: str
    """The one line the model reads."""
    rewrite: tuple[tuple[re.Pattern[str], str], ...] = ()
    """How `sbx bench ds1000 --hints` applies the hint to code, each pair in turn (empty: not
    mechanical)."""

    def matches(self, error_type: str, message: str) -> bool:
        """Whether an error of this type and message is this API's removal."""
        found = self.message.search(message[:MAX_MESSAGE_CHARS])
        return error_type == self.error and found is not None


@dataclass(frozen=True, kw_only=True)
class RemovedApiTable:
    """The table for one lock of the image."""

    lock_sha256: str
    """SHA-256 of the `requirements.lock` the entries were checked against."""
    entries: tuple[RemovedApi, ...]
    """In file order; the first match wins."""

    def find(self, error_type: str, message: str) -> RemovedApi | None:
        """The entry for this error, if it is a removed API's."""
        return next((e for e in self.entries if e.matches(error_type, message)), None)


def parse_table(text: str) -> RemovedApiTable:
    """The table from its TOML text (`TableError` for a bad entry)."""
    data = tomllib.loads(text)
    entries = []
    for index, item in enumerate(data.get("api", [])):
        try:
            rewrite = item.get("rewrite") or []  # one [pattern, replacement], or a list of them
            several = bool(rewrite) and isinstance(rewrite[0], list)
            pairs = rewrite if several else [rewrite][: len(rewrite)]
            entries.append(RemovedApi(
                name=str(item["name"]), error=str(item["error"]),
                message=re.compile(str(item["message"])), hint=str(item["hint"]),
                rewrite=tuple((re.compile(str(p)), str(r)) for p, r in pairs),
            ))
        except (KeyError, IndexError, TypeError, ValueError, re.error) as exc:
            raise TableError(f"{TABLE_FILE} entry {index + 1}: {exc}") from None
    return RemovedApiTable(lock_sha256=str(data.get("lock_sha256", "")), entries=tuple(entries))


@functools.cache
def default_table() -> RemovedApiTable:
    """The table shipped beside the image recipe."""
    return parse_table((Path(__file__).parent / TABLE_FILE).read_text(encoding="utf-8"))
