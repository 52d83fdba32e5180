"""Sharing the host's sandboxes between keys: nobody keeps more than a share idle while others wait.

Conversations, MCP sessions and E2B sandboxes keep their sandbox between calls (up to
`idle_timeout`), so a few keys' idle sandboxes could fill the host's cap and
make every other key's next execution wait, then fail "host busy". Each
housekeeping tick, while callers wait in the host's queue (this replica's or
another sbx process's), `SandboxShare.tick` releases idle sandboxes:

    share    the host's sandbox cap divided among the keys holding sandboxes here
             plus one (the waiter is assumed to be another key), at least one
    order    the key holding the most first, its longest-idle sandbox first; a
             key at or under its share loses nothing
    count    at most one per waiting caller per tick

A released conversation, MCP session or E2B sandbox stays open: its next call restores its
state in a fresh sandbox and is told so, as after `idle_timeout`. Idle means
what it means everywhere: nobody holds the core's `Workspace.in_use()`.

The same share bounds the demand the pool is told of (`SandboxShare.expected`):
open conversations that hold no sandbox will ask for one, so the pool may warm
for them (`[pool] max_size`), but each key counts for at most its share, so one
key opening hundreds of conversations cannot make the pool warm for it alone.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from sbx.agent.core.outcomes import loss_text

if TYPE_CHECKING:
    from sbx.agent.core.hosting.host import Host
    from sbx.agent.core.hosting.runs import RunManager
    from sbx.agent.core.tool_session import ToolSession

SessionSource = Callable[[], Iterable[tuple[str, "ToolSession"]]]
"""The tool sessions a face holds here (MCP over HTTP, E2B), each with its principal."""

logger = logging.getLogger(__name__)

RELEASE_REASON = loss_text("idle_release", "idle while other keys waited for the host")


@dataclass(frozen=True, kw_only=True)
class Held:
    """One sandbox held here: whose, how long idle (None: in use), how to release it."""

    principal: str
    idle_for: float | None
    release: Callable[[], bool]
    """Removes it if it is still idle; whether it did."""


class SandboxShare:
    """Releases the idle sandboxes of keys over their share while callers wait."""

    def __init__(self, service: Host) -> None:
        self.service = service
        self._sources: list[SessionSource] = []

    def add_sessions(self, source: SessionSource) -> None:
        """Count (and release) the tool sessions `source` lists, beside the conversations."""
        self._sources.append(source)

    def held(self) -> list[Held]:
        """Every sandbox this replica holds for a conversation, an MCP session or E2B."""
        runs = self.service.runs
        held = [Held(principal=live.principal, idle_for=live.conversation.workspace.idle_for(),
                     release=partial(_release_conversation, runs, live.id))
                for live in runs.holders()]
        sessions = [held for source in self._sources for held in source()]
        for principal, session in sessions:
            if session.workspace.holds_sandbox:
                held.append(Held(principal=principal, idle_for=session.workspace.idle_for(),
                                 release=partial(session.discard_if_idle, 0.0, RELEASE_REASON)))
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
        candidates = sorted((item for item in held if item.idle_for is not None),
                            key=lambda item: (-counts[item.principal], -(item.idle_for or 0.0)))
        released = 0
        for item in candidates:
            if released >= waiting:
                break
            if counts[item.principal] <= share or not item.release():
                continue
            counts[item.principal] -= 1
            released += 1
            logger.info("released an idle sandbox of %s for a waiting caller (share %d)",
                        item.principal, share)
        return released


def _release_conversation(runs: RunManager, conversation_id: str) -> bool:
    return bool(runs.release_idle(0.0, only=frozenset({conversation_id}), reason=RELEASE_REASON))
