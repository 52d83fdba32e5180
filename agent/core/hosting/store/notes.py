"""The service's notes about datasets: `sbx.agent.core.notes.NoteStore` over the database.

The core decides who may read a note and bounds its size and number; this
keeps the rows. Adding counts the author's notes on the dataset under the
principal's lock, so two replicas cannot both pass `max_notes`.
"""

from __future__ import annotations

from sqlalchemy import delete, func, select

from sbx.agent.core.hosting.store.db import Database, lock_principal
from sbx.agent.core.hosting.store.models import NoteRow
from sbx.agent.core.notes import Note, NoteError

_FIELDS = ("id", "dataset", "digest", "text", "author", "team", "by_model", "created_at",
           "updated_at")


class DbNoteStore:
    """Notes in the service's store (SQLite or PostgreSQL)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def notes_on(self, dataset: str | None = None) -> list[Note]:
        """Every note on `dataset` (all when None), oldest first."""
        query = select(NoteRow).order_by(NoteRow.created_at, NoteRow.id)
        if dataset is not None:
            query = query.where(NoteRow.dataset == dataset)
        with self.db.read() as session:
            return [_note(row) for row in session.scalars(query)]

    def add(self, note: Note, *, limit: int) -> None:
        """Insert `note` unless its author has `limit` notes on its dataset (`NoteError`)."""
        with self.db.write() as session:
            lock_principal(session, note.author)
            held = session.scalar(select(func.count()).select_from(NoteRow).where(
                NoteRow.dataset == note.dataset, NoteRow.author == note.author)) or 0
            if held >= limit:
                raise NoteError(f"{note.author} has {held} notes on {note.dataset} already "
                                f"([tools.remember] max_notes = {limit}): edit or delete one")
            session.add(NoteRow(**note.model_dump()))

    def replace(self, note: Note) -> None:
        """Store `note`'s text and time in place of its row's."""
        with self.db.write() as session:
            row = session.get(NoteRow, note.id)
            if row is not None:
                row.text, row.updated_at = note.text, note.updated_at

    def delete(self, note_id: str) -> None:
        """Delete the row of `note_id`."""
        with self.db.write() as session:
            session.execute(delete(NoteRow).where(NoteRow.id == note_id))


def _note(row: NoteRow) -> Note:
    return Note.model_validate({name: getattr(row, name) for name in _FIELDS})
