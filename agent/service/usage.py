"""`GET /v1/usage`: the caller's quotas and how much of each is used now.

Counted exactly as the quota checks count (`sbx.agent.core.hosting.store.quotas`), and the
money budgets as `sbx.agent.core.hosting.store.spend` sums them, so what the web page shows
is what the next request will be judged by.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import func, select
from starlette.responses import Response

from sbx.agent import DAY_S, HOUR_S, ConversationRow, RunRow, storage_used, stored_bytes, tenant_of
from sbx.agent.service.api import Call, api, json_response


class UsageOut(BaseModel):
    """Your quotas (the policy's defaults with your key's overrides) and your use of each."""

    principal: str
    quotas: dict[str, Any]
    """`max_conversations`, `runs_per_hour`, `cpu_seconds_per_day`, `dataset_bytes`,
    `upload_bytes`, `storage_bytes`."""
    used: dict[str, Any]
    """The same names: conversations open, runs in the last hour, sandbox CPU seconds in
    the last 24 hours, dataset bytes stored, bytes stored in all (datasets, artifacts,
    run events and the state snapshots of your conversations); `upload_bytes` is per file:
    not counted."""
    team: str | None = None
    """Your team (your key's, or your sign-in's); None: no team."""
    spend: dict[str, Any] = Field(default_factory=dict)
    """Money: `currency`, and `budgets`, one per key and team and per UTC day and month, each
    with `scope` (key, team), `name`, `period`, `limit` (None: no cap), `spent`,
    `estimated` (some token counts behind it were estimated) and `resets_at` (ISO UTC)."""


@api("GET", "/v1/usage", response=UsageOut)
def usage(call: Call) -> Response:
    """Your quotas and how much of each you use now."""
    tenant = tenant_of(call.service, call.key)
    quotas = tenant.quotas
    now = time.time()
    with call.service.db.read() as session:
        conversations = session.scalar(select(func.count()).select_from(ConversationRow).where(
            ConversationRow.principal == call.principal, ConversationRow.status == "active")) or 0
        runs = session.scalar(select(func.count()).select_from(RunRow).where(
            RunRow.principal == call.principal, RunRow.created_at > now - HOUR_S)) or 0
        cpu = session.scalar(select(func.coalesce(func.sum(RunRow.cpu_seconds), 0.0)).where(
            RunRow.principal == call.principal, RunRow.created_at > now - DAY_S)) or 0.0
        stored = stored_bytes(session, call.principal)
        storage = storage_used(session, call.principal)
        storage += call.service.runs.snapshot_bytes(call.principal)
        budgets = [state.as_dict() for state in tenant.spend.states(session, now)]
    return json_response(UsageOut(
        team=tenant.team, spend={"currency": tenant.spend.currency, "budgets": budgets},
        principal=call.principal, quotas=quotas.model_dump(),
        used={"max_conversations": int(conversations), "runs_per_hour": int(runs),
              "cpu_seconds_per_day": round(float(cpu), 3), "dataset_bytes": stored,
              "storage_bytes": storage},
    ))
