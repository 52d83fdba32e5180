"""A conversation as a notebook, script or report (`sbx export`'s code), and its transcript.

    GET /v1/conversations/{id}/export?format=ipynb|py|md   the runs that have ended
    GET /v1/conversations/{id}/transcript                   JSON lines, the client's view

Both are downloads (`Content-Disposition: attachment`) named after the
conversation id (a name the server made). The export reads the
conversation's transcript up to its last ended run, exactly as `sbx export`
does (`agent.export`): a run still going is left out. The transcript is
the transcript file's events, each reduced to what the events stream shows
(`public_event`: no host paths, no model endpoint); a line still being
written at the end is left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import select
from starlette.responses import Response

from sbx.agent import EXPORT_FORMATS as FORMATS
from sbx.agent import (
    UNFINISHED_STATUSES,
    ConversationRow,
    RecordError,
    RunRow,
    TranscriptError,
    owned,
    parse_event,
    public_event,
    read_record,
)
from sbx.agent import export_transcript as export
from sbx.agent.service.api import Call, api
from sbx.agent.service.disposition import content_disposition
from sbx.agent.service.problems import Problem

MEDIA_TYPES = {
    "ipynb": "application/x-ipynb+json",
    "py": "text/x-python; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
}


@api("GET", "/v1/conversations/{conversation_id}/export")
def export_conversation(call: Call) -> Response:
    """Download the conversation's ended runs as a notebook (`?format=ipynb`), `py` or `md`."""
    fmt = call.request.query_params.get("format", "ipynb")
    chosen = next((known for known in FORMATS if known == fmt), None)
    if chosen is None:
        raise Problem(422, "invalid-request", f"format: one of {', '.join(FORMATS)}")
    ident, last = _last_ended_run(call)
    if last is None:
        raise Problem(409, "nothing-to-export", "no run of this conversation has ended yet")
    path = _transcript(call, ident)
    try:
        text = export(
            read_record(path, until_run=last), chosen,
            artifact_link=lambda host: artifact_url(path.parent / "output", host),
        )
    except (TranscriptError, RecordError) as exc:
        raise Problem(409, "transcript-unreadable", f"the transcript cannot be exported: "
                      f"{str(exc).replace(str(path), 'transcript')[:300]}") from None
    return _attachment(call, text, f"{ident}.{chosen}", MEDIA_TYPES[chosen])


@api("GET", "/v1/conversations/{conversation_id}/transcript")
def download_transcript(call: Call) -> Response:
    """Download the conversation's transcript as JSON lines, as the event stream shows it."""
    ident, _ = _last_ended_run(call)
    path = _transcript(call, ident)
    output_root = path.parent / "output"
    lines = []
    for raw in _lines(path):
        try:
            event = parse_event(json.loads(raw))
        except ValueError:
            break  # a line being written (the last): what came before is whole
        if event is None:
            continue
        view = public_event(event, output_dir=output_root / (event.run_id or "-"))
        lines.append(json.dumps(view, ensure_ascii=False))
    text = "\n".join(lines) + ("\n" if lines else "")
    return _attachment(call, text, f"{ident}.jsonl", "application/x-ndjson")


def artifact_url(output_root: Path, host_path: str) -> str | None:
    """The artifact route of a file under the conversation's output root (None elsewhere).

    The report is read away from the server: it links charts by the API's URL, never by
    the server's own path.
    """
    try:
        run_id, *name = Path(host_path).relative_to(output_root).parts
    except ValueError:
        return None
    if not name:
        return None
    return f"/v1/runs/{quote(run_id, safe='')}/artifacts/{quote('/'.join(name))}"


def _last_ended_run(call: Call) -> tuple[str, str | None]:
    """(the caller's conversation id, its last ended run id or None); 404 if not theirs."""
    with call.service.db.read() as session:
        row = owned(session, ConversationRow, "conversation", call.params["conversation_id"],
                    call.principal)
        last = session.scalar(
            select(RunRow.id)
            .where(RunRow.conversation_id == row.id, RunRow.status.not_in(UNFINISHED_STATUSES))
            .order_by(RunRow.created_at.desc()).limit(1))
        return row.id, last


def _transcript(call: Call, ident: str) -> Path:
    path = call.service.paths.conversations / ident / "transcript.jsonl"
    if not path.is_file():
        raise Problem(409, "nothing-to-export", "this conversation has no transcript yet")
    return path


def _lines(path: Path) -> list[bytes]:
    try:
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    except OSError:
        raise Problem(409, "transcript-unreadable", "the transcript cannot be read") from None


def _attachment(call: Call, text: str, filename: str, media_type: str) -> Response:
    """A download, as the tenant may read it (`tenant_view`: no secret, no host path)."""
    text = call.service.tenant_view.text(text)
    return Response(text.encode("utf-8"), media_type=media_type, headers={
        "Content-Disposition": content_disposition("attachment", filename),
    })
