"""What a host lets an API key do in tool sessions: its quotas and datasets for MCP and E2B.

A tool session's face asks (`sbx.agent.core.session_admission.Admission`);
this answers with the same store, quotas and checks as the HTTP API (an E2B
sandbox is admitted as an MCP session is, its row's model "e2b"):

    an MCP session           a `conversations` row (its id is the session's `mcp-...`, model
                             "mcp") from its first tool call until it ends: it takes a
                             `max_conversations` slot, counted on every replica, and is
                             listed by `GET /v1/conversations` (ended with the MCP client,
                             not by `DELETE`, which does not know `mcp-` ids)
    its `/data`              the key's datasets when it opens, the newest of each name, at
                             most `MAX_SESSION_DATASETS`; never another key's
    an `execute_python`      a run of the service's one `StoreRecorder` (kind "mcp",
                             `conversation_id` = the session), as questions and
                             `/v1/execute` are: `runs_per_hour` before it starts, its CPU
                             seconds for `cpu_seconds_per_day` when it ends, one place in the
                             replica's `max_running` + `max_queued`, cancelled by the drain.
                             A call the gate refuses ran nothing and costs no run (nor does
                             `HostBusy`)
    `upload_dataset`         `upload_bytes` per file (besides the policy's `max_bytes`) and
                             `dataset_bytes`, through `store_upload`: the API's own checks
    the other tools          the policy's gate only (its per-session quotas, `max_denied`)

A refusal is `Refused` with the problem's detail, which the calling model
reads as a tool error (and the observer hears as `quota_rejected`).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy import select

from sbx.agent.core.config import ServiceQuotas
from sbx.agent.core.hosting.datasets import format_of, open_upload, safe_name, store_upload
from sbx.agent.core.hosting.host import Host
from sbx.agent.core.hosting.observer import notify
from sbx.agent.core.hosting.recorder import StoreRecorder
from sbx.agent.core.hosting.store.keys import KeyInfo
from sbx.agent.core.hosting.store.models import Conversation, Dataset
from sbx.agent.core.hosting.store.quotas import reserve_conversation, upload_too_large
from sbx.agent.core.hosting.tenants import Tenant, effective_quotas, tenant_of
from sbx.agent.core.hosting.upload_tool import StoredDataset, upload_gate_tool
from sbx.agent.core.problem import Problem
from sbx.agent.core.run_recorder import RunOutcome, RunTicket
from sbx.agent.core.session_admission import Caller, Opened, Refused
from sbx.tools.registry import ToolFailure

logger = logging.getLogger(__name__)

MCP_MODEL = "mcp"
"""The `model` of an MCP session's conversation row: the client brings its own."""
MAX_SESSION_DATASETS = 100
"""Datasets mounted into one session (the newest); each is one bind mount."""


class ServiceAdmission:
    """The `Admission` of a host's tool sessions (`/mcp`, E2B): see the module doc; thread-safe."""

    def __init__(self, service: Host, output_root: Path, *, model: str = MCP_MODEL,
                 label: str = "MCP session",
                 failure: Callable[[str], Exception] = Refused) -> None:
        self.service = service
        self.failure = failure
        """What a refusal raises, from its detail: `Refused`, or a face's own (E2B's 429)."""
        self.output_root = output_root
        self.model = model
        """The conversation row's `model` (the client brings its own): "mcp", "e2b"."""
        self.label = label
        self.datasets = ServiceDatasets(service)

    def open(self, caller: Caller, session_id: str) -> Opened:
        """Take a `max_conversations` slot (a conversation row) and mount the key's datasets."""
        service, now = self.service, time.time()
        with self._refusals(caller):
            with service.db.write() as session:
                reserve_conversation(session, caller.principal, self._quotas(caller))
                rows = session.scalars(
                    select(Dataset).where(Dataset.principal == caller.principal)
                    .order_by(Dataset.created_at.desc())
                ).all()
                chosen = _newest_per_name(rows)[:MAX_SESSION_DATASETS]
                session.add(Conversation(
                    id=session_id, principal=caller.principal, status="active",
                    replica_id=service.replica_id, datasets=[row.id for row in chosen],
                    model=self.model, limits={}, sandbox="none", message=self.label,
                    created_at=now, last_active_at=now,
                ))
        data = tuple(service.paths.datasets / row.id / row.name for row in chosen)
        rule = service.config.policy.tools.upload_dataset
        tools = (upload_gate_tool(self.datasets, caller, rule),) if rule.enabled else ()
        recorder = _RefusingRecorder(StoreRecorder(service, tenant_caller(service, caller)),
                                     self._refusals(caller))
        return Opened(data=data, tools=tools, recorder=recorder)

    def close(self, caller: Caller, session_id: str) -> None:
        """Free the slot (the row is closed) and delete the session's artifacts.

        Its artifacts were reachable only as this session's resources, which end
        with it. A store that fails here is logged: the replica's shutdown or its
        restart marks the row `interrupted` anyway.
        """
        try:
            with self.service.db.write() as session:
                row = session.get(Conversation, session_id)
                if row is not None and row.status == "active":
                    row.status, row.sandbox, row.closed_at = "closed", "none", time.time()
        except Exception:
            logger.warning("could not close the row of MCP session %s", session_id,
                           exc_info=True)
        shutil.rmtree(self.output_root / session_id, ignore_errors=True)

    def _quotas(self, caller: Caller) -> ServiceQuotas:
        return quotas_of(self.service, caller)

    def _refusals(self, caller: Caller) -> _Refusals:
        return _Refusals(self.service, caller, failure=self.failure)



class _RefusingRecorder:
    """The store's recorder, whose refusals (quotas, a full queue) MCP reads as `Refused`."""

    def __init__(self, inner: StoreRecorder, refusals: _Refusals) -> None:
        self.inner = inner
        self.refusals = refusals

    def admitted(self, ticket: RunTicket) -> None:
        """Admitted by the store, or `Refused` with the problem's detail."""
        with self.refusals:
            self.inner.admitted(ticket)

    def started(self, ticket: RunTicket) -> None:
        """The store marks it running."""
        self.inner.started(ticket)

    def finished(self, ticket: RunTicket, outcome: RunOutcome) -> None:
        """The store records the outcome."""
        self.inner.finished(ticket, outcome)

    def withdrawn(self, ticket: RunTicket) -> None:
        """Nothing ran: no run is spent."""
        self.inner.withdrawn(ticket)


class ServiceDatasets:
    """The `DatasetStore` of `/mcp`: bytes from a tool call become the caller's dataset."""

    def __init__(self, service: Host) -> None:
        self.service = service

    def name_for(self, name: str) -> str:
        """The stored name (`safe_name`), or a `ToolFailure` naming the formats taken."""
        safe = safe_name(name)
        try:
            format_of(safe)
        except Problem as exc:
            raise ToolFailure(exc.detail) from None
        return safe

    def store(self, caller: Caller, name: str, data: bytes) -> StoredDataset:
        """The `POST /v1/datasets` path for bytes already in memory: same checks, quotas."""
        quotas = quotas_of(self.service, caller)
        if len(data) > quotas.upload_bytes:
            raise ToolFailure(upload_too_large(quotas, len(data)).detail)
        target, upload = open_upload(self.service.paths.datasets, name)
        with target:
            target.write(data)
        upload.size, upload.sha256 = len(data), hashlib.sha256(data).hexdigest()
        upload.keep_head(data)
        try:
            with _Refusals(self.service, caller, failure=ToolFailure):
                row = store_upload(self.service, caller.principal, quotas, upload)
        finally:
            upload.path.unlink(missing_ok=True)
        return StoredDataset(path=self.service.paths.datasets / row.id / row.name, ident=row.id,
                             size=row.size, sha256=row.sha256, summary=row.preview)


def quotas_of(service: Host, caller: Caller) -> ServiceQuotas:
    """The policy's per-principal quotas with the caller's key's overrides."""
    if not isinstance(caller.grant, KeyInfo):  # pragma: no cover - the face always sets it
        raise TypeError("an MCP caller over HTTP carries its API key")
    return effective_quotas(service.settings, caller.grant)


def tenant_caller(service: Host, caller: Caller) -> Tenant:
    """The caller's principal, team, quotas and budgets (`sbx.agent.core.hosting.tenants`)."""
    if not isinstance(caller.grant, KeyInfo):  # pragma: no cover - the face always sets it
        raise TypeError("an MCP caller over HTTP carries its API key")
    return tenant_of(service, caller.grant)


class _Refusals:
    """A `Problem` raised inside becomes the MCP layer's refusal (the observer hears quotas)."""

    def __init__(self, service: Host, caller: Caller,
                 failure: Callable[[str], Exception] = Refused) -> None:
        self.service = service
        self.caller = caller
        self.failure = failure

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if not isinstance(exc, Problem):
            return
        quota = exc.extra.get("quota")
        if quota:
            notify(self.service.observer.quota_rejected,
                   principal=self.caller.principal, quota=str(quota))
        retry = exc.headers.get("Retry-After")
        detail = exc.detail + (f" (retry in {retry} s)" if retry else "")
        raise self.failure(detail) from None


def _newest_per_name(rows: Sequence[Dataset]) -> list[Dataset]:
    """The newest dataset of each name (rows come newest first): `/data/<name>` is unique."""
    seen: set[str] = set()
    chosen: list[Dataset] = []
    for row in rows:
        if row.name not in seen:
            seen.add(row.name)
            chosen.append(row)
    return chosen
