"""`sbx replay --rerun TRANSCRIPT`: run a past conversation's code again and compare its output.

One line per execution as it completes, then a summary; data files that
changed since the run are named first. Exit status: 0 every execution
matched and the data is unchanged; 1 something differs (the report says
what); 2 a transcript that cannot be read; 125 sbx could not run (policy,
audit log, engine, image).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import click

from sbx.agent import (
    AuditError,
    ExecutionCheck,
    RecordedConversation,
    RecordError,
    RerunError,
    RerunReport,
    TranscriptError,
    os_principal,
    read_record,
    recorded_data,
    safe_text,
)
from sbx.agent.cli.errors import fail
from sbx.agent.cli.opening import FaceOptions, opened_core

EXIT_DIFFERS = 1


def rerun_command(transcript: Path, options: FaceOptions) -> NoReturn:
    """Re-run the transcript's executions, print the report, exit with its verdict.

    `options` give the policy, the audit log, the image and the limit flags.
    """
    try:
        record = read_record(transcript)
    except (TranscriptError, RecordError) as exc:
        fail(str(exc), 2)
    _intro(record)
    with opened_core(options) as app, tempfile.TemporaryDirectory(prefix="sbx-rerun-") as scratch:
        try:
            report = app.rerun(
                record, principal=os_principal(), output_dir=Path(scratch), on_check=_show,
                limits=options.limits,
            )
        except (RerunError, AuditError) as exc:
            fail(str(exc))
    _summary(report, total=sum(len(run.executions) for run in record.runs))
    sys.exit(0 if report.ok else EXIT_DIFFERS)


def _echo(text: str, *, fg: str | None = None, bold: bool | None = None) -> None:
    """One escaped line (paths, ids and outputs come from the transcript: hostile)."""
    click.echo(click.style(safe_text(text), fg=fg, bold=bold))


def _intro(record: RecordedConversation) -> None:
    paths, digests = recorded_data(record)
    count = sum(len(run.executions) for run in record.runs)
    _echo(f"== re-running {count} execution(s) of {record.path} in a fresh sandbox", bold=True)
    for path in paths:
        _echo(f"   data: {path}")
    if paths and not digests:
        _echo("   (this transcript recorded no data digests: changed data cannot be told apart)")


def _show(check: ExecutionCheck) -> None:
    verdict = "skipped" if check.skipped else "matches" if check.comparison.matches else "DIFFERS"
    _echo(
        f"{'ok' if check.comparison.matches else '!!'} run {check.run_id} execution "
        f"{check.number} [{check.call_id}]: {verdict}: {check.comparison.detail}",
        fg="green" if check.comparison.matches else "red",
    )


def _summary(report: RerunReport, *, total: int) -> None:
    for change in report.changes:
        _echo(f"   data {change.describe()}", fg="yellow")
    if report.ok:
        _echo(f"== every execution matches ({total}); the data is unchanged", fg="green", bold=True)
        return
    line = f"== {report.differing} of {total} execution(s) differ"
    if report.changes:
        names = ", ".join(change.name for change in report.changes)
        line += f"; the data changed since the run: {names}"
        if report.differing:
            line += " (the differences may come from it, not from the code)"
    _echo(line, fg="red", bold=True)
