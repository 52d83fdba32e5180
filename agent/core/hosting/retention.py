"""Deleting runs: one run at a tenant's request, and every run older than the retention.

A run's stored events, its artifact rows and its artifact files go with it:
the files live under `executions/<run id>/` (a `/v1/execute` call) or
`conversations/<conversation id>/output/<run id>/` (a question), both names
the server made. A run that has not ended is never deleted (cancel it first).
`DELETE /v1/runs/{id}` and the housekeeper's retention duty both come here.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import TYPE_CHECKING

from sqlalchemy import delete, select

from sbx.agent.core.hosting.store.models import UNFINISHED_STATUSES, ArtifactRow, EventRow, Run

if TYPE_CHECKING:
    from pathlib import Path

    from sbx.agent.core.hosting.host import DataPaths, Host

logger = logging.getLogger(__name__)
BATCH = 200
"""Runs the retention duty deletes per tick (the rest wait for the next)."""


def run_directory(paths: DataPaths, run: Run) -> Path:
    """Where a run's artifacts are kept."""
    if run.kind == "execute":
        return paths.executions / run.id
    return paths.conversations / (run.conversation_id or "-") / "output" / run.id


def delete_runs(service: Host, runs: list[Run]) -> int:
    """Delete ended runs: their events, artifact rows, run rows, then their files."""
    ended = [run for run in runs if run.status not in UNFINISHED_STATUSES]
    if not ended:
        return 0
    ids = [run.id for run in ended]
    with service.db.write() as session:
        session.execute(delete(EventRow).where(EventRow.run_id.in_(ids)))
        session.execute(delete(ArtifactRow).where(ArtifactRow.run_id.in_(ids)))
        session.execute(delete(Run).where(Run.id.in_(ids), Run.status.not_in(UNFINISHED_STATUSES)))
    for run in ended:
        shutil.rmtree(run_directory(service.paths, run), ignore_errors=True)
    return len(ended)


def expire_runs(service: Host, now: float | None = None) -> int:
    """Delete up to `BATCH` runs that ended more than `[service] retention` seconds ago."""
    cutoff = (time.time() if now is None else now) - service.settings.retention
    with service.db.read() as session:
        old = list(session.scalars(
            select(Run).where(Run.status.not_in(UNFINISHED_STATUSES), Run.ended_at.is_not(None),
                              Run.ended_at < cutoff).order_by(Run.ended_at).limit(BATCH)))
        session.expunge_all()
    deleted = delete_runs(service, old)
    if deleted:
        logger.info("retention: deleted %d run(s) that ended before %.0f", deleted, cutoff)
    return deleted
