"""`sbx export RUN_OR_TRANSCRIPT --format ipynb|py|md [--output FILE]`.

RUN_OR_TRANSCRIPT is a transcript file, or a run id looked up under
`sbx-runs/`: the file named after it (`sbx ask` names transcripts so), else
the conversation transcript holding it, exported up to and including that run
(its code may use what earlier runs defined). Without `--output` the export
goes to stdout; with it, to a new file (an existing one is never
overwritten). The format defaults to the output file's suffix, else ipynb.

Exit status: 0 written; 2 a bad argument, a transcript that cannot be read,
or an output file that exists.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from sbx.agent import EXPORT_FORMATS as FORMATS
from sbx.agent import RUNS_DIR, RecordError, TranscriptError, read_record
from sbx.agent import ExportFormat as Format
from sbx.agent import export_transcript as export
from sbx.agent.cli.errors import fail

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@click.command("export")
@click.argument("run_or_transcript")
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="ipynb (a notebook with outputs and plots), py (a script) or md (a report). "
              "[default: from --output's suffix, else ipynb]")
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
              help="Write to this new file instead of stdout.")
def export_command(run_or_transcript: str, fmt: str | None, output: Path | None) -> None:
    """Export a past run as a notebook, a script or a report that runs next to its data.

    The run's /data/NAME paths become DATA_DIR / "NAME" (DATA_DIR = Path(".") at the top)
    and /output/... becomes OUTPUT_DIR / ... . The code is the model's: read it before you
    run it outside the sandbox.

    Example: sbx export run-3f2a9c1d7e4b --format ipynb -o analysis.ipynb
    """
    chosen = _format(fmt, output)
    path, until = find_transcript(run_or_transcript, RUNS_DIR)
    try:
        record = read_record(path, until_run=until)
    except (TranscriptError, RecordError) as exc:
        fail(str(exc), 2)
    text = export(record, chosen)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        fail(f"{output} exists; choose another --output or remove it", 2)
    except OSError as exc:
        fail(f"cannot create {output}: {exc.strerror}", 2)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    click.echo(f"sbx: wrote {output} ({chosen})", err=True)


def _format(fmt: str | None, output: Path | None) -> Format:
    chosen = fmt or (output.suffix.lstrip(".") if output is not None else "")
    for known in FORMATS:
        if chosen == known:
            return known
    return "ipynb"


def find_transcript(reference: str, runs_dir: Path) -> tuple[Path, str | None]:
    """The transcript to read and the run to stop after (None: every run).

    A path that exists is the transcript. Otherwise `reference` must look like a
    run id: `runs_dir/<id>.jsonl`, else the transcript under `runs_dir` that
    records a run with that id.
    """
    given = Path(reference)
    if given.is_file():
        return given, None
    if not _RUN_ID.fullmatch(reference):
        fail(f"{reference!r} is neither a transcript file nor a run id", 2)
    named = runs_dir / f"{reference}.jsonl"
    if named.is_file():
        return named, None
    needle = f'"run_id": "{reference}"'.encode()
    for candidate in sorted(runs_dir.glob("*.jsonl")):
        try:
            if needle in candidate.read_bytes():
                return candidate, reference
        except OSError:
            continue
    fail(f"no transcript under {runs_dir}/ records run {reference!r}", 2)


def register(cli: click.Group) -> None:
    """Add `sbx export` to the `sbx` group."""
    cli.add_command(export_command)
