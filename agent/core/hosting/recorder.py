"""`StoreRecorder`: the service's `RunRecorder`, one for questions, `/v1/execute` and MCP alike.

The core tells it each run's life (`sbx.agent.core.run_recorder`); this is where
that life touches the store, written once:

    admitted    a place among the replica's `max_running` + `max_queued` (else 503), the
                run's token registered (so a cancel or the drain reaches it), the
                `runs_per_hour` quota reserved, the money budgets checked (429 when the
                key's or team's is spent) and a `queued` run row with the team, in one
                transaction
    started     the row is `running`
    finished    status, message, answer, result, CPU seconds (`cpu_seconds_per_day`), its
                cost (the budgets; `/metrics` spend by team), the
                artifacts' rows, the conversation's (or MCP session's) row touched, and
                the run's events not stored yet (its `run_end` among them) in the same
                transaction; only then does its end reach the event streams, so a client
                that sees it may ask again at once; the observer told; the place given back
    withdrawn   nothing ran (the host's sandbox cap, a call the gate refused): the row is
                deleted, so the attempt costs no run; the place given back

A question must be the only run of its conversation that has not ended (409).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.orm import Session

from sbx.agent.core.hosting.observer import notify
from sbx.agent.core.hosting.store.datasets_held import datasets_held
from sbx.agent.core.hosting.store.db import lock_principal
from sbx.agent.core.hosting.store.models import UNFINISHED_STATUSES, Conversation, Run
from sbx.agent.core.hosting.store.quotas import reserve_run
from sbx.agent.core.hosting.tenant_view import incident
from sbx.agent.core.problem import Problem
from sbx.agent.core.run_recorder import RunOutcome, RunTicket
from sbx.agent.core.teams import metrics_team

if TYPE_CHECKING:
    from sbx.agent.core.hosting.host import Host
    from sbx.agent.core.hosting.tenants import Tenant


class StoreRecorder:
    """Runs of one caller (their quotas) recorded in the service's store; thread-safe."""

    def __init__(self, service: Host, tenant: Tenant,
                 datasets: tuple[str, ...] = ()) -> None:
        self.service = service
        self.tenant = tenant
        self.quotas = tenant.quotas
        self.datasets = datasets
        """Ids of the datasets a program mounts: its row holds them while it runs."""

    def admitted(self, ticket: RunTicket) -> None:
        """Take a place, reserve the run, write its row; a `Problem` refuses it."""
        service = self.service
        service.runs.admit(ticket.run_id, ticket.cancel)
        try:
            with service.db.write() as session:
                lock_principal(session, ticket.principal)  # see datasets_held
                if ticket.kind == "question" and ticket.conversation_id is not None:
                    busy = session.connection().scalar(
                        _UNFINISHED, {"conversation_id": ticket.conversation_id})
                    if busy is not None:
                        raise Problem(409, "question-running",
                                      f"run {busy} of this conversation has not ended; one "
                                      "question at a time (cancel it, or wait for its run_end "
                                      "event)")
                now = time.time()
                reserve_run(session, ticket.principal, self.quotas, now,
                            service.runs.snapshot_bytes(ticket.principal))
                self.tenant.spend.check(session, now)
                session.add(Run(
                    id=ticket.run_id, kind=ticket.kind, principal=ticket.principal,
                    team=self.tenant.team,
                    conversation_id=ticket.conversation_id, replica_id=service.replica_id,
                    status="queued", question=ticket.question, message="", cpu_seconds=0.0,
                    created_at=now, result=datasets_held(list(self.datasets)) if self.datasets
                    else None,
                ))
        except BaseException:
            service.runs.release(ticket.run_id)
            raise

    def started(self, ticket: RunTicket) -> None:
        """The row is `running` now."""
        with self.service.db.write() as session:
            session.connection().execute(_STARTED, {"run_id": ticket.run_id, "at": time.time()})
        self.service.events.hub.publish(ticket.run_id)

    def finished(self, ticket: RunTicket, outcome: RunOutcome, *,
                 last_event: Mapping[str, Any] | None = None) -> None:
        """Store the outcome and the artifacts; wake the stream; tell the observer.

        `last_event` (a question's `run_end` or `run_error`, held back by the caller) is
        numbered now and stored in the same transaction as the status; the event log
        feeds it to the streams only once that commits, so a client that sees it may
        ask again at once.
        """
        from sbx.agent.core.hosting.runs import artifact_row  # the store's own helper

        service = self.service
        if outcome.error is not None:  # the detail goes to the operator's log only
            outcome = replace(outcome, message=incident(f"run {ticket.run_id}", outcome.error),
                              error=None)
        try:
            if last_event is not None:
                service.events.append(ticket.run_id, ticket.principal, last_event)
            events = service.events.closing(ticket.run_id)
            with service.db.write() as session:
                row = session.get(Run, ticket.run_id)
                if row is not None:
                    row.status, row.message = outcome.status, outcome.message
                    row.answer, row.result = outcome.answer, _result(outcome)
                    row.cpu_seconds, row.ended_at = outcome.cpu_seconds, time.time()
                    row.cost, row.cost_estimated = outcome.cost, outcome.cost_estimated
                if ticket.output_dir is not None:
                    for path in outcome.artifacts:
                        artifact = artifact_row(path, ticket.output_dir, ticket.run_id,
                                                ticket.principal)
                        if artifact is not None:
                            session.add(artifact)
                self._touch(session, ticket, outcome.holds_sandbox)
                service.events.stage(session, events)  # its end with its status
            service.events.ended(ticket.run_id)  # committed: the streams see the end
            if outcome.cost > 0:
                notify(service.observer.spent, amount=outcome.cost,
                       team=metrics_team(self.tenant.team, service.settings.teams),
                       currency=self.tenant.spend.currency)
            if ticket.kind == "question":
                notify(service.observer.run_finished, principal=ticket.principal,
                       run_id=ticket.run_id, status=outcome.status, result=outcome.result)
            else:
                execution = (outcome.result or {}).get("execution")
                notify(service.observer.execution_finished, principal=ticket.principal,
                       run_id=ticket.run_id, status=outcome.status, execution=execution)
        finally:
            service.events.ended(ticket.run_id)  # after a failure too (no-op when done)
            service.runs.release(ticket.run_id)

    def withdrawn(self, ticket: RunTicket) -> None:
        """Nothing ran: delete the row (no run is spent), give the place back."""
        try:
            with self.service.db.write() as session:
                session.execute(delete(Run).where(Run.id == ticket.run_id))
        finally:
            self.service.events.ended(ticket.run_id)
            self.service.runs.release(ticket.run_id)

    @staticmethod
    def _touch(session: Session, ticket: RunTicket, holds_sandbox: bool) -> None:
        """The conversation's (or MCP session's) row: last active now, its sandbox's state."""
        if ticket.conversation_id is not None:
            session.connection().execute(_TOUCHED, {
                "conversation_id": ticket.conversation_id, "at": time.time(),
                "sandbox_state": "held" if holds_sandbox else "none"})


_UNFINISHED = (select(Run.id).where(Run.conversation_id == bindparam("conversation_id"),
                                   Run.status.in_(UNFINISHED_STATUSES)).limit(1))
_STARTED = (update(Run).where(Run.id == bindparam("run_id"))
            .values(status="running", started_at=bindparam("at")))
_TOUCHED = (update(Conversation)
            .where(Conversation.id == bindparam("conversation_id"), Conversation.status == "active")
            .values(last_active_at=bindparam("at"), sandbox=bindparam("sandbox_state")))
"""The hot path's statements, built once: building one again for each run cost more CPU than
SQLite spends running it. They write no text a tenant reads (the run's message, answer and
result go through the ORM, where the tenant view rewrites them)."""


def _result(outcome: RunOutcome) -> dict[str, object] | None:
    """The stored result: the totals or the execution, and the question of `needs_input`."""
    if outcome.question is None:
        return outcome.result
    return {**(outcome.result or {}), "asked": outcome.question}
