"""What the face needs from the server that hosts it: who a key is, what it may open.

The face knows nothing of stores or quotas. `sbx serve` answers for it
(`sbx.agent.service.e2b_host`) with the same keys, conversation slots,
runs per hour, CPU seconds and money budgets as its other faces.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sbx.agent import App, NoRecorder, RunRecorder


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """Who a request comes from, as the host authenticated its API key."""

    principal: str
    team: str | None = None
    grant: object = None
    """The host's record of the key, handed back to it with `admit`."""


@dataclass(frozen=True, kw_only=True)
class Admitted:
    """What a new sandbox gets: its `/data` files and who accounts for its executions."""

    data: tuple[Path, ...] = ()
    recorder: RunRecorder = field(default_factory=NoRecorder)


class Refused(Exception):
    """The host refuses now (401 no key, 429 a quota): the SDK's error for that status."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class E2bHost(Protocol):
    """The server the face runs in; thread-safe (called from worker threads)."""

    app: App
    output_root: Path
    idle_s: float
    """A sandbox idle this long releases its container (its state comes back on use)."""

    def authenticate(self, api_key: str) -> Tenant:
        """The tenant of a live key, or `Refused(401)`."""
        ...

    def admit(self, tenant: Tenant, sandbox_id: str) -> Admitted:
        """Let a sandbox open (a conversation slot), or `Refused(429)`."""
        ...

    def release(self, tenant: Tenant, sandbox_id: str) -> None:
        """The sandbox was killed (or timed out): free what `admit` took."""
        ...
