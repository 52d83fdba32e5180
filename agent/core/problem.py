"""A problem: what a caller is refused or told failed, as an RFC 9457 problem document.

    {"type": "https://sbx.dev/problems/quota-exceeded", "title": "Quota exceeded",
     "status": 429, "detail": "runs_per_hour: 120 runs in the last hour ...",
     "quota": "runs_per_hour", "request_id": "..."}

The core and the store raise `Problem` where a request must be refused (a
quota, a budget, a full host); each face renders it its own way: `sbx serve`
as `application/problem+json` with the status (`sbx.agent.service.problems`),
MCP as a tool error with the detail. The status is HTTP's, the shared
vocabulary of how a refusal reads (429: try later; 503: busy; 413: too large).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_BASE = "https://sbx.dev/problems/"
_TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
    405: "Method not allowed", 408: "Request timeout", 409: "Conflict",
    413: "Content too large", 415: "Unsupported media type", 422: "Invalid request",
    429: "Quota exceeded", 500: "Internal error", 503: "Service unavailable",
}


class Problem(Exception):
    """An error answer: status, a slug for `type`, one sentence of detail, extra members."""

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

    def body(self, request_id: str | None = None) -> dict[str, Any]:
        """The problem document."""
        document: dict[str, Any] = {
            "type": _BASE + self.slug,
            "title": _TITLES.get(self.status, "Error"),
            "status": self.status,
            "detail": self.detail,
            **self.extra,
        }
        if request_id:
            document["request_id"] = request_id
        return document


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
