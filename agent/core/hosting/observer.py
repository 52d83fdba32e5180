"""`Observer`: the one place where a replica reports what happened, for metrics and traces.

The hosting and its faces call these hooks at the points where an outcome is
known, and nowhere else computes one:

    request_finished   every HTTP request (the gateway): method, path, route template,
                       status, duration, principal, bytes in and out
    quota_rejected     a request refused by a per-principal quota (429 / 413)
    event              every transcript event of a run, as it is stored (tool calls with
                       their status, model replies with their usage, ...)
    run_finished       a conversation's run ended: status, duration, sandbox totals
    execution_finished a `POST /v1/execute` call ended: its `ExecutionResult`
    spent              a run of any kind ended with a cost: the amount, its team's label

The default observer does nothing. The HTTP face's metrics and access log
subclass it; `Observers` hands every hook to several. A hook must be quick and must not
raise (a failure is logged and ignored).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

UNMATCHED = "(unmatched)"
"""The route of a request no route took (unknown path, or refused before routing)."""


class Observer:
    """No-op hooks; override the ones you need."""

    def request_finished(
        self, *, method: str, path: str, status: int, duration_s: float, request_id: str,
        route: str = UNMATCHED, principal: str | None = None, bytes_in: int = 0,
        bytes_out: int = 0,
    ) -> None:
        """An HTTP request was answered (or failed).

        `route` is the matched route's template (`/v1/runs/{run_id}`), `UNMATCHED`
        when no route took the request; `principal` is None before authentication.
        """

    def quota_rejected(self, *, principal: str, quota: str) -> None:
        """A request was refused by a per-principal quota."""

    def event(self, *, principal: str, run_id: str, event: Mapping[str, Any]) -> None:
        """A run's transcript event was stored (the client's view of it)."""

    def run_finished(
        self, *, principal: str, run_id: str, status: str, result: Mapping[str, Any] | None
    ) -> None:
        """A conversation's run ended (`result` is `RunResult.as_dict()` when there is one)."""

    def execution_finished(
        self, *, principal: str, run_id: str, status: str, execution: Mapping[str, Any] | None
    ) -> None:
        """A `/v1/execute` call ended (`execution` is the `ExecutionResult` as JSON)."""

    def spent(self, *, team: str, currency: str, amount: float) -> None:
        """A run ended having cost `amount`; `team` is a label the policy bounds (or `none`)."""


class Observers(Observer):
    """Several observers as one: each hook goes to each, a failing one never stops the rest."""

    def __init__(self, *observers: Observer) -> None:
        self.observers = observers

    def request_finished(self, **kwargs: Any) -> None:
        """To each observer."""
        self._each("request_finished", kwargs)

    def quota_rejected(self, **kwargs: Any) -> None:
        """To each observer."""
        self._each("quota_rejected", kwargs)

    def event(self, **kwargs: Any) -> None:
        """To each observer."""
        self._each("event", kwargs)

    def run_finished(self, **kwargs: Any) -> None:
        """To each observer."""
        self._each("run_finished", kwargs)

    def execution_finished(self, **kwargs: Any) -> None:
        """To each observer."""
        self._each("execution_finished", kwargs)

    def spent(self, **kwargs: Any) -> None:
        """To each observer."""
        self._each("spent", kwargs)

    def _each(self, hook: str, kwargs: dict[str, Any]) -> None:
        for observer in self.observers:
            notify(getattr(observer, hook), **kwargs)


def notify(hook: Any, **kwargs: Any) -> None:
    """Call one observer hook; a failing hook is logged, never allowed to fail the request."""
    try:
        hook(**kwargs)
    except Exception:
        logging.getLogger(__name__).warning("observer hook failed", exc_info=True)
