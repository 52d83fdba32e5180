"""Who a caller is and what applies to them: the one place `key -> principal, team, rules`.

    tenant_of(service, key)      the principal and team the authenticated key (or signed-in
                                 person) stands for, and everything the policy sets for them:
                                 quotas (the policy's defaults, the team's, the key's own
                                 overrides, in that order), money budgets (`StoreSpend`), the
                                 tools the team withholds
    team_of_principal(...)       the team of a stored principal (a conversation taken up on
                                 another replica knows only its principal)

A key's team is set when it is created (`sbx keys create NAME --team T`); a
person's comes from the provider's `team_claim` at sign-in. The data guard's
team rules are the gate's (`[guard.teams.NAME]`, applied with the team the
conversation spec carries), so no face resolves a team a second way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from sbx.agent.core.config import ServiceQuotas, ServiceSettings
from sbx.agent.core.hosting.store.keys import KeyInfo, SignedInUser, key_named
from sbx.agent.core.hosting.store.models import ApiKey, OidcIdentity
from sbx.agent.core.hosting.store.spend import StoreSpend
from sbx.agent.core.teams import TeamSettings

if TYPE_CHECKING:
    from sbx.agent.core.hosting.host import Host


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """A caller as the policy sees them."""

    principal: str
    """`key:<name>` or `oidc:<claim value>`: from the authentication alone."""
    team: str | None
    """The key's or person's team; None: in no team."""
    quotas: ServiceQuotas
    """The per-principal quotas in force (defaults, the team's, the key's overrides)."""
    team_settings: TeamSettings | None
    """What `[service.teams.<team>]` sets (None: no team, or one the policy does not name)."""
    spend: StoreSpend
    """The key's and the team's money budgets (the core's `SpendLimit`)."""

    @property
    def withheld_tools(self) -> tuple[str, ...]:
        """Tools the team's runs are not offered."""
        return tuple(self.team_settings.disabled_tools) if self.team_settings else ()


def effective_quotas(settings: ServiceSettings, key: KeyInfo) -> ServiceQuotas:
    """The policy's defaults, then the key's team's, then the key's own overrides."""
    return settings.team_quotas(key.team).model_copy(update=key.overrides)


def tenant_of(service: Host, key: KeyInfo) -> Tenant:
    """Everything that applies to the caller authenticated as `key` (see the module doc)."""
    settings = service.settings
    quotas = effective_quotas(settings, key)
    team_settings = settings.teams.get(key.team) if key.team is not None else None
    spend = StoreSpend(service.db, principal=key.principal, team=key.team, quotas=quotas,
                       team_settings=team_settings,
                       currency=service.config.settings.prices.currency)
    return Tenant(principal=key.principal, team=key.team, quotas=quotas,
                  team_settings=team_settings, spend=spend)


def tenant_of_principal(service: Host, principal: str) -> Tenant:
    """The tenant of a stored principal (a conversation taken up by another replica)."""
    kind, _, name = principal.partition(":")
    key = key_named(service.db, name) if kind == "key" else None
    if key is None:  # a signed-in person (or a key since deleted): the stored team
        with service.db.read() as session:
            team = team_of_principal(session, principal)
        key = SignedInUser(name=principal, role="user", created_at=0.0, revoked_at=None,
                           overrides={}, identity=principal, team=team)
    return tenant_of(service, key)


def team_of_principal(session: Session, principal: str) -> str | None:
    """The stored team of `principal` (its key's, or its identity's at the last sign-in)."""
    kind, _, name = principal.partition(":")
    if kind == "key":
        row = session.get(ApiKey, name)
        return row.team if row is not None else None
    if kind == "oidc":
        identity = session.get(OidcIdentity, principal)
        return identity.team if identity is not None else None
    return None
