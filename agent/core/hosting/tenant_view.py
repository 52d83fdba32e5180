"""What tenants may read: no secret, no model endpoint, no host path, no engine error text.

Everything a tenant reads of a run comes from the store (its row: message,
answer, result; its events) or from its conversation's transcript (downloads
and exports). `TenantView` is applied at those two doors, once each:

    store      `install(db, view)`: a `before_flush` hook rewrites every `Run` and
               `EventRow` written through a session, whichever module wrote it; the
               event log applies the view itself, once, before it streams and stores
    downloads  `exports.py` passes each attachment's text through `view.text`

and every face (HTTP API, SSE, the web page, exports) reads what came out.
The view replaces the model endpoint's API key, its base URL (with and without
its `user:password@`) and those credentials alone, the secrets the policy
names (`secret_env`), and anything that looks like an OpenAI key, with
`[REDACTED]` (`tools.redact`, the audit log's rules); it replaces the host's
paths (the data directory, the audit log) with `[host]`, and drops an
artifact's host `path` (its name stays).

`incident(...)` is for failures the operator must look at (the engine, the
host, the audit log, the model endpoint): the tenant gets a plain sentence and
an id to quote; the server's log gets the id with the full detail.
`run_message(...)` words how a run ended for its tenant: the core's sentences
name the command-line flag that changes a limit, which an analyst on the page
or an API client cannot use, and a failed model request is the operator's to
fix, so it becomes an incident that still says what the endpoint answered.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import event
from sqlalchemy.orm import Session

from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import EventRow, Run
from sbx.tools.redact import REDACTED, Redactor

logger = logging.getLogger(__name__)

HOST = "[host]"
"""What a host path becomes in a tenant's view."""
_FLAG_HINT = re.compile(r"\s*\((?:[^()]*[\s(])?--[a-z][a-z0-9-]*[^()]*\)")
"""A parenthesis naming a command-line flag: `(--max-time)`, `(not retried: --max-retries is 0)`."""
_HTTP_STATUS = re.compile(r"answered HTTP (\d{3})")
_PASSING = frozenset({408, 409, 429})
"""Statuses below 500 that a later try may not get (the model client retries them too)."""
_ENDPOINT = re.compile(r"(the model endpoint) \S+")
"""The core names the URL after these words: a tenant reads no URL (not even redacted)."""


@dataclass(frozen=True, kw_only=True)
class TenantView:
    """Rewrites what a tenant reads (see the module docstring)."""

    redactor: Redactor
    """The secrets and secret-named fields, as the audit log redacts them."""
    host_paths: tuple[str, ...] = ()
    """Host paths a tenant must not see, longest first."""

    @classmethod
    def build(cls, *, api_key: str | None, base_url: str | None, secret_env: Iterable[str],
              secret_fields: Iterable[str], environ: Mapping[str, str],
              host_paths: Iterable[Path]) -> TenantView:
        """The view for one service: its endpoint, its policy's secrets, its host paths."""
        values = [api_key, *endpoint_forms(base_url)]
        redactor = Redactor.build(secret_values=values, secret_env=secret_env, environ=environ,
                                  secret_fields=secret_fields)
        # a one-part path (`/data`, `/tmp`) may be the sandbox's own: only deeper ones go
        paths = sorted({str(path) for path in host_paths if len(Path(path).parts) > 2},
                       key=len, reverse=True)
        return cls(redactor=redactor, host_paths=tuple(paths))

    def text(self, value: str) -> str:
        """One string as a tenant may read it."""
        value = self.redactor.text(value)
        for path in self.host_paths:
            if path in value:
                value = value.replace(path, HOST)
        return value

    def value(self, value: Any) -> Any:
        """A JSON-like value as a tenant may read it (an artifact's host `path` is dropped)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):  # one pass: each key and string is rewritten once
            return {self.text(str(k)): REDACTED if self.redactor.secret_field(str(k))
                    else self.value(v)
                    for k, v in value.items() if not (k == "path" and "name" in value)}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        return value


def endpoint_forms(base_url: str | None) -> list[str]:
    """The base URL as written, without its credentials, and the credentials themselves."""
    if not base_url:
        return []
    parts = urlsplit(base_url)
    forms = [base_url, base_url.rstrip("/")]
    if parts.username or parts.password:
        bare = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        forms += [urlunsplit(bare), urlunsplit(bare).rstrip("/"),
                  parts.netloc.rpartition("@")[0] + "@", parts.netloc.rpartition("@")[0]]
        forms += [secret for secret in (parts.password, parts.username) if secret]
    return forms


def install(db: Database, view: TenantView) -> None:
    """Rewrite every run row and event row as it is written to `db` (the store's door)."""

    def before_flush(session: Session, context: object, instances: object) -> None:
        for row in [*session.new, *session.dirty]:
            if isinstance(row, Run):
                _run(row, view)
            elif isinstance(row, EventRow):
                row.data = json.dumps(view.value(json.loads(row.data)), ensure_ascii=False)

    for factory in db.session_factories():
        event.listen(factory, "before_flush", before_flush)


def _run(row: Run, view: TenantView) -> None:
    if row.message:
        row.message = view.text(row.message)
    if row.answer:
        row.answer = view.text(row.answer)
    if row.result is not None:
        cleaned = view.value(row.result)
        if cleaned != row.result:
            row.result = cleaned


def incident(what: str, exc: BaseException) -> str:
    """Log a failure the operator must fix under a fresh id; the sentence a tenant sees."""
    ident = new_incident_id()
    logger.error("%s failed (incident %s): %s: %s", what, ident, type(exc).__name__, exc,
                 exc_info=exc)
    return (f"The {what} failed on the server (not because of your code or question); "
            f"quote incident {ident} to the operator")


def run_message(status: str, message: str, run_id: str) -> str:
    """How a run's end reads for its tenant (see the module docstring).

    `model_error` becomes an incident (its full message goes to the server's log under
    the id) that keeps the endpoint's HTTP status; any other message loses its flag hints
    and the endpoint's URL.
    """
    if status != "model_error":
        return _ENDPOINT.sub(r"\1", _FLAG_HINT.sub("", message))
    ident = new_incident_id()
    logger.error("run %s: the model request failed (incident %s): %s", run_id, ident,
                 _ENDPOINT.sub(r"\1", message))
    answered = _HTTP_STATUS.search(message)
    status_code = int(answered.group(1)) if answered else None
    what = (f"its service answered with an error (HTTP {status_code})" if status_code
            else "its service could not be reached, or its reply could not be used")
    if status_code is not None and status_code < 500 and status_code not in _PASSING:
        return (f"The model could not answer: {what}. Your operator has to fix this (it is not "
                f"caused by your question or data): quote incident {ident} to them.")
    return (f"The model could not answer: {what}. This is not caused by your question or data: "
            f"try again in a few minutes. If it keeps failing, quote incident {ident} to your "
            "operator.")


def new_incident_id() -> str:
    """A fresh id a tenant quotes and the server's log carries."""
    return "inc-" + uuid.uuid4().hex[:12]
