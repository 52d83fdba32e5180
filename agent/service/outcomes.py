"""`Observer`: the one place where the service reports what happened, for metrics and traces.

The service calls these hooks at the points where an outcome is known, and
nowhere else computes one:

    request_finished   every HTTP request (the gateway): method, path, status, duration
    quota_rejected     a request refused by a per-principal quota (429 / 413)
    event              every transcript event of a run, as it is stored (tool calls with
                       their status, model replies with their usage, ...)
    run_finished       a conversation's run ended: status, duration, sandbox totals
    execution_finished a `POST /v1/execute` call ended: its `ExecutionResult`

The default observer does nothing. Metrics (Prometheus counters) and
OpenTelemetry spans subclass it and are passed to `Service.open`; a hook must
be quick and must not raise (a failure is logged and ignored).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any


class Observer:
    """No-op hooks; override the ones you need."""

    def request_finished(
        self, *, method: str, path: str, status: int, duration_s: float, request_id: str
    ) -> None:
        """An HTTP request was answered (or failed)."""

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


def notify(hook: Any, **kwargs: Any) -> None:
    """Call one observer hook; a failing hook is logged, never allowed to fail the request."""
    try:
        hook(**kwargs)
    except Exception:
        logging.getLogger(__name__).warning("observer hook failed", exc_info=True)
