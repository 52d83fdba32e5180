"""`/openapi.json`: built from the declared endpoints and their pydantic models, nothing else.

Every route declared with `@api` appears with its summary (the handler's
first docstring line), its path parameters, its JSON request body, its
answer, and the problem document every error uses. The upload is described
as `multipart/form-data` with one binary `file` part, the event stream as
`text/event-stream`.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from sbx.agent.service.api import Spec

_PARAM = re.compile(r"\{([a-z_]+)(?::[a-z]+)?\}")
_REF = "#/components/schemas/{model}"
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details; `quota` names the quota on 429.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"}, "title": {"type": "string"},
        "status": {"type": "integer"}, "detail": {"type": "string"},
        "quota": {"type": "string"}, "retry_after": {"type": "integer"},
        "request_id": {"type": "string"},
    },
}


def openapi_document(specs: list[Spec]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `specs`."""
    mode: dict[type[BaseModel], Literal["validation", "serialization"]] = {}
    for spec in specs:
        if spec.body is not None:
            mode[spec.body] = "validation"
        if spec.response is not None:
            mode.setdefault(spec.response, "serialization")
    refs, defs = models_json_schema(list(mode.items()), ref_template=_REF)
    schemas = {**defs.get("$defs", {}), "Problem": PROBLEM_SCHEMA}
    paths: dict[str, dict[str, Any]] = {}
    for spec in specs:
        path = _PARAM.sub(r"{\1}", spec.path)
        paths.setdefault(path, {})[spec.method.lower()] = _operation(spec, refs)
    try:
        release = version("sbx")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        release = "0"
    return {
        "openapi": "3.1.0",
        "info": {"title": "sbx", "version": release,
                 "description": "Sandboxed code execution agent: datasets, conversations, "
                                "runs with live events, artifacts."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "an API key from `sbx keys create`"}},
        },
    }


def _operation(spec: Spec, refs: dict[Any, Any]) -> dict[str, Any]:
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    answer: dict[str, Any] = {"description": spec.summary or "OK"}
    if spec.response is not None:
        answer["content"] = {"application/json": {"schema": refs[(spec.response,
                                                                  "serialization")]}}
    if spec.streams:  # also with a JSON answer: the client chooses with Accept
        answer.setdefault("content", {})[spec.streams] = {"schema": {"type": "string"}}
    operation: dict[str, Any] = {
        "operationId": spec.handler.__name__,
        "summary": spec.summary,
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PARAM.findall(spec.path)
        ],
        "responses": {str(spec.status): answer,
                      "default": {"description": "A problem", "content": problem}},
        "security": [{"bearer": []}] if spec.auth else [],
    }
    if spec.body is not None:
        operation["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": refs[(spec.body, "validation")]}}}
    elif spec.method == "POST" and spec.path == "/v1/datasets":
        operation["requestBody"] = {"required": True, "content": {"multipart/form-data": {
            "schema": {"type": "object", "required": ["file"],
                       "properties": {"file": {"type": "string", "format": "binary"}}}}}}
    return operation
