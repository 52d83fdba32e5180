"""Notes about a dataset that outlive the conversation: what people taught the agent.

"Amounts are in cents", "region 9 is a test region": a note is a short text
attached to a dataset's identity, its name under `/data` and the digest of its
content when the note was written. A file of the same name whose content has
changed since shows its notes as possibly stale. A note is context, never a
source: provenance traces an answer's numbers to outputs only, so a number a
note alone gives stays unsupported.

    Note        one note: dataset, digest, text, who wrote it, when, its team if shared
    NoteStore   where notes live: a JSON file for the CLI (`FileNoteStore`), the
                service's database (`sbx.agent.core.hosting.store.notes`)
    DatasetNotes    one principal's view for one conversation: the notes they may read,
                the section of the system prompt, and `remember` (the tool's keeper)

Who sees a note: its author, and the author's team when the policy shares
notes (`[tools.remember] share_with_team`). Bounds (`max_notes` per dataset
and author, `max_chars` per note) hold for the model and for people alike.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from sbx.agent.core.settings import SettingsError
from sbx.agent.provenance.data import data_digests
from sbx.sandbox.errors import SbxError
from sbx.tools.policy import Policy, RememberRule

if TYPE_CHECKING:
    from sbx.agent.core.workspace import ConversationSpec


class Note(BaseModel):
    """One note about a dataset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """`note-` and 12 hex digits."""
    dataset: str
    """The dataset's name under `/data` (`sales.csv`, `dir/part.csv`)."""
    digest: str
    """The sha256 of the dataset's content when the note was written."""
    text: str
    """What the note says (written by a person or the model, bounded; escape where shown)."""
    author: str
    """The principal who wrote it (a person, or the model on their behalf)."""
    team: str | None = None
    """The author's team when the note is shared with it; None: the author's alone."""
    by_model: bool = False
    """Saved by the model's `remember` tool (after the user stated or confirmed the fact)."""
    created_at: float
    updated_at: float

    def stale(self, digest: str | None) -> bool:
        """The dataset's content changed since the note was written (unknown content: no)."""
        return digest is not None and digest != self.digest


MAX_PROMPT_NOTES = 50
"""Most notes one system prompt shows (the newest; a team's notes add up)."""


class NoteError(SbxError, ValueError):
    """A note was refused (too long, too many, unknown dataset or note); the message says why."""


class NoteStore(Protocol):
    """Where notes live; every method is one consistent step (a lock or a transaction)."""

    def notes_on(self, dataset: str | None = None) -> list[Note]:
        """Every note on `dataset` (all datasets when None), oldest first, whoever wrote it."""
        ...

    def add(self, note: Note, *, limit: int) -> None:
        """Keep `note`, unless its author has `limit` notes on that dataset (`NoteError`)."""
        ...

    def replace(self, note: Note) -> None:
        """Store `note` in place of the one with its id."""
        ...

    def delete(self, note_id: str) -> None:
        """Forget the note `note_id` (no error when it is gone)."""
        ...


def new_note_id() -> str:
    """A fresh note id."""
    return f"note-{uuid.uuid4().hex[:12]}"


class DatasetNotes:
    """One principal's notes for one conversation (or one CLI or API request)."""

    def __init__(self, store: NoteStore, *, principal: str, team: str | None,
                 rule: RememberRule, data: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.principal = principal
        self.team = team
        self.rule = rule
        self.data = dict(data or {})
        """The conversation's datasets: name under `/data` -> content digest."""

    def readable(self, note: Note) -> bool:
        """The principal wrote it, or it is shared with their team and the policy shares."""
        if note.author == self.principal:
            return True
        return bool(self.rule.share_with_team and note.team and note.team == self.team)

    def visible(self, dataset: str | None = None) -> list[Note]:
        """The notes this principal may read, on `dataset` or on any."""
        return [note for note in self.store.notes_on(dataset) if self.readable(note)]

    def get(self, note_id: str) -> Note:
        """A note this principal may read (`NoteError` otherwise: the same for absent)."""
        for note in self.store.notes_on():
            if note.id == note_id and self.readable(note):
                return note
        raise NoteError(f"no note {note_id!r}")

    def add(self, dataset: str, digest: str, text: str, *, by_model: bool = False) -> Note:
        """Save a note on `dataset` as it is now (`digest`); bounded by the policy."""
        now = time.time()
        note = Note(id=new_note_id(), dataset=dataset, digest=digest, text=self._checked(text),
                    author=self.principal, team=self.team if self.rule.share_with_team else None,
                    by_model=by_model, created_at=now, updated_at=now)
        self.store.add(note, limit=self.rule.max_notes)
        return note

    def edit(self, note_id: str, text: str) -> Note:
        """New text for a note this principal may read."""
        note = self.get(note_id)
        changed = note.model_copy(update={"text": self._checked(text), "updated_at": time.time()})
        self.store.replace(changed)
        return changed

    def delete(self, note_id: str) -> Note:
        """Delete a note this principal may read; returns it."""
        note = self.get(note_id)
        self.store.delete(note.id)
        return note

    def remember(self, dataset: str, text: str) -> str:
        """The `remember` tool's keeper: save a note on one of this conversation's datasets."""
        name = dataset.removeprefix("/data/").strip("/")
        digest = self.data.get(name)
        if digest is None:
            known = ", ".join(sorted(self.data)) or "(none)"
            raise NoteError(f"no dataset {dataset!r} in this conversation; one of: {known}")
        note = self.add(name, digest, text, by_model=True)
        shared = f", shared with team {note.team}" if note.team else ""
        return f"Saved note {note.id} on {name}{shared}. People can see, edit and delete it."

    def _checked(self, text: str) -> str:
        text = " ".join(text.split())
        if not text:
            raise NoteError("a note needs some text")
        if len(text) > self.rule.max_chars:
            raise NoteError(f"a note is at most {self.rule.max_chars} characters "
                            f"([tools.remember] max_chars); this one has {len(text)}")
        return text

    def prompt_section(self) -> str:
        """The system prompt's notes on this conversation's data ("" when there are none)."""
        found = [(note, digest) for name, digest in sorted(self.data.items())
                 for note in self.visible(name)]
        if not found:
            return ""
        newest = sorted(found, key=lambda pair: pair[0].updated_at)[-MAX_PROMPT_NOTES:]
        lines = [note_line(note, digest) for note, digest in found if (note, digest) in newest]
        if len(found) > len(lines):
            lines.append(f"- ({len(found) - len(lines)} older notes not shown)")
        return (
            "## Notes about this data, from earlier conversations\n\n"
            "People (or you, on their word) saved these notes. They are context, not "
            "measurements: check them against the data where you can, never quote a number "
            "from a note as computed, and say so when an answer relies on one.\n\n"
            + "\n".join(lines) + "\n"
        )


LOCAL_NOTES = Path("sbx-runs") / "notes.json"
"""The CLI's notes, beside its transcripts, unless `SBX_NOTES` names another file."""


def local_note_store(environ: Mapping[str, str]) -> FileNoteStore:
    """The note store of a local face (the CLI): `$SBX_NOTES`, else `sbx-runs/notes.json`."""
    named = environ.get("SBX_NOTES")
    return FileNoteStore(Path(named) if named else LOCAL_NOTES)


def notes_for(spec: ConversationSpec, policy: Policy) -> DatasetNotes | None:
    """A conversation principal's notes on its data (None: the face keeps no notes)."""
    if spec.notes is None:
        return None
    return DatasetNotes(spec.notes, principal=spec.principal, team=spec.team,
                    rule=policy.tools.remember, data=data_digests(spec.data))


def note_line(note: Note, digest: str | None) -> str:
    """One note as the model and people see it: dataset, author, date, text, staleness."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(note.created_at))
    who = f"{note.author}{' via the model' if note.by_model else ''}"
    stale = " [possibly stale: the file changed since]" if note.stale(digest) else ""
    return f"- [note {note.id} on {note.dataset}, by {who}, {when}]{stale} {note.text}"


class FileNoteStore:
    """Notes in one JSON file (the CLI's, beside its transcripts), locked while changed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def notes_on(self, dataset: str | None = None) -> list[Note]:
        """Every note on `dataset` (all when None), oldest first."""
        with self._locked(write=False) as notes:
            return [note for note in notes if dataset is None or note.dataset == dataset]

    def add(self, note: Note, *, limit: int) -> None:
        """Append `note` unless its author already has `limit` on its dataset."""
        with self._locked(write=True) as notes:
            mine = [n for n in notes if n.dataset == note.dataset and n.author == note.author]
            if len(mine) >= limit:
                raise NoteError(f"{note.author} has {len(mine)} notes on {note.dataset} already "
                                f"([tools.remember] max_notes = {limit}): edit or delete one")
            notes.append(note)

    def replace(self, note: Note) -> None:
        """Store `note` in place of the one with its id."""
        with self._locked(write=True) as notes:
            notes[:] = [note if n.id == note.id else n for n in notes]

    def delete(self, note_id: str) -> None:
        """Forget `note_id`."""
        with self._locked(write=True) as notes:
            notes[:] = [n for n in notes if n.id != note_id]

    @contextmanager
    def _locked(self, *, write: bool) -> Iterator[list[Note]]:
        """The notes, under an exclusive lock; written back atomically when `write`."""
        if not write and not self.path.exists():
            yield []
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        with open(lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            notes = self._read()
            yield notes
            if write:
                scratch = self.path.with_name(self.path.name + ".tmp")
                scratch.write_text(json.dumps([n.model_dump() for n in notes], indent=1))
                os.replace(scratch, self.path)

    def _read(self) -> list[Note]:
        if not self.path.exists():
            return []
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return [Note.model_validate(item) for item in raw]
        except (ValueError, TypeError, ValidationError) as exc:  # the operator's to fix
            raise SettingsError(f"{self.path}: not a notes file ({type(exc).__name__}); "
                                "move it away or name another with SBX_NOTES") from None
