"""What analysts' code tried to import and the image lacks: counted from the audit log.

Each `execute_python` outcome whose code failed with `ModuleNotFoundError` keeps the
top-level module (`missing_module`) and the principal (`sbx.tools.builtin.execute_python`).
The audit log is already the record every process appends to and an auditor can verify,
so the operator's view (`sbx packages`) is a count over it, per module and principal.
The module name came from the model's code: it is a plain identifier by construction
(`sbx.tools.hints`), and the faces still escape it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class PackageRequest:
    """One module one principal needed, and how often."""

    package: str
    """The top-level module the code imported (`polars`)."""
    principal: str
    """Who asked, as the audit record names them."""
    count: int
    """Executions that failed on it."""
    last: str
    """The time of the latest (the audit record's `time`)."""


def package_requests(records: Iterable[tuple[int, dict[str, Any]]]) -> list[PackageRequest]:
    """The requests in `records` (audit log lines), most frequent first."""
    counts: Counter[tuple[str, str]] = Counter()
    last: dict[tuple[str, str], str] = {}
    for _, record in records:
        data = record.get("data")
        if record.get("event") != "outcome" or not isinstance(data, dict):
            continue
        module = data.get("missing_module")
        if data.get("tool") != "execute_python" or not isinstance(module, str):
            continue
        key = (module, str(data.get("principal", "?")))
        counts[key] += 1
        last[key] = str(record.get("time", ""))
    return [PackageRequest(package=package, principal=principal, count=n, last=last[key])
            for key, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            for package, principal in [key]]
