"""`[service.teams.NAME]`: what the policy sets for a team, beside its principals' own rules.

    [service.teams.data]
    cost_per_day = 5.0             the team's shared money budgets, in [agent.prices]' currency
    cost_per_month = 50.0
    disabled_tools = ["http_get"]  tools the team's runs are never offered (the policy's others)
    quotas = { runs_per_hour = 30 }  per-principal quota defaults for the team's members

A key belongs to a team when it was created with `--team NAME`; a person signed in
through the provider when `[service.oidc] team_claim` holds the team's name. The
data guard's per-team rules are the gate's (`[guard.teams.NAME]`). A team named
by a key but absent here is still that key's team (audited, its spend summed),
with no budget or rule of its own; `/metrics` labels it `none`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from sbx.tools.policy import BUILTIN_TOOLS, Policy

TEAM_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
"""What a team's name may be (the same shape as a key's name)."""
NO_TEAM: Final = "none"
"""The `/metrics` label of runs in no team, or in one the policy does not name."""


class TeamSettings(BaseModel):
    """One team's budgets, tool rules and quota defaults (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cost_per_day: float | None = Field(default=None, ge=0)
    """Money the whole team may spend per UTC day (runs' stored costs, summed); None: no cap."""
    cost_per_month: float | None = Field(default=None, ge=0)
    """Money the whole team may spend per UTC calendar month; None: no cap."""
    disabled_tools: list[str] = Field(default_factory=list, max_length=100)
    """Tools the policy enables that this team's runs are not offered (unknown names: error)."""
    quotas: dict[str, Any] = Field(default_factory=dict)
    """`[service.quotas]` values that replace the defaults for each member of the team (a
    key's own overrides still win)."""


def check_team_names(teams: dict[str, TeamSettings]) -> dict[str, TeamSettings]:
    """Refuse a team name that could not be a key's `--team` (it names metrics labels too)."""
    for name in teams:
        if not TEAM_NAME.match(name):
            raise ValueError(f"team {name!r}: use 1-63 of a-z, 0-9, '.', '_', '-' "
                             "(starting with a letter or digit)")
    return teams


def metrics_team(team: str | None, teams: dict[str, TeamSettings]) -> str:
    """The team's `/metrics` label: its name if the policy names it, else `none` (bounded)."""
    return team if team is not None and team in teams else NO_TEAM


def withhold(policy: Policy, names: Sequence[str]) -> Policy:
    """`policy` with the tools `names` disabled (a team's `disabled_tools`); the rest as is."""
    if not names:
        return policy
    tools = policy.tools
    builtin = {name: getattr(tools, name).model_copy(update={"enabled": False})
               for name in names if name in BUILTIN_TOOLS}
    custom = {name: rule.model_copy(update={"enabled": False}) if name in names else rule
              for name, rule in tools.custom.items()}
    return policy.model_copy(update={"tools": tools.model_copy(update={**builtin,
                                                                      "custom": custom})})
