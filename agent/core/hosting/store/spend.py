"""Money budgets per principal (key) and per team, per UTC day and month, from the store.

    key    cost_per_day, cost_per_month     [service.quotas], a team's quotas, `--cost-per-day`
    team   cost_per_day, cost_per_month     [service.teams.NAME]: the team's runs together

What a budget has spent is the sum of the stored costs (`runs.cost`) of the runs
admitted since the period began (UTC midnight, the first of the month): ended
runs' costs, so a run is counted once it ends. `StoreSpend` is the core's
`SpendLimit` for runs of one principal (the loop stops a run `budget_exceeded`
before the request or tool call that would pass the tightest budget);
`check_budgets` refuses a new question, `/v1/execute` or MCP execution (429) when
a budget is spent already, with `Retry-After` and the reset time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from sbx.agent.core.config import ServiceQuotas
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.models import Run
from sbx.agent.core.problem import Problem
from sbx.agent.core.spend import Allowance, iso_utc
from sbx.agent.core.teams import TeamSettings

Period = Literal["day", "month"]
Scope = Literal["key", "team"]


def period_bounds(period: Period, now: float) -> tuple[float, float]:
    """The UTC day's (or month's) start and the next one's, as POSIX seconds."""
    today = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start = today
        return start.timestamp(), start.timestamp() + 86400.0
    start = today.replace(day=1)
    after = start.replace(year=start.year + 1, month=1) if start.month == 12 \
        else start.replace(month=start.month + 1)
    return start.timestamp(), after.timestamp()


@dataclass(frozen=True, kw_only=True)
class BudgetState:
    """One budget now: whose, which period, its limit, what was spent, when it resets."""

    scope: Scope
    """`key` (the principal's own) or `team` (the team's runs together)."""
    name: str
    """The principal (`key:alice`, `oidc:...`) or the team's name."""
    period: Period
    """`day` or `month` (UTC)."""
    limit: float | None
    """The budget (None: no cap, shown for what was spent)."""
    spent: float
    """Stored costs of the runs admitted in the period."""
    estimated: bool
    """Some of those costs rest on estimated token counts (the endpoint sent none)."""
    resets_at: float
    """The next UTC midnight, or the first of next month."""

    def describe(self, currency: str) -> str:
        """`team 'data' per day (5 EUR)`: which budget, for messages and problems."""
        whose = f"team {self.name!r}" if self.scope == "team" else f"key {self.name!r}"
        return f"{whose} per {self.period} ({self.limit:g} {currency})"

    def as_dict(self) -> dict[str, Any]:
        """For `/v1/usage` and problem documents."""
        return {"scope": self.scope, "name": self.name, "period": self.period,
                "limit": self.limit, "spent": round(self.spent, 6), "estimated": self.estimated,
                "resets_at": iso_utc(self.resets_at)}


def spent_since(session: Session, scope: Scope, name: str, since: float) -> tuple[float, bool]:
    """Stored costs of the principal's (or the team's) runs admitted since `since`.

    With them, whether any of those costs was estimated.
    """
    column = Run.team if scope == "team" else Run.principal
    total, estimated = session.execute(
        select(func.coalesce(func.sum(Run.cost), 0.0), func.max(case((Run.cost_estimated, 1),
                                                                     else_=0)))
        .where(column == name, Run.created_at >= since)).one()
    return float(total or 0.0), bool(estimated)


def budget_limits(principal: str, team: str | None, quotas: ServiceQuotas,
                  team_settings: TeamSettings | None
                  ) -> list[tuple[Scope, str, Period, float | None]]:
    """The key's and (with a team) the team's budget per day and month; None: no cap."""
    wanted: list[tuple[Scope, str, Period, float | None]] = [
        ("key", principal, "day", quotas.cost_per_day),
        ("key", principal, "month", quotas.cost_per_month),
    ]
    if team is not None:
        settings = team_settings or TeamSettings()
        wanted += [("team", team, "day", settings.cost_per_day),
                   ("team", team, "month", settings.cost_per_month)]
    return wanted


def budget_states(session: Session, *, principal: str, team: str | None, quotas: ServiceQuotas,
                  team_settings: TeamSettings | None, now: float,
                  capped_only: bool = False) -> list[BudgetState]:
    """The key's and the team's budgets for both periods, with what each has spent.

    `capped_only`: just the budgets with a limit (what a check needs).
    """
    states = []
    for scope, name, period, limit in budget_limits(principal, team, quotas, team_settings):
        if capped_only and limit is None:
            continue
        start, reset = period_bounds(period, now)
        spent, estimated = spent_since(session, scope, name, start)
        states.append(BudgetState(scope=scope, name=name, period=period, limit=limit,
                                  spent=spent, estimated=estimated, resets_at=reset))
    return states


def tightest(states: list[BudgetState]) -> BudgetState | None:
    """The capped budget with the least left (the first spent one wins ties)."""
    capped = [state for state in states if state.limit is not None]
    return min(capped, key=lambda s: (s.limit or 0.0) - s.spent) if capped else None


class StoreSpend:
    """The core's `SpendLimit` for one principal's runs: asked before each step of a run."""

    def __init__(self, db: Database, *, principal: str, team: str | None,
                 quotas: ServiceQuotas, team_settings: TeamSettings | None,
                 currency: str) -> None:
        self.db = db
        self.principal, self.team, self.quotas = principal, team, quotas
        self.team_settings, self.currency = team_settings, currency

    def states(self, session: Session, now: float | None = None, *,
               capped_only: bool = False) -> list[BudgetState]:
        """Every budget of this principal and its team now (or only those with a limit)."""
        return budget_states(session, principal=self.principal, team=self.team,
                             quotas=self.quotas, team_settings=self.team_settings,
                             now=time.time() if now is None else now, capped_only=capped_only)

    def allowance(self) -> Allowance | None:
        """What the tightest budget has left; None when no budget is capped."""
        if not self._capped():
            return None
        with self.db.read() as session:
            found = tightest(self.states(session, capped_only=True))
        if found is None:
            return None
        return Allowance(left=(found.limit or 0.0) - found.spent, currency=self.currency,
                         budget=found.describe(self.currency), resets_at=found.resets_at)

    def check(self, session: Session, now: float) -> None:
        """Refuse (429) when a budget is spent: `Retry-After` until it resets."""
        for state in self.states(session, now, capped_only=True):
            if state.limit is not None and state.spent >= state.limit:
                raise budget_exceeded(state, self.currency, now)

    def _capped(self) -> bool:
        """Any budget of this principal or its team has a limit (else nothing to query)."""
        return any(limit is not None for *_, limit in
                   budget_limits(self.principal, self.team, self.quotas, self.team_settings))


def budget_exceeded(state: BudgetState, currency: str, now: float) -> Problem:
    """429 naming the budget (key or team, day or month), its reset time and `Retry-After`."""
    seconds = max(1, int(state.resets_at - now + 0.999))
    return Problem(
        429, "budget-exceeded",
        f"the {state.describe(currency)} budget is spent ({state.spent:.4f} {currency}); "
        f"it resets at {iso_utc(state.resets_at)}",
        headers={"Retry-After": str(seconds)}, budget=state.as_dict(), currency=currency,
        resets_at=iso_utc(state.resets_at), retry_after=seconds,
    )
