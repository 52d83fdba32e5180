"""`sbx audit verify FILE` and `sbx audit show FILE`: the auditor's two commands.

`verify` exits 0 with a one-line summary when every record verifies, and 1
with the first bad record's line and reason otherwise (a torn tail, an edit,
a missing or reordered record). With `SBX_AUDIT_KEY` set it checks HMAC
seals and refuses a chain that was downgraded to plain SHA-256. `show` prints
one row per call. Errors are one line, never a stack trace.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from sbx.tools.audit import AuditError, audit_key_from_env
from sbx.tools.audit_show import COLUMNS, call_rows
from sbx.tools.audit_verify import iter_records, verify_log

_FILE = click.Path(path_type=Path, dir_okay=False)


def register(cli: click.Group) -> None:
    """Add the `audit` group to the `sbx` group."""
    cli.add_command(audit)


@click.group()
def audit() -> None:
    """Verify and read tool-call audit logs (JSON Lines, hash-chained)."""


@audit.command()
@click.argument("file", type=_FILE)
def verify(file: Path) -> None:
    """Check every record of FILE; exit 1 at the first bad one (set SBX_AUDIT_KEY for HMAC logs)."""
    try:
        key = audit_key_from_env(os.environ)
        report = verify_log(file, key=key)
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
@click.option("--denied", is_flag=True, help="Only denied (or halted) calls.")
def show(file: Path, run_id: str | None, tool: str | None, denied: bool) -> None:
    """Print the calls recorded in FILE as a table (display only: use `verify` to trust it)."""
    try:
        rows = call_rows(iter_records(file), run=run_id, tool=tool, denied=denied)
    except OSError as exc:
        raise click.ClickException(f"cannot read {file}: {exc.strerror}") from None
    table = [[name.upper() for name in COLUMNS], *(row.cells() for row in rows)]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(COLUMNS))]
    for cells in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    if not rows:
        click.echo("(no matching records)", err=True)
