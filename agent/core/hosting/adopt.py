"""A conversation no live replica holds is taken up here, and its state restored by replay.

Its replica restarted (kill -9, a crash, an update), drained (SIGTERM) or
died: with `[restore]` on, the conversation stays `active` with its sandbox
`lost` (`Replicas`), and the next question that reaches any replica lands
here. Ownership moves first, in one transaction that locks the row
(PostgreSQL's `FOR UPDATE`; SQLite serialises writers): only one replica
adopts it, a second one finds the new owner alive and redirects to it. The
conversation is then rebuilt from its transcript on the shared data volume
(`conversations/<id>/transcript.jsonl`, where its datasets are too), under
the row's principal, model and limits, and held here; its first run replays
the recorded code (`sbx.agent.core.restore`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sbx.agent.core.hosting.host import Host
from sbx.agent.core.hosting.runs import Live
from sbx.agent.core.hosting.store.models import Conversation
from sbx.agent.core.hosting.store.notes import DbNoteStore
from sbx.agent.core.hosting.tenancy import dataset_paths
from sbx.agent.core.hosting.tenants import tenant_of_principal
from sbx.agent.core.limits_request import LimitsRequest
from sbx.agent.core.resume import Resumable, read_resumable
from sbx.agent.core.transcript import TranscriptError
from sbx.agent.core.workspace import ConversationSpec
from sbx.sandbox.errors import SbxError

logger = logging.getLogger(__name__)

_ADOPTING = threading.Lock()
"""One adoption at a time in this process: two questions at once must not open it twice."""


class NotAdopted(SbxError):
    """The conversation cannot be taken up here; the message says why (the client's 409)."""


def adopt(service: Host, conversation_id: str, *, reason: str) -> Live | None:
    """Hold the conversation here and restore it at its next run; None if another owns it now.

    `reason` is what the model and the user are told the state was lost to.
    Raises `NotAdopted` when restore is off or its record cannot be read.
    """
    if not service.config.restore.enabled:
        raise NotAdopted("restore is off ([restore] enabled = false)")
    path = service.paths.conversations / conversation_id / "transcript.jsonl"
    with _ADOPTING:
        live = service.runs.get(conversation_id)
        if live is not None:
            return live
        try:
            record = read_resumable(path)
        except TranscriptError as exc:
            raise NotAdopted(f"its record cannot be read here: {exc}") from None
        row = _take(service, conversation_id)
        if row is None:
            return None
        return _hold(service, row, record, reason=reason)


@dataclass(frozen=True, kw_only=True)
class _Taken:
    """What the row says the conversation is opened with."""

    id: str
    principal: str
    model: str
    limits: dict[str, Any]
    data: tuple[Path, ...]


def _take(service: Host, conversation_id: str) -> _Taken | None:
    """Move the row to this replica unless a live replica owns it."""
    with service.db.write() as session:
        row = session.get(Conversation, conversation_id, with_for_update=True)
        if row is None or row.status != "active":
            return None
        if row.replica_id != service.replica_id and service.replicas.owner(row.replica_id):
            return None  # another replica adopted it first: the caller redirects there
        row.replica_id, row.sandbox, row.message = service.replica_id, "none", ""
        data = dataset_paths(session, list(row.datasets or []), row.principal,
                             service.paths.datasets)
        return _Taken(id=row.id, principal=row.principal, model=row.model,
                      limits=dict(row.limits or {}), data=data)


def _hold(service: Host, row: _Taken, record: Resumable, *, reason: str) -> Live:
    """Open the conversation from its record with the row's limits and model; attach it."""
    endpoint = service.require_endpoint()
    chosen = replace(endpoint, model=row.model)
    requested = LimitsRequest.model_validate(row.limits) if row.limits else None
    directory = service.paths.conversations / row.id
    tenant = tenant_of_principal(service, row.principal)
    spec = ConversationSpec(principal=row.principal, team=tenant.team, spend=tenant.spend,
                            withheld_tools=tenant.withheld_tools,
                            output_root=directory / "output", defer_questions=True,
                            notes=DbNoteStore(service.db))
    conversation = service.app.resume(record, spec=spec, endpoint=chosen, data=row.data,
                                      limits=requested, lost_reason=reason)
    logger.info("adopted conversation %s (%s)", row.id, reason)
    return service.runs.attach(conversation, principal=row.principal)
