"""`sbx audit verify FILE` and `sbx audit show FILE`: the auditor's two commands.

`verify` exits 0 with a short summary when every record verifies, and 1
with the first bad record's line and reason otherwise (a torn tail, an edit,
a missing or reordered record). With `SBX_AUDIT_KEY` set it checks HMAC
seals and refuses a chain that was downgraded to plain SHA-256. It prints the
head hash and record count; given back with `--expect-head` and
`--expect-records` they catch what a chain alone cannot: records cut from the
end, an emptied file. `show` prints one row per call, every cell escaped (the
model chose the arguments and the ids). Errors are one line, never a stack
trace; a line `show` cannot render (damaged, torn, not an audit record)
exits 2 naming it. `show --denied` lists every refused call with the reason the
model was given: denied by a rule, unknown tool, invalid arguments, halted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from sbx.agent import AUDIT_COLUMNS as COLUMNS
from sbx.agent import AuditError, UnreadableLine, audit_key_from_env, safe_text
from sbx.agent import audit_call_rows as call_rows
from sbx.agent import iter_audit_records as iter_records
from sbx.agent import verify_audit_log as verify_log

_FILE = click.Path(path_type=Path, dir_okay=False)
_HASH = re.compile(r"[0-9a-fA-F]{64}")


def _hex_hash(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A seal as printed by verify: 64 hex digits."""
    if value is not None and not _HASH.fullmatch(value):
        raise click.BadParameter("expected 64 hex digits, as `sbx audit verify` prints the head")
    return value.lower() if value else None


def register(cli: click.Group) -> None:
    """Add the `audit` group to the `sbx` group."""
    cli.add_command(audit)


@click.group()
def audit() -> None:
    """Verify and read tool-call audit logs (JSON Lines, hash-chained)."""


@audit.command()
@click.argument("file", type=_FILE)
@click.option("--expect-head", metavar="HASH", callback=_hex_hash,
              help="A head hash an earlier verify printed: the log must still hold that record.")
@click.option("--expect-records", metavar="N", type=click.IntRange(min=0),
              help="A record count an earlier verify printed: the log must hold at least N "
              "(with --expect-head, the head is record N).")
def verify(file: Path, expect_head: str | None, expect_records: int | None) -> None:
    """Check every record of FILE; exit 1 at the first bad one (set SBX_AUDIT_KEY for HMAC logs).

    A chain cannot show records cut from its end, or an emptied file: keep the head
    hash and count this prints, and pass them back with --expect-head and
    --expect-records next time.
    """
    try:
        key = audit_key_from_env(os.environ)
        report = verify_log(
            file, key=key, expect_head=expect_head, expect_records=expect_records
        )
    except AuditError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot read {file}: {exc.strerror}") from None
    click.echo(report.summary(), err=not report.ok)
    if not report.ok:
        raise SystemExit(1)


@audit.command()
@click.argument("file", type=_FILE)
@click.option("--run", "run_id", metavar="ID", help="Only this run (a prefix of the id is enough).")
@click.option("--tool", metavar="NAME", help="Only calls to this tool.")
@click.option("--denied", is_flag=True,
              help="Only refused calls: denied, unknown tool, invalid arguments, halted.")
def show(file: Path, run_id: str | None, tool: str | None, denied: bool) -> None:
    """Print the calls recorded in FILE as a table (display only: use `verify` to trust it).

    A line that is not an audit record (damaged, torn, or another file's) exits 2 naming it.
    """
    try:
        records = _shaped(iter_records(file, strict=True))
        rows = call_rows(records, run=run_id, tool=tool, denied=denied)
    except OSError as exc:
        raise click.ClickException(f"cannot read {file}: {exc.strerror}") from None
    except (BadRecord, UnreadableLine) as exc:
        click.echo(safe_text(f"sbx: {file}:{exc}"), err=True)
        raise SystemExit(2) from None
    table = [[name.upper() for name in COLUMNS]]
    table += [[safe_text(cell) for cell in row.cells()] for row in rows]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(COLUMNS))]
    for cells in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    if not rows:
        click.echo("(no matching records)", err=True)


class BadRecord(ValueError):
    """A record `show` cannot render: `LINE: why` (verify says whether the log is sound)."""


_TEXT_FIELDS = ("time", "run_id", "event")
_NUMBER_FIELDS = ("duration_s",)


def _shaped(
    records: Iterator[tuple[int, dict[str, Any]]],
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Pass records whose fields have the types `call_rows` reads; stop at the first that does not.

    `show` is display only and reads any JSON a file holds, so a hand-edited line
    (`data` a list, a duration that is text) must end in one line naming it, not a
    traceback from the table code.
    """
    for line, record in records:
        data = record.get("data")
        if data is not None and not isinstance(data, dict):
            raise BadRecord(f"{line}: data is not an object")
        for name in _TEXT_FIELDS:
            if record.get(name) is not None and not isinstance(record[name], str):
                raise BadRecord(f"{line}: {name} is not text")
        for name in _NUMBER_FIELDS:
            value = (data or {}).get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadRecord(f"{line}: data.{name} is not a number")
        if not _is_audit_record(record):
            raise BadRecord(f"{line}: not an audit record (no event, seq and hash)")
        yield line, record


def _is_audit_record(record: dict[str, Any]) -> bool:
    """The fields every record the audit log writes has: a line of another file has not."""
    seq = record.get("seq")
    return (
        isinstance(record.get("event"), str) and isinstance(record.get("hash"), str)
        and isinstance(seq, int) and not isinstance(seq, bool)
    )
