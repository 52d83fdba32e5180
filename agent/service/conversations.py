"""`/v1/conversations`: create, list, show, delete, and post a question (which starts a run).

A conversation is held by the replica that created it: its sandbox and its
messages live in that process. Changes to it (a question, a delete) that
reach another replica are redirected there (307; send the key again), or, on
another worker of the same `sbx serve --workers N`, forwarded to it. When
that replica is gone (or this one restarted), the conversation is adopted
here and its state restored by replay (`adopt`); with `[restore]` off it is
answered 409 with the conversation marked `interrupted`. Reads come from the
shared store on any replica.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from sqlalchemy import select
from starlette.responses import Response

from sbx.agent import (
    ConversationRow,
    ConversationSpec,
    DbNoteStore,
    LiveConversation,
    NotAdopted,
    RunRow,
    StoreRecorder,
    adopt,
    dataset_paths,
    limited,
    loss_text,
    new_conversation_id,
    owned,
    owned_values,
    reserve_conversation,
    tenant_of,
)
from sbx.agent.service.api import Call, api, json_response
from sbx.agent.service.host import Service
from sbx.agent.service.problems import Problem
from sbx.agent.service.schemas import (
    AnswerQuestion,
    AskQuestion,
    ConversationOut,
    CreateConversation,
    Listing,
    RunAccepted,
)
from sbx.agent.service.siblings import to_owner

LIST_LIMIT = 200
logger = logging.getLogger(__name__)


@api("POST", "/v1/conversations", body=CreateConversation, response=ConversationOut, status=201)
def create_conversation(call: Call, body: CreateConversation) -> Response:
    """Open a conversation over some of your datasets (its sandbox starts with the first run)."""
    service = call.service
    endpoint = service.require_endpoint()
    model = body.model or endpoint.model
    if model != endpoint.model and model not in service.settings.models:
        allowed = ", ".join([endpoint.model, *service.settings.models])
        raise Problem(422, "model-not-allowed", f"model: {model!r} is not allowed ({allowed})")
    limited(service.config, body.limits)  # a limit above the policy's: 422 before anything
    tenant = tenant_of(service, call.key)
    now = time.time()
    row = ConversationRow(
        id=new_conversation_id(), principal=call.principal, status="active",
        replica_id=service.replica_id, datasets=list(dict.fromkeys(body.datasets)), model=model,
        limits=body.limits.model_dump(exclude_none=True) if body.limits else {},
        sandbox="none", message="", created_at=now, last_active_at=now,
    )
    with service.db.write() as session:
        data = dataset_paths(session, row.datasets, call.principal, service.paths.datasets)
        reserve_conversation(session, call.principal, tenant.quotas)
        session.add(row)
    try:
        directory = service.paths.conversations / row.id
        spec = ConversationSpec(principal=call.principal, team=tenant.team,
                                spend=tenant.spend, withheld_tools=tenant.withheld_tools,
                                data=data, output_root=directory / "output",
                                conversation_id=row.id, defer_questions=True,
                                notes=DbNoteStore(service.db))
        conversation = service.app.conversation(
            spec, endpoint=replace(endpoint, model=model),
            transcript=directory / "transcript.jsonl", limits=body.limits)
        service.runs.attach(conversation, principal=call.principal)
    except BaseException:
        _close_row(service, row.id, "could not be opened")
        raise
    return json_response(_out(row, []), 201, headers={"Location": f"/v1/conversations/{row.id}"})


@api("GET", "/v1/conversations", response=Listing)
def list_conversations(call: Call) -> Response:
    """List your conversations, newest first."""
    with call.service.db.read() as session:
        rows = session.scalars(select(ConversationRow).where(
            ConversationRow.principal == call.principal
        ).order_by(ConversationRow.created_at.desc()).limit(LIST_LIMIT)).all()
        return json_response(Listing(items=[_out(row, None) for row in rows]))


@api("GET", "/v1/conversations/{conversation_id}", response=ConversationOut)
def get_conversation(call: Call) -> Response:
    """One conversation and the ids of its runs."""
    with call.service.db.read() as session:
        row = owned(session, ConversationRow, "conversation", call.params["conversation_id"],
                    call.principal)
        runs = session.scalars(select(RunRow.id).where(RunRow.conversation_id == row.id)
                               .order_by(RunRow.created_at)).all()
        return json_response(_out(row, list(runs)))


@api("DELETE", "/v1/conversations/{conversation_id}", status=204)
def delete_conversation(call: Call) -> Response:
    """Close a conversation: its run is cancelled and its sandbox removed."""
    held = _held(call, allow_inactive=True)
    if isinstance(held, Response):
        return held
    if held is not None:
        call.service.runs.close_conversation(held.id)
    _close_row(call.service, call.params["conversation_id"], "")
    return Response(status_code=204)


@api("POST", "/v1/conversations/{conversation_id}/questions", body=AskQuestion,
     response=RunAccepted, status=202)
def ask_question(call: Call, body: AskQuestion) -> Response:
    """Ask a question (or a follow-up); the run starts now and its id comes back at once."""
    service = call.service
    if len(body.question) > service.settings.max_question_chars:
        raise Problem(422, "question-too-long", f"question: at most "
                      f"{service.settings.max_question_chars} characters")
    return _submit(call, body.question)


@api("POST", "/v1/conversations/{conversation_id}/answer", body=AnswerQuestion,
     response=RunAccepted, status=202)
def answer_question(call: Call, body: AnswerQuestion) -> Response:
    """Answer the question a run asked (it ended `needs_input`): a new run continues it."""
    if len(body.answer) > call.service.settings.max_question_chars:
        raise Problem(422, "answer-too-long", f"answer: at most "
                      f"{call.service.settings.max_question_chars} characters")
    return _submit(call, body.answer, answering=True)


def _submit(call: Call, text: str, *, answering: bool = False) -> Response:
    """Admit a question (or an answer) as a run of the held conversation, and queue it."""
    service = call.service
    held = _held(call)
    if isinstance(held, Response):
        return held
    if held is None:  # pragma: no cover - _held answers inactive conversations itself
        raise Problem(409, "conversation-closed", "the conversation is closed")
    if answering and held.run_id is not None:
        raise _no_question()
    recorder = StoreRecorder(service, tenant_of(service, call.key))
    try:
        ticket = held.conversation.admit(text, recorder, answering=answering)
    except ValueError:  # no question waits, or another answer claimed it
        raise _no_question() from None
    try:
        service.runs.submit(held, ticket, recorder, text, answering=answering)
    except BaseException:
        held.conversation.question.unclaim(ticket.run_id)  # refused: it waits for another answer
        raise
    run_id = ticket.run_id
    accepted = RunAccepted(run_id=run_id, status="queued", url=f"/v1/runs/{run_id}",
                           events_url=f"/v1/runs/{run_id}/events")
    return json_response(accepted, 202, headers={"Location": accepted.url})


def _no_question() -> Problem:
    return Problem(409, "no-question-pending", "no run of this conversation is waiting for an "
                   "answer (a run asks with ask_user and ends needs_input)")


def _held(call: Call, *, allow_inactive: bool = False) -> LiveConversation | Response | None:
    """The live conversation here; a redirect to its replica; None if inactive (allowed)."""
    service = call.service
    conversation_id = call.params["conversation_id"]
    with service.db.reading() as connection:
        status, replica_id, message = owned_values(
            connection, ConversationRow, "conversation", conversation_id, call.principal,
            "status", "replica_id", "message")
    if status != "active":
        if allow_inactive:
            return None
        raise Problem(409, f"conversation-{status}", f"the conversation is {status}"
                      + (f": {message}" if message else ""), conversation_status=status)
    if replica_id == service.replica_id:
        live = service.runs.get(conversation_id)
        if live is not None:
            return live
        message = "this replica no longer holds the conversation (it restarted)"
        lost = loss_text("restart", "the server restarted")
    else:
        owner = service.replicas.owner(replica_id)
        if owner is not None:
            return to_owner(call, owner)
        message = (f"the replica {replica_id!r} that held this conversation's sandbox is gone; "
                   "its variables and messages are lost: start a new conversation")
        lost = loss_text("restart", f"the replica {replica_id!r} that held it stopped")
    adopted = _adopted(call, conversation_id, lost)
    if adopted is not None:
        return adopted
    service.replicas.interrupt_conversation(conversation_id, message)
    if allow_inactive:
        return None
    raise Problem(409, "conversation-interrupted", f"the conversation is interrupted: {message}",
                  conversation_status="interrupted")


def _adopted(call: Call, conversation_id: str, lost: str) -> LiveConversation | Response | None:
    """Take the conversation up here (restore by replay); None when it cannot be."""
    try:
        live = adopt(call.service, conversation_id, reason=lost)
    except NotAdopted as exc:
        logger.info("conversation %s not adopted: %s", conversation_id, exc)
        return None
    if live is not None:
        return live
    with call.service.db.read() as session:  # another replica adopted it first
        row = session.get(ConversationRow, conversation_id)
        owner = call.service.replicas.owner(row.replica_id) if row is not None else None
    return to_owner(call, owner) if owner is not None else None


def _close_row(service: Service, conversation_id: str, message: str) -> None:
    with service.db.write() as session:
        row = session.get(ConversationRow, conversation_id)
        if row is not None and row.status == "active":
            row.status, row.sandbox, row.closed_at = "closed", "none", time.time()
            row.message = message


def _out(row: ConversationRow, runs: list[str] | None) -> ConversationOut:
    return ConversationOut(
        id=row.id, status=row.status, datasets=list(row.datasets or []), model=row.model,
        limits=dict(row.limits or {}), sandbox=row.sandbox, message=row.message,
        created_at=row.created_at, last_active_at=row.last_active_at, runs=runs or [],
    )
