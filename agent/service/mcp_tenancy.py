"""What the `/mcp` face lets an API key do: the service's quotas and datasets for MCP sessions.

The MCP layer asks (`sbx.agent.mcp.admission.Admission`); this answers with
the same store, quotas and checks as the HTTP API:

    an MCP session           a `conversations` row (its id is the session's `mcp-...`, model
                             "mcp") from its first tool call until it ends: it takes a
                             `max_conversations` slot, counted on every replica, and is
                             listed by `GET /v1/conversations` (ended with the MCP client,
                             not by `DELETE`, which does not know `mcp-` ids)
    its `/data`              the key's datasets when it opens, the newest of each name, at
                             most `MAX_SESSION_DATASETS`; never another key's
    an `execute_python`      a `runs` row (kind "mcp", `conversation_id` = the session):
                             `runs_per_hour` before it starts and its CPU seconds for
                             `cpu_seconds_per_day` when it ends; one place in the replica's
                             `max_running` + `max_queued`. A call the gate refuses ran
                             nothing and costs no run (nor does `HostBusy`)
    `upload_dataset`         `upload_bytes` per file (besides the policy's `max_bytes`) and
                             `dataset_bytes`, through `store_upload`: the API's own checks
    the other tools          the policy's gate only (its per-session quotas, `max_denied`)

A refusal is `Refused` with the problem's detail, which the calling model
reads as a tool error (and the observer hears as `quota_rejected`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy import delete, select

from sbx.agent.core.config import ServiceQuotas
from sbx.agent.mcp.admission import Caller, Opened, Refused
from sbx.agent.mcp.upload import StoredDataset, upload_gate_tool
from sbx.agent.service.core import Service
from sbx.agent.service.datasets import store_upload
from sbx.agent.service.outcomes import notify
from sbx.agent.service.problems import Problem
from sbx.agent.service.quotas import (
    effective_quotas,
    reserve_conversation,
    reserve_run,
    upload_too_large,
)
from sbx.agent.service.store.keys import KeyInfo
from sbx.agent.service.store.models import Conversation, Dataset, Run
from sbx.agent.service.uploads import HEAD_BYTES, Upload, format_of, safe_name
from sbx.sandbox.errors import HostBusy
from sbx.sandbox.session import new_run_id
from sbx.tools.outcome import ToolOutcome
from sbx.tools.registry import ToolFailure

logger = logging.getLogger(__name__)

MCP_MODEL = "mcp"
"""The `model` of an MCP session's conversation row: the client brings its own."""
MAX_SESSION_DATASETS = 100
"""Datasets mounted into one session (the newest); each is one bind mount."""
_NOTHING_RAN = ("invalid", "denied", "unknown", "halted")


class ServiceAdmission:
    """The `Admission` of `sbx serve`'s `/mcp` (see the module docstring); thread-safe."""

    def __init__(self, service: Service, output_root: Path) -> None:
        self.service = service
        self.output_root = output_root
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
                    model=MCP_MODEL, limits={}, sandbox="none", message="MCP session",
                    created_at=now, last_active_at=now,
                ))
        data = tuple(service.paths.datasets / row.id / row.name for row in chosen)
        rule = service.config.policy.tools.upload_dataset
        tools = (upload_gate_tool(self.datasets, caller, rule),) if rule.enabled else ()
        return Opened(data=data, tools=tools)

    def run(self, caller: Caller, session_id: str, call: Callable[[], ToolOutcome]) -> ToolOutcome:
        """One execution as a run: admitted, reserved, recorded with its CPU seconds."""
        service, run_id = self.service, new_run_id()
        with self._refusals(caller):
            service.runs.admit()
        try:
            with self._refusals(caller), service.db.write() as session:
                now = time.time()
                reserve_run(session, caller.principal, self._quotas(caller), now)
                session.add(Run(
                    id=run_id, kind="mcp", principal=caller.principal,
                    conversation_id=session_id, replica_id=service.replica_id,
                    status="running", question="", message="", cpu_seconds=0.0,
                    created_at=now, started_at=now,
                ))
            try:
                outcome = call()
            except HostBusy:  # nothing ran: the attempt costs no run of the hourly quota
                self._forget(run_id)
                raise
            except BaseException as exc:
                self._record(run_id, session_id, "error", f"{type(exc).__name__}: {exc}", 0.0)
                raise
            self._finished(caller, run_id, session_id, outcome)
            return outcome
        finally:
            service.runs.release()

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
        return _Refusals(self.service, caller)

    def _finished(self, caller: Caller, run_id: str, session_id: str,
                  outcome: ToolOutcome) -> None:
        if outcome.execution is None and outcome.status in _NOTHING_RAN:
            self._forget(run_id)  # the gate refused it: nothing ran, no run is spent
            return
        status = outcome.status if outcome.status != "ok" else (
            "error" if outcome.failed else "ok")
        execution = outcome.execution
        cpu = (execution.cpu_seconds or 0.0) if execution is not None else 0.0
        message = outcome.text.splitlines()[0] if outcome.text else ""
        self._record(run_id, session_id, status, message, cpu)
        notify(self.service.observer.execution_finished, principal=caller.principal,
               run_id=run_id, status=status,
               execution=execution.model_dump(mode="json") if execution is not None else None)

    def _record(self, run_id: str, session_id: str, status: str, message: str,
                cpu: float) -> None:
        with self.service.db.write() as session:
            row = session.get(Run, run_id)
            if row is not None:
                row.status, row.message, row.cpu_seconds = status, message[:2000], cpu
                row.ended_at = time.time()
            conversation = session.get(Conversation, session_id)
            if conversation is not None and conversation.status == "active":
                conversation.last_active_at, conversation.sandbox = time.time(), "held"

    def _forget(self, run_id: str) -> None:
        with self.service.db.write() as session:
            session.execute(delete(Run).where(Run.id == run_id))


class ServiceDatasets:
    """The `DatasetStore` of `/mcp`: bytes from a tool call become the caller's dataset."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def name_for(self, name: str) -> str:
        """The stored name (`uploads.safe_name`), or a `ToolFailure` naming the formats taken."""
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
        path = self.service.paths.datasets / f".upload-{secrets.token_hex(8)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(path, flags, 0o600), "wb") as target:
            target.write(data)
        upload = Upload(path=path, filename=name, size=len(data),
                        sha256=hashlib.sha256(data).hexdigest(), head=data[:HEAD_BYTES])
        try:
            with _Refusals(self.service, caller, failure=ToolFailure):
                row = store_upload(self.service, caller.principal, quotas, upload)
        finally:
            path.unlink(missing_ok=True)
        return StoredDataset(path=self.service.paths.datasets / row.id / row.name, ident=row.id,
                             size=row.size, sha256=row.sha256, summary=row.preview)


def quotas_of(service: Service, caller: Caller) -> ServiceQuotas:
    """The policy's per-principal quotas with the caller's key's overrides."""
    if not isinstance(caller.grant, KeyInfo):  # pragma: no cover - the face always sets it
        raise TypeError("an MCP caller over HTTP carries its API key")
    return effective_quotas(service.settings.quotas, caller.grant)


class _Refusals:
    """A `Problem` raised inside becomes the MCP layer's refusal (the observer hears quotas)."""

    def __init__(self, service: Service, caller: Caller,
                 failure: type[Exception] = Refused) -> None:
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
            notify(self.service.observer.quota_rejected, principal=self.caller.principal,
                   quota=str(quota))
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
