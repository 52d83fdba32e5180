"""Money budgets beyond one run: how much a run may still spend, asked before each step.

The core knows one interface, `SpendLimit`: "how much may this run still spend,
and whose budget is it". The loop asks it before every model request and before
every batch of tool calls (each execution), adds what the run itself has spent
so far and what the next request would cost, and stops the run with
`budget_exceeded` when that passes the allowance. A face with a store
implements it (the service: sums of stored run costs per key and per team, per
UTC day and month, `sbx.agent.core.hosting.store.spend`); the CLI has none and keeps the
per-run `max_cost` (`sbx.agent.core.budget`).

The allowance is asked for again at every step, so runs of the same key or team
that ended meanwhile count; runs still running count only when they end (a
budget can be passed by the runs in flight at once, never by a run after them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from sbx.agent.core.cost import Tariff
from sbx.agent.core.state import Ending, RunState


@dataclass(frozen=True, kw_only=True)
class Allowance:
    """What a run may still spend under the tightest budget that applies to it."""

    left: float
    """Money left in that budget before this run's own spending (0 or less: spent)."""
    currency: str
    """The price table's currency, which budgets are in."""
    budget: str
    """Which budget it is, for a person: `team 'data' per day (5 EUR)`."""
    resets_at: float
    """POSIX seconds when it resets (the next UTC midnight, or the first of next month)."""


class SpendLimit(Protocol):
    """The budgets above the run (a key's, a team's), as the face's store keeps them."""

    def allowance(self) -> Allowance | None:
        """The tightest budget's allowance now; None when no budget applies."""
        ...


def spend_ending(
    state: RunState, tariff: Tariff | None, limit: SpendLimit | None, *, next_cost: float = 0.0
) -> Ending | None:
    """`budget_exceeded` when the run's cost, plus the next step's, passes what `limit` allows."""
    if limit is None:
        return None
    allowed = limit.allowance()
    if allowed is None:
        return None
    spent = tariff.cost(state.usage, state.sandbox).total if tariff is not None else 0.0
    over = (spent + next_cost > allowed.left) if next_cost else spent >= allowed.left
    if not over and allowed.left > 0:
        return None
    what = "The next request" if next_cost else "More tool calls"
    return Ending(
        status="budget_exceeded",
        message=(
            f"{what} would pass the {allowed.budget} budget: {max(allowed.left, 0.0):.4f} "
            f"{allowed.currency} was left and this run spent {spent:.4f}; it resets at "
            f"{iso_utc(allowed.resets_at)}"
        ),
    )


def iso_utc(when: float) -> str:
    """`2026-12-02T00:00:00Z`: a reset time as people and clients read it."""
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
