"""`/v1/runs`: status and result, cancel, delete, the event stream (SSE), artifacts.

Reads come from the shared store, so any replica answers them; a cancel
goes to the replica running the run (307 there, like a conversation's; to
another worker of the same server it is forwarded).

Artifacts are looked up by run and name in the store: the name in the URL
is a key, never a path. The file served must still be the regular file the
run recorded, inside that run's output directory (symlinks are refused at
every step); it is sent as an attachment unless it is a raster image, with
`nosniff` and a `sandbox` content security policy either way.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from sbx.agent import (
    UNFINISHED_STATUSES,
    ArtifactRow,
    EventRow,
    RunRow,
    delete_runs,
    open_artifact,
    owned,
    owned_values,
    run_directory,
    run_outcome,
)
from sbx.agent.service.api import Call, api, json_response
from sbx.agent.service.disposition import content_disposition
from sbx.agent.service.problems import Problem, not_found
from sbx.agent.service.schemas import AnswerPartsOut, ArtifactOut, Listing, PlanStepOut, RunOut
from sbx.agent.service.siblings import to_owner
from sbx.agent.service.sse import event_stream, last_event_id

INLINE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
CHUNK = 64 * 1024


@api("GET", "/v1/runs/{run_id}", response=RunOut)
def get_run(call: Call) -> Response:
    """A run's status, and its answer, totals and artifacts once it has ended."""
    with call.service.db.read() as session:
        run = owned(session, RunRow, "run", call.params["run_id"], call.principal)
        live = current_plan(session, run.id) if run.status in UNFINISHED_STATUSES else None
        return json_response(run_out(run, _artifacts(session, run.id), plan=live))


@api("POST", "/v1/runs/{run_id}/cancel", response=RunOut, status=202)
def cancel_run(call: Call) -> Response:
    """Cancel a queued or running run: its sandbox is removed, the run ends `cancelled`."""
    service = call.service
    with service.db.read() as session:
        run = owned(session, RunRow, "run", call.params["run_id"], call.principal)
    if run.status not in UNFINISHED_STATUSES:
        raise Problem(409, "run-ended", f"run {run.id} has already ended ({run.status})",
                      run_status=run.status)
    if run.replica_id != service.replica_id:
        owner = service.replicas.owner(run.replica_id)
        if owner is None:
            raise Problem(409, "run-interrupted", f"run {run.id}'s replica is gone; the run "
                          "is being marked interrupted")
        return to_owner(call, owner)
    if not service.runs.cancel(run.id):
        raise Problem(409, "run-ended", f"run {run.id} is not running here any more")
    return json_response(run_out(run, []), 202)


@api("DELETE", "/v1/runs/{run_id}", status=204)
def delete_run(call: Call) -> Response:
    """Delete an ended run: its events and artifacts leave your storage quota."""
    with call.service.db.read() as session:
        run = owned(session, RunRow, "run", call.params["run_id"], call.principal)
    if run.status in UNFINISHED_STATUSES:
        raise Problem(409, "run-not-ended", f"run {run.id} is {run.status}; cancel it first, "
                      "then delete it", run_status=run.status)
    delete_runs(call.service, [run])
    return Response(status_code=204)


@api("GET", "/v1/runs/{run_id}/events", streams="text/event-stream")
async def run_events(call: Call) -> Response:
    """The run's events as Server-Sent Events; reconnect with `Last-Event-ID` to resume."""

    def check() -> None:
        with call.service.db.reading() as connection:
            owned_values(connection, RunRow, "run", call.params["run_id"], call.principal)

    await run_in_threadpool(check)  # the run is yours before anything else is read
    after = last_event_id(call.request)
    return StreamingResponse(
        event_stream(call.service, call.params["run_id"], after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@api("GET", "/v1/runs/{run_id}/artifacts", response=Listing)
def list_artifacts(call: Call) -> Response:
    """The files the run saved under `/output`."""
    with call.service.db.read() as session:
        run = owned(session, RunRow, "run", call.params["run_id"], call.principal)
        return json_response(Listing(items=[artifact_out(row)
                                            for row in _artifacts(session, run.id)]))


@api("GET", "/v1/runs/{run_id}/artifacts/{name:path}")
def download_artifact(call: Call) -> Response:
    """Download one artifact (an attachment, unless it is a raster image)."""
    with call.service.db.read() as session:
        run = owned(session, RunRow, "run", call.params["run_id"], call.principal)
        row = session.scalars(select(ArtifactRow).where(
            ArtifactRow.run_id == run.id, ArtifactRow.name == call.params["name"])).first()
        if row is None:
            raise not_found("artifact", call.params["name"][:200])
        root = run_directory(call.service.paths, run)
    fd = open_inside(root, row.name)
    size = os.fstat(fd).st_size
    disposition = "inline" if row.content_type in INLINE_TYPES else "attachment"
    headers = {
        "Content-Disposition": content_disposition(disposition, row.name),
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Content-Length": str(size),
    }
    return StreamingResponse(_read(fd), media_type=row.content_type, headers=headers)


def open_inside(root: Path, name: str) -> int:
    """Open `root/name` read-only, refusing `..`, absolute names and symlinks at every step."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or any(p in ("..", ".", "") for p in parts):
        raise not_found("artifact", name[:200])
    try:
        file_fd = open_artifact(root, parts)
    except OSError:
        raise not_found("artifact", name[:200]) from None
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise not_found("artifact", name[:200])
    return file_fd


def _read(fd: int) -> Iterator[bytes]:
    try:
        while chunk := os.read(fd, CHUNK):
            yield chunk
    finally:
        os.close(fd)


def current_plan(session: Session, run_id: str) -> list[Any] | None:
    """The steps of a running run's newest `plan` event (None before its first)."""
    data = session.scalar(select(EventRow.data).where(
        EventRow.run_id == run_id, EventRow.type == "plan").order_by(EventRow.seq.desc()).limit(1))
    steps = json.loads(data).get("steps") if data is not None else None
    return steps if isinstance(steps, list) else None


def run_out(run: RunRow, artifacts: list[ArtifactRow], *, plan: list[Any] | None = None) -> RunOut:
    """The API's view of a run; its plan is the stored result's, or `plan` while it runs."""
    result = dict(run.result or {})
    if plan is not None:
        result["plan"] = plan
    return RunOut(
        id=run.id, kind="execute" if run.kind == "execute" else "question",
        conversation_id=run.conversation_id, status=run.status, outcome=run_outcome(run.status),
        question=run.question, answer=run.answer, message=run.message, result=run.result,
        verified=result.get("verified") if isinstance(result.get("verified"), bool) else None,
        sources=[s for s in result.get("sources") or [] if isinstance(s, dict)],
        unsupported=[str(number) for number in result.get("unsupported") or []],
        asked=_asked(run.result), artifacts=[artifact_out(row) for row in artifacts],
        plan=[PlanStepOut.model_validate(step) for step in result.get("plan") or []],
        plan_pending=[str(step) for step in result.get("plan_pending") or []],
        parts=AnswerPartsOut.model_validate(result["parts"])
        if isinstance(result.get("parts"), dict) else None,
        mislabelled=[str(sentence) for sentence in result.get("mislabelled") or []],
        cost=result.get("cost") if isinstance(result.get("cost"), dict) else None,
        team=run.team, created_at=run.created_at,
        started_at=run.started_at, ended_at=run.ended_at,
        events_url=f"/v1/runs/{run.id}/events",
    )


def _asked(result: dict[str, Any] | None) -> str | None:
    """The question of a run that ended `needs_input` (kept in its stored result)."""
    asked = (result or {}).get("asked")
    return asked if isinstance(asked, str) else None


def artifact_out(row: ArtifactRow) -> ArtifactOut:
    """The API's view of an artifact."""
    return ArtifactOut(name=row.name, size=row.size, content_type=row.content_type,
                       url=f"/v1/runs/{row.run_id}/artifacts/{quote(row.name, safe='/')}")


def _artifacts(session: Session, run_id: str) -> list[ArtifactRow]:
    """The run's artifacts in the order it saved them."""
    return list(session.scalars(select(ArtifactRow).where(ArtifactRow.run_id == run_id)
                                .order_by(ArtifactRow.id)))
