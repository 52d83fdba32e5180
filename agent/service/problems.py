"""Every error the service answers is an RFC 9457 problem: `application/problem+json`.

A handler raises `Problem` (`sbx.agent.core.problem`, also what the core and
the store raise to refuse) or a helper builds one; the middleware and the
exception handlers turn it, and anything unexpected, into this body. A
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


def respond(problem: Problem, request_id: str | None = None) -> Response:
    """The HTTP answer of a problem."""
    return problem_response(problem.body(request_id), problem.status, problem.headers)


def problem_response(
    body: Mapping[str, Any], status: int, headers: Mapping[str, str] | None = None
) -> Response:
    """A problem document as a response (also used by the raw ASGI middleware)."""
    content = json.dumps(body, ensure_ascii=False).encode()
    return Response(content, status_code=status, headers=dict(headers or {}),
                    media_type=PROBLEM_TYPE)
