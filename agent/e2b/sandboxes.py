"""E2B sandboxes: each one a kept session of the door (`sbx.agent.KeptSession`), and refusals.

The door keeps the session (its owner, access token, end, turn, env vars,
pause and idle release, replay after a release); an E2B sandbox adds what
E2B's API says about it: its template, metadata and the code interpreter's
execution count (its code contexts are the session's named namespaces).
The server that hosts the face (`sbx serve`, `sbx.agent.service.e2b_host`)
is the door's `SessionHost`: it knows the keys, slots, quotas and budgets,
and refuses with `Refused`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbx.agent import KeptSession, KeptSessions, SessionHost


class Refused(Exception):
    """Refused now (401 no key, 404, 429 a quota): the SDK's error for that status."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class E2bSandbox(KeptSession):
    """One E2B sandbox: a kept session and its E2B facts."""

    def __init__(self, *, template: str, metadata: Mapping[str, str], **kept: Any) -> None:
        super().__init__(**kept)
        self.template = template
        self.metadata = dict(metadata)
        self.executions = 0
        """The code interpreter's `execution_count`."""


Sandboxes = KeptSessions[E2bSandbox]


def sandboxes(host: SessionHost) -> Sandboxes:
    """The server's E2B sandboxes (ids `e2b-...`)."""
    return KeptSessions(host, E2bSandbox, prefix="e2b-", values_as_results=True)
