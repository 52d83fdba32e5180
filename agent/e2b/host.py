"""What the face needs from the server that hosts it, and how it refuses.

The face knows nothing of stores or quotas. `sbx serve` answers for it
(`sbx.agent.service.e2b_host`, a `SessionHost` of the door) with the same
keys, conversation slots, runs per hour, CPU seconds and money budgets as its
other faces, and refuses with `Refused`.
"""

from __future__ import annotations

from sbx.agent import SessionHost

E2bHost = SessionHost
"""The server the face runs in: `authenticate` a key, `admit` and `release` a sandbox."""


class Refused(Exception):
    """Refused now (401 no key, 404, 429 a quota): the SDK's error for that status."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after
