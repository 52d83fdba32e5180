"""E2B sandboxes: each one a kept session of the door (`sbx.agent.KeptSession`).

The door keeps the session (its owner, access token, end, turn, env vars,
pause and idle release, replay after a release); an E2B sandbox adds what
E2B's API says about it: its template, metadata, code contexts and the code
interpreter's execution count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbx.agent import KeptSession, KeptSessions, SessionHost


class E2bSandbox(KeptSession):
    """One E2B sandbox: a kept session and its E2B facts."""

    def __init__(self, *, template: str, metadata: Mapping[str, str], **kept: Any) -> None:
        super().__init__(**kept)
        self.template = template
        self.metadata = dict(metadata)
        self.executions = 0
        """The code interpreter's `execution_count`."""
        self.contexts: dict[str, str] = {}
        """The code contexts created besides `default`: id to E2B working directory."""


Sandboxes = KeptSessions[E2bSandbox]


def sandboxes(host: SessionHost) -> Sandboxes:
    """The server's E2B sandboxes (ids `e2b-...`)."""
    return KeptSessions(host, E2bSandbox, prefix="e2b-")
