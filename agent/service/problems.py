"""Every error the service answers is an RFC 9457 problem: `application/problem+json`.

    {"type": "https://sbx.dev/problems/quota-exceeded", "title": "Quota exceeded",
     "status": 429, "detail": "runs_per_hour: 120 runs in the last hour ...",
     "quota": "runs_per_hour", "request_id": "..."}

A handler raises `Problem` (the core's refusal, also what the hosting and
the store raise) or a helper builds one; the middleware and the exception
handlers turn it, and anything unexpected, into this document. A
traceback never reaches a client: an unexpected error is logged server-side
with the request id, and the client gets a 500 that names that id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

from sbx.agent import Problem as Problem
from sbx.agent import not_found as not_found
from sbx.agent import quota_exceeded as quota_exceeded
from sbx.agent import unavailable as unavailable

PROBLEM_TYPE = "application/problem+json"
_BASE = "https://sbx.dev/problems/"
_TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
    405: "Method not allowed", 408: "Request timeout", 409: "Conflict",
    413: "Content too large", 415: "Unsupported media type", 422: "Invalid request",
    429: "Quota exceeded", 500: "Internal error", 503: "Service unavailable",
}


def document(problem: Problem, request_id: str | None = None) -> dict[str, Any]:
    """The problem document of a refusal."""
    body: dict[str, Any] = {
        "type": _BASE + problem.slug,
        "title": _TITLES.get(problem.status, "Error"),
        "status": problem.status,
        "detail": problem.detail,
        **problem.extra,
    }
    if request_id:
        body["request_id"] = request_id
    return body


def respond(problem: Problem, request_id: str | None = None) -> Response:
    """The HTTP answer of a problem."""
    return problem_response(document(problem, request_id), problem.status, problem.headers)


def problem_response(
    body: Mapping[str, Any], status: int, headers: Mapping[str, str] | None = None
) -> Response:
    """A problem document as a response (also used by the raw ASGI middleware)."""
    content = json.dumps(body, ensure_ascii=False).encode()
    return Response(content, status_code=status, headers=dict(headers or {}),
                    media_type=PROBLEM_TYPE)
