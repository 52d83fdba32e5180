"""Sharing the host's sandboxes between keys: nobody keeps more than a share idle while others wait.

Conversations and MCP sessions keep their sandbox between calls (up to
`idle_timeout`), so a few keys' idle sandboxes could fill the host's cap and
make every other key's next execution wait, then fail "host busy". Each
housekeeping tick, while callers wait in the host's queue (this replica's or
another sbx process's), `SandboxShare.tick` releases idle sandboxes:

    share    the host's sandbox cap divided among the keys holding sandboxes here
             plus one (the waiter is assumed to be another key), at least one
    order    the key holding the most first, its longest-idle sandbox first; a
             key at or under its share loses nothing
    count    at most one per waiting caller per tick

A released conversation or MCP session stays open: its next call gets a fresh
sandbox and is told that earlier variables are gone, as after `idle_timeout`.

The same share bounds the demand the pool is told of (`SandboxShare.expected`):
open conversations that hold no sandbox will ask for one, so the pool may warm
for them (`[pool] max_size`), but each key counts for at most its share, so one
key opening hundreds of conversations cannot make the pool warm for it alone.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sbx.agent.mcp.tool_session import McpSession
    from sbx.agent.mcp.tool_sessions import McpSessions
    from sbx.agent.service.core import Service

logger = logging.getLogger(__name__)

@dataclass(frozen=True, kw_only=True)
class Held:
    """One sandbox held here: whose, whether it is idle, since when."""

    principal: str
    idle: bool
    last_used: float
    conversation: str | None = None
    """The conversation holding it (else an MCP session)."""
    session: McpSession | None = None
    """The MCP session holding it (else a conversation)."""


class SandboxShare:
    """Releases the idle sandboxes of keys over their share while callers wait."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.mcp: McpSessions | None = None
        """The `/mcp` sessions, once the endpoint exists."""

    def held(self) -> list[Held]:
        """Every sandbox this replica holds for a conversation or an MCP session."""
        held = [Held(principal=live.principal, idle=live.run_id is None,
                     last_used=live.last_used, conversation=live.id)
                for live in self.service.runs.holders()]
        for session in self.mcp.live() if self.mcp is not None else []:
            holds, busy, last_used = session.holder
            if holds:
                held.append(Held(principal=session.caller.principal, idle=not busy,
                                 last_used=last_used, session=session))
        return held

    def expected(self) -> int:
        """Sandboxes this replica's open conversations will ask for, each key within its share."""
        demand = self.service.app.host_demand()
        if demand is None:
            return 0
        waiting = Counter(self.service.runs.without_sandbox())
        held = Counter(item.principal for item in self.held())
        share = max(1, demand[1] // (len(waiting | held) + 1))
        return sum(min(count, max(0, share - held[key])) for key, count in waiting.items())

    def tick(self) -> int:
        """Release what the module docstring says; how many sandboxes were released."""
        demand = self.service.app.host_demand()
        if demand is None or demand[0] == 0:
            return 0
        waiting, cap = demand
        held = self.held()
        counts = Counter(item.principal for item in held)
        share = max(1, cap // (len(counts) + 1))
        candidates = sorted((item for item in held if item.idle),
                            key=lambda item: (-counts[item.principal], item.last_used))
        released = 0
        for item in candidates:
            if released >= waiting:
                break
            if counts[item.principal] <= share or not self._release(item):
                continue
            counts[item.principal] -= 1
            released += 1
            logger.info("released an idle sandbox of %s for a waiting caller (share %d)",
                        item.principal, share)
        return released

    def _release(self, item: Held) -> bool:
        if item.session is not None:
            return item.session.discard_if_idle(0.0, item.last_used)
        if item.conversation is None:  # pragma: no cover - every Held names its holder
            return False
        only = frozenset({item.conversation})
        return bool(self.service.runs.release_idle(0.0, only=only))
