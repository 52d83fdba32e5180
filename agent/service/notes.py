"""`/v1/datasets/{id}/notes`: see, add, edit and delete the notes about one of your datasets.

Tenancy as for datasets: the dataset must be the caller's (another key gets
404, the same answer as for one that does not exist). A note belongs to the
dataset's name and to its author, or to the author's team where the policy
shares notes; the core decides who reads it (`sbx.agent.core.notes`). A
note's bytes count toward the caller's `storage_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response

from sbx.agent import (
    DatasetNotes,
    DatasetRow,
    DbNoteStore,
    Note,
    NoteError,
    check_storage,
    owned,
    tenant_of,
)
from sbx.agent.service.api import Call, api, json_response
from sbx.agent.service.problems import Problem
from sbx.agent.service.schemas import Listing, NoteIn, NoteOut

NOTES = "/v1/datasets/{dataset_id}/notes"
ONE_NOTE = NOTES + "/{note_id}"


@api("GET", NOTES, response=Listing)
def list_notes(call: Call) -> Response:
    """The notes on this dataset that you may read, oldest first; `stale` when it changed."""
    dataset, book = _dataset_and_book(call)
    return json_response(Listing(items=[_out(note, dataset) for note in
                                        book.visible(dataset.name)]))


@api("POST", NOTES, body=NoteIn, response=NoteOut, status=201)
def add_note(call: Call, body: NoteIn) -> Response:
    """Add a note about this dataset; the next conversation on it sees it, marked as a note."""
    dataset, book = _dataset_and_book(call)
    with call.service.db.read() as session:
        check_storage(session, call.principal, tenant_of(call.service, call.key).quotas,
                      adding=len(body.text.encode()))
    note = _refused_as_422(lambda: book.add(dataset.name, dataset.sha256, body.text))
    return json_response(_out(note, dataset), 201,
                         headers={"Location": f"/v1/datasets/{dataset.id}/notes/{note.id}"})


@api("PATCH", ONE_NOTE, body=NoteIn, response=NoteOut)
def edit_note(call: Call, body: NoteIn) -> Response:
    """Replace a note's text."""
    dataset, book = _dataset_and_book(call)
    _own_note(book, dataset, call.params["note_id"])
    note = _refused_as_422(lambda: book.edit(call.params["note_id"], body.text))
    return json_response(_out(note, dataset))


@api("DELETE", ONE_NOTE, status=204)
def delete_note(call: Call) -> Response:
    """Delete a note: the next conversation on the data no longer sees it."""
    dataset, book = _dataset_and_book(call)
    book.delete(_own_note(book, dataset, call.params["note_id"]).id)
    return Response(status_code=204)


def _dataset_and_book(call: Call) -> tuple[DatasetRow, DatasetNotes]:
    """The caller's dataset (404 otherwise) and the caller's notes."""
    with call.service.db.read() as session:
        dataset = owned(session, DatasetRow, "dataset", call.params["dataset_id"], call.principal)
        session.expunge(dataset)
    book = DatasetNotes(DbNoteStore(call.service.db), principal=call.principal, team=call.key.team,
                    rule=call.service.config.policy.tools.remember)
    return dataset, book


def _own_note(book: DatasetNotes, dataset: DatasetRow, note_id: str) -> Note:
    """A note on this dataset the caller may read, else 404."""
    try:
        note = book.get(note_id)
    except NoteError:
        note = None
    if note is None or note.dataset != dataset.name:
        raise Problem(404, "not-found", f"no note {note_id[:64]!r} on dataset {dataset.id}")
    return note


def _refused_as_422(work: Callable[[], Note]) -> Note:
    try:
        return work()
    except NoteError as exc:
        raise Problem(422, "note-refused", str(exc)) from None


def _out(note: Note, dataset: DatasetRow) -> NoteOut:
    return NoteOut(**note.model_dump(exclude={"digest"}), stale=note.stale(dataset.sha256))
