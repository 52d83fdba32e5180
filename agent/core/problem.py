"""A problem: what a caller is refused, or told failed, by the hosting or the store.

    Problem(429, "quota-exceeded", "runs_per_hour: 120 runs in the last hour ...",
            headers={"Retry-After": "60"}, quota="runs_per_hour", retry_after=60)

The core and the store raise `Problem` where a request must be refused (a
quota, a budget, a full host, something missing or not the caller's); each
face renders it its own way: `sbx serve` as an RFC 9457 problem document with
the status (`sbx.agent.service.problems`), MCP and E2B as a tool or API error
with the detail. The status is HTTP's, the shared vocabulary of how a refusal
reads (429: try later; 503: busy; 413: too large); it is an `SbxError` like
every error an operator or a caller must act on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbx.sandbox.errors import SbxError


class Problem(SbxError):
    """A refusal: a status, a slug naming it, one sentence of detail, extra members."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = extra


def not_found(kind: str, ident: str) -> Problem:
    """404 for anything missing *or belonging to someone else*: the two look the same."""
    return Problem(404, "not-found", f"no {kind} {ident!r}")


def quota_exceeded(quota: str, detail: str, retry_after: float) -> Problem:
    """429 naming the quota, with `Retry-After` in whole seconds (at least 1)."""
    seconds = max(1, int(retry_after + 0.999))
    return Problem(
        429, "quota-exceeded", f"{quota}: {detail}", headers={"Retry-After": str(seconds)},
        quota=quota, retry_after=seconds,
    )


def unavailable(detail: str, retry_after: float, slug: str = "busy") -> Problem:
    """503 with `Retry-After`: the host or this replica is full, or it is shutting down."""
    seconds = max(1, int(retry_after + 0.999))
    return Problem(503, slug, detail, headers={"Retry-After": str(seconds)},
                   retry_after=seconds)
