"""`sbx notes list|add|edit|delete`: what you (and the model, on your word) noted about data.

A note is a short fact about a data file ("amounts are in cents") that every
later `sbx ask` or `sbx chat` on that file puts in the model's system prompt,
marked as a note with who wrote it and when. Notes are kept in
`sbx-runs/notes.json` (`$SBX_NOTES` names another file), attached to the file's
name and the digest of its content: when the file changes, its notes are shown
as possibly stale. The model saves notes itself only when the policy enables
`[tools.remember]`; its bounds (`max_chars`, `max_notes`) apply here too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import click

from sbx.agent import (
    DatasetNotes,
    Note,
    NoteError,
    PolicyError,
    SettingsError,
    data_digests,
    load_config,
    local_note_store,
    os_principal,
    safe_json,
    safe_text,
)
from sbx.agent.cli.errors import fail

T = TypeVar("T")
EXAMPLES = """
\b
Examples:
  sbx notes add sales.csv "amounts are in cents"
  sbx notes list --data sales.csv       # its notes, marked stale if the file changed
  sbx notes edit note-1a2b3c4d5e6f "amounts are in euro cents"
  sbx notes delete note-1a2b3c4d5e6f
"""


@click.group("notes", epilog=EXAMPLES)
@click.option("--policy", type=click.Path(path_type=Path, dir_okay=False),
              help="Policy file ([tools.remember] bounds and sharing). [default: the packaged "
              "sbx.toml]")
@click.pass_context
def notes(ctx: click.Context, policy: Path | None) -> None:
    """See, add, edit and delete notes about your data files.

    The next conversation on a file sees its notes in the system prompt, as notes
    (context the model must not quote as computed), never as measurements.
    Notes live in sbx-runs/notes.json, or the file $SBX_NOTES names.
    """
    try:
        rule = load_config(policy).policy.tools.remember
    except PolicyError as exc:
        fail(str(exc))
    ctx.obj = DatasetNotes(local_note_store(os.environ), principal=os_principal(), team=None,
                       rule=rule)


@notes.command("list")
@click.option("--data", "data", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="Only the notes on this file (repeatable); marks those it outdates stale.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.pass_obj
def list_notes(book: DatasetNotes, data: tuple[Path, ...], as_json: bool) -> None:
    """List your notes (all, or those on --data files)."""
    digests = data_digests(data) if data else {}
    found = _guarded(lambda: [n for n in book.visible() if not data or n.dataset in digests])
    if as_json:
        rows = [{**n.model_dump(), "stale": n.stale(digests.get(n.dataset))} for n in found]
        click.echo(safe_json(json.dumps(rows, indent=2, ensure_ascii=False)))
        return
    if not found:
        click.echo("No notes." + ("" if data else " Add one: sbx notes add FILE TEXT"), err=True)
    for note in found:
        click.echo(_line(note, digests.get(note.dataset)))


@notes.command("add")
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.argument("text")
@click.pass_obj
def add_note(book: DatasetNotes, file: Path, text: str) -> None:
    """Add a note about FILE (attached to its name and its current content)."""
    name, digest = next(iter(data_digests([file]).items()))
    note = _guarded(lambda: book.add(name, digest, text))
    click.echo(note.id)


@notes.command("edit")
@click.argument("note_id")
@click.argument("text")
@click.pass_obj
def edit_note(book: DatasetNotes, note_id: str, text: str) -> None:
    """Replace the text of note NOTE_ID."""
    note = _guarded(lambda: book.edit(note_id, text))
    click.echo(_line(note, None))


@notes.command("delete")
@click.argument("note_id")
@click.pass_obj
def delete_note(book: DatasetNotes, note_id: str) -> None:
    """Delete note NOTE_ID: the next conversation no longer sees it."""
    note = _guarded(lambda: book.delete(note_id))
    click.echo(f"deleted {note.id}", err=True)


def _guarded(work: Callable[[], T]) -> T:
    """`work`'s result; a refused note is one line on stderr and exit status 2."""
    try:
        return work()
    except (NoteError, SettingsError) as exc:
        fail(str(exc), 2)


def _line(note: Note, digest: str | None) -> str:
    when = datetime.fromtimestamp(note.updated_at, UTC).strftime("%Y-%m-%d %H:%M UTC")
    stale = " [possibly stale: the file changed]" if note.stale(digest) else ""
    who = note.author + (" via the model" if note.by_model else "")
    return safe_text(f"{note.id}  {note.dataset}  {who}, {when}{stale}: {note.text}")
