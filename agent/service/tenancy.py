"""Tenancy: every lookup of a tenant's resource filters on the caller's principal.

A dataset, conversation or run that exists but belongs to someone else is a
404 exactly like one that does not exist, so ids cannot be probed. Ids in
paths are checked against their shape first (a malformed id is a 404 too).
Requested sandbox limits may only lower the policy's (`limits_within`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.orm import Session

from sbx.agent.service.problems import Problem, not_found
from sbx.agent.service.schemas import RequestedLimits
from sbx.agent.service.store.models import Conversation, Dataset, Run
from sbx.sandbox.limits import Limits
from sbx.sandbox.units import format_size

_ID_SHAPES = {
    "dataset": re.compile(r"^ds-[0-9a-f]{12}$"),
    "conversation": re.compile(r"^conv-[0-9a-f]{12}$"),
    "run": re.compile(r"^run-[0-9a-f]{12}$"),
}
_Row = TypeVar("_Row", Dataset, Conversation, Run)


def owned(session: Session, model: type[_Row], kind: str, ident: str, principal: str) -> _Row:
    """The row of `ident` if `principal` owns it, else 404 (the same answer either way)."""
    if not _ID_SHAPES[kind].match(ident):
        raise not_found(kind, ident[:64])
    row = session.get(model, ident)
    if row is None or row.principal != principal:
        raise not_found(kind, ident)
    return row


def dataset_paths(session: Session, ids: list[str], principal: str, root: Path
                  ) -> tuple[Path, ...]:
    """The files of the caller's datasets `ids`, in order; 404 for any that is not theirs.

    Two datasets with the same name would land on the same `/data/<name>`: 422.
    """
    paths: list[Path] = []
    seen: dict[str, str] = {}
    for ident in ids:
        row = owned(session, Dataset, "dataset", ident, principal)
        if row.name in seen and seen[row.name] != ident:
            raise Problem(422, "duplicate-dataset-name",
                          f"datasets {seen[row.name]} and {ident} are both named {row.name!r}; "
                          "the sandbox shows each at /data/<name>")
        if row.name not in seen:
            seen[row.name] = ident
            paths.append(root / row.id / row.name)
    return tuple(paths)


def limits_within(maximum: Limits, requested: RequestedLimits | None) -> Limits:
    """The policy's limits lowered as requested; a value above the policy's is a 422."""
    if requested is None:
        return maximum
    changes: dict[str, Any] = {}
    for name, value in requested.model_dump(exclude_none=True).items():
        ceiling = getattr(maximum, name)
        if value > ceiling:
            shown = format_size(ceiling) if name == "memory" else f"{ceiling:g}"
            raise Problem(422, "limit-above-policy",
                          f"limits.{name}: at most {shown} (the policy's [sandbox] {name})")
        changes[name] = value
    try:  # validated again as a whole: the engine's minima hold whatever the face checked
        return Limits.model_validate({**maximum.model_dump(), **changes})
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise Problem(422, "invalid-request", f"limits.{where}: {error['msg']}") from None
