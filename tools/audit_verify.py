"""Check an audit log: every record sealed, in sequence, chained; report the first that is not.

`verify_log` streams the file once (plus one re-read to tell a missing record
from a reordered one) and stops at the first bad line, naming its number and
the reason an auditor needs:

    torn tail       the last line has no newline: a writer died mid-append
    not valid JSON  bytes were changed or a line was damaged
    edited          the record's own seal does not match its content
    missing record  a seq number was skipped (a line was deleted)
    out of order    a later seq appears before an earlier one (lines swapped)
    chain broken    `prev` does not match the record before (inserted or replaced)

A torn fragment that a later writer acknowledged with a `recover` record is
accounted for, not an error. What verification cannot see is in security.md.

A chain proves each record follows the one before it, never that nothing
followed the last: records cut from the end, or a file emptied, verify as a
shorter clean log. Only a head the operator kept (the hash and record count
a previous `verify` printed) can show that, and `expect_head` and
`expect_records` check the log still holds it; appends after it are fine.
The summary says when that was not checked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbx.sandbox.errors import SbxError
from sbx.tools.audit_chain import GENESIS, algorithm, canonical, seal


@dataclass(kw_only=True, frozen=True)
class VerifyReport:
    """The verdict on one log file."""

    path: Path
    """The file checked."""
    ok: bool
    """True when every line verified (a recovered torn write is fine; a torn tail is not)."""
    records: int
    """Records that verified before the first problem (all of them when `ok`)."""
    runs: int
    """Distinct run ids among the verified records."""
    keyed: bool
    """True when the records are HMAC-sealed."""
    head_seq: int | None = None
    """Seq of the last verified record: compare with an external copy to detect truncation."""
    head_hash: str | None = None
    """Seal of the last verified record."""
    bad_line: int | None = None
    """1-based line of the first problem."""
    reason: str | None = None
    """What is wrong with that line."""
    torn_tail: bool = False
    """The problem is an incomplete last line (a writer killed mid-append)."""
    recovered_lines: tuple[int, ...] = ()
    """Lines holding torn fragments that a later `recover` record accounts for."""
    open_runs: tuple[str, ...] = ()
    """Runs with a start record and no end record (a crash, a kill, or still running)."""
    head_checked: bool = False
    """An expected head (hash, count or both) was given and the log still holds it."""
    grown_by: int = 0
    """Records after the expected head (appended since it was kept)."""

    def summary(self) -> str:
        """A short human-readable verdict, and what it could not check."""
        mode = "HMAC-SHA256" if self.keyed else "SHA-256"
        head = "empty"
        if self.head_seq is not None:
            head = f"head seq {self.head_seq} {self.head_hash}"
        if self.ok:
            text = f"OK: {self.records} records, {self.runs} runs, {mode} chain, {head}"
            text += "\n" + self._head_note()
        elif self.bad_line is None:
            text = f"FAILED: {self.reason}\n{self.records} records verify ({head})"
        else:
            text = (
                f"FAILED at line {self.bad_line}: {self.reason}\n"
                f"{self.records} records before it verify ({head})"
            )
        if self.recovered_lines:
            lines = ", ".join(map(str, self.recovered_lines))
            text += f"\nrecovered torn writes at line(s) {lines}"
        if self.open_runs and self.ok:
            text += f"\nruns without an end record: {', '.join(self.open_runs)}"
        return text

    def _head_note(self) -> str:
        if self.head_checked:
            return f"expected head found; {self.grown_by} record(s) appended after it"
        if self.head_hash is None:
            return (
                "not checked: an emptied file verifies as an empty log; pass --expect-records N "
                "(and --expect-head HASH) kept from an earlier verify"
            )
        return (
            "not checked: records cut from the end, or an emptied file, verify as a shorter "
            "log; keep this head and count, and next time verify with "
            f"--expect-head {self.head_hash} --expect-records {self.records}"
        )


@dataclass
class _Chain:
    """The verifier's running state."""

    key: bytes | None
    expected_seq: int = 0
    prev: str = GENESIS
    records: int = 0
    keyed: bool = False
    run_ids: set[str] = field(default_factory=set)
    open_runs: dict[str, None] = field(default_factory=dict)
    recovered: list[int] = field(default_factory=list)
    expect_head: str | None = None
    head_at: int | None = None
    """Record count at which the expected head hash was seen."""


def verify_log(
    path: Path,
    *,
    key: bytes | None,
    expect_head: str | None = None,
    expect_records: int | None = None,
) -> VerifyReport:
    """Verify the whole file; raises `OSError` only when it cannot be read at all.

    `expect_head` (a hash) and `expect_records` (a count), kept from an earlier
    verify, must still be in the log: the record with that hash, at that count.
    """
    chain = _Chain(key=key, expect_head=expect_head.lower() if expect_head else None)
    with path.open("rb") as handle:
        lines = enumerate(handle, start=1)
        pending = next(lines, None)
        while pending is not None:
            number, raw = pending
            following = next(lines, None)
            if _acknowledged_fragment(raw, following):
                chain.recovered.append(number)
            else:
                problem = _check(chain, raw)
                if problem is not None:
                    reason = _refine(path, number, chain, problem)
                    return _report(path, chain, bad_line=number, reason=reason)
            pending = following
    missing = _expected_head_problem(chain, expect_records)
    if missing is not None:
        return _report(path, chain, reason=missing)
    return _report(path, chain, expected=expect_records)


def _expected_head_problem(chain: _Chain, expect_records: int | None) -> str | None:
    """Why the kept head is not in this (otherwise sound) log, or None when it is."""
    if chain.expect_head is not None and chain.head_at is None:
        return (
            f"the expected head {chain.expect_head} is not in the log: records were cut from "
            "the end, the file was emptied or replaced"
        )
    if chain.head_at is not None and expect_records is not None and (
        chain.head_at != expect_records
    ):
        return f"the expected head is record {chain.head_at}, not record {expect_records}"
    if expect_records is not None and chain.records < expect_records:
        return (
            f"expected at least {expect_records} records, found {chain.records}: records were "
            "cut from the end, or the file was emptied"
        )
    return None


def _report(
    path: Path,
    chain: _Chain,
    *,
    bad_line: int | None = None,
    reason: str | None = None,
    expected: int | None = None,
) -> VerifyReport:
    ok = bad_line is None and reason is None
    kept = chain.head_at if chain.head_at is not None else expected
    return VerifyReport(
        path=path,
        ok=ok,
        records=chain.records,
        runs=len(chain.run_ids),
        keyed=chain.keyed or chain.key is not None,
        head_seq=chain.expected_seq - 1 if chain.records else None,
        head_hash=chain.prev if chain.records else None,
        bad_line=bad_line,
        reason=reason,
        torn_tail=reason is not None and reason.startswith("torn tail"),
        recovered_lines=tuple(chain.recovered),
        open_runs=tuple(chain.open_runs),
        head_checked=ok and kept is not None,
        grown_by=chain.records - kept if ok and kept is not None else 0,
    )


def _acknowledged_fragment(raw: bytes, following: tuple[int, bytes] | None) -> bool:
    """True when the next line is a `recover` record naming exactly these bytes."""
    if following is None:
        return False
    record = _load(following[1].rstrip(b"\n"))
    if record is None or record.get("event") != "recover":
        return False
    data = record.get("data")
    fragment = raw.rstrip(b"\n")
    return (
        isinstance(data, dict)
        and data.get("torn_bytes") == len(fragment)
        and data.get("torn_sha256") == hashlib.sha256(fragment).hexdigest()
    )


def _load(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # bad bytes, bad JSON, or nested past the parser
        return None
    return record if isinstance(record, dict) else None


@dataclass(frozen=True)
class _SeqMismatch:
    """A record whose seal verifies but whose seq is not the next one."""

    found: int


def _check(chain: _Chain, raw: bytes) -> str | _SeqMismatch | None:
    """Check one line against the chain; advance the chain and return None when it verifies."""
    if not raw.endswith(b"\n"):
        return f"torn tail: last line incomplete ({len(raw)} bytes); a writer stopped mid-write"
    line = raw[:-1]
    record = _load(line)
    if record is None:
        return "not valid JSON: the line was edited or damaged"
    problem = _check_seal(chain, record, line)
    if problem is not None:
        return problem
    if record["seq"] != chain.expected_seq:
        return _SeqMismatch(found=record["seq"])
    if record["prev"] != chain.prev:
        return "chain broken: prev does not match the record before (inserted or replaced record)"
    _advance(chain, record)
    return None


def _check_seal(chain: _Chain, record: dict[str, Any], line: bytes) -> str | None:
    """The record's own form and seal."""
    try:
        form = canonical(record)
    except (ValueError, RecursionError):  # NaN or Infinity, which no writer produces
        return "edited: the line is not in canonical form"
    if form != line:
        return "edited: the line is not in canonical form"
    if not all(isinstance(record.get(name), kind) for name, kind in _FIELDS):
        return "edited: a required field is missing or has the wrong type"
    alg = record["alg"]
    if chain.key is None and alg == "hmac-sha256":
        return "records are HMAC-sealed: set SBX_AUDIT_KEY to verify this log"
    if alg != algorithm(chain.key):
        return f"record sealed with {alg!r}, expected {algorithm(chain.key)!r} (downgraded chain?)"
    if seal(record, chain.key) != record["hash"]:
        what = "HMAC" if chain.key is not None else "hash"
        return f"edited: the content does not match the record's {what}"
    return None


_FIELDS = (
    ("seq", int), ("prev", str), ("hash", str), ("alg", str), ("run_id", str), ("event", str)
)


def _advance(chain: _Chain, record: dict[str, Any]) -> None:
    chain.expected_seq += 1
    chain.prev = record["hash"]
    chain.records += 1
    if chain.expect_head is not None and record["hash"] == chain.expect_head:
        chain.head_at = chain.records
    chain.keyed = chain.keyed or record["alg"] == "hmac-sha256"
    run_id = record["run_id"]
    chain.run_ids.add(run_id)
    if record["event"] == "run_start":
        chain.open_runs[run_id] = None
    elif record["event"] == "run_end":
        chain.open_runs.pop(run_id, None)


def _refine(path: Path, number: int, chain: _Chain, problem: str | _SeqMismatch) -> str:
    """Turn a seq mismatch into 'missing' or 'out of order' by looking further on."""
    if isinstance(problem, str):
        return problem
    found, expected = problem.found, chain.expected_seq
    if found < expected:
        return f"out of order or duplicated: expected seq {expected}, found {found} (seen before)"
    later = _find_seq(path, after=number, seq=expected)
    if later is not None:
        where = f"seq {expected} is at line {later}"
        return f"out of order: expected seq {expected}, found {found} ({where})"
    gap = found - expected
    return f"missing record: expected seq {expected}, found {found} ({gap} record(s) gone)"


def _find_seq(path: Path, *, after: int, seq: int) -> int | None:
    """The line number of the first record with this seq after line `after`, if any."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number > after:
                record = _load(raw.rstrip(b"\n"))
                if record is not None and record.get("seq") == seq:
                    return number
    return None


class UnreadableLine(SbxError, ValueError):
    """A line that is no JSON object (or a torn last line): `LINE: why`."""


def iter_records(path: Path, *, strict: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, record) for every parseable line; for display, not for trust.

    Lines that are no JSON object are skipped, or with `strict` end the reading
    with `UnreadableLine` naming the line (what `sbx audit show` promises).
    """
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            record = _load(raw.rstrip(b"\n"))
            if record is not None:
                yield number, record
            elif strict:
                raise UnreadableLine(f"{number}: {_unreadable(raw)}")


def _unreadable(raw: bytes) -> str:
    """Why a line that `_load` refused is no record."""
    if not raw.endswith(b"\n"):
        return "torn: the last line is incomplete (a writer stopped mid-write)"
    try:
        json.loads(raw)
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except (ValueError, RecursionError):
        return "not a JSON line"
    return "not a JSON object"
