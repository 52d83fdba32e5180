"""Which datasets a running `/v1/execute` call holds, so that none is deleted under it.

A conversation's datasets are on its row; an execution's are put on its run
row while it runs (`result = {"datasets": [...]}`, replaced by the result when
it ends), inserted in the transaction that resolved the files, under the
principal's lock. `delete_dataset` takes the same lock and looks at both, on
every replica and either store.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from sbx.agent.core.hosting.store.models import Conversation, Run

HELD = "datasets"
"""The key of a running execution's `result` that lists the dataset ids it mounts."""


def datasets_held(ids: list[str]) -> dict[str, Any]:
    """The `result` a running execution's row carries: the datasets it mounts."""
    return {HELD: list(ids)}


def dataset_user(session: Session, principal: str, dataset_id: str) -> str | None:
    """What uses the dataset now (an open conversation or a running execution), else None."""
    conversations = session.scalars(select(Conversation).where(
        Conversation.principal == principal, Conversation.status == "active")).all()
    for conversation in conversations:
        if dataset_id in (conversation.datasets or []):
            return f"open conversation {conversation.id}; delete that conversation first"
    running = session.scalars(select(Run).where(
        Run.principal == principal, Run.kind == "execute", Run.status == "running")).all()
    for run in running:
        held = (run.result or {}).get(HELD)
        if isinstance(held, list) and dataset_id in held:
            return f"running execution {run.id}; wait for it to end"
    return None
