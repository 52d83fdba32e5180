"""The policy's `[guard]` table: what the data guard removes before text leaves for the model.

    [guard]                          every principal
      cards, secrets                 on by default (checksum-valid card numbers, key shapes)
      emails, phones, ibans          off by default: the operator turns them on
      mask_columns, drop_columns     column-name patterns (fnmatch, case-insensitive)
      schema_only                    previews and summaries show columns, never rows
    [guard.teams.NAME]               overrides for the principals of team NAME
    [guard.principals."PATTERN"]     overrides for principals matching PATTERN

The team's override applies first (a key's team, or a signed-in person's from the
provider's claim: `sbx serve` only), then principal overrides in the file's order,
each over the last, for every pattern the principal matches (`fnmatch`, so
`key:team-a-*` or `os:*`): a principal's own rule beats its team's.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from pydantic import BaseModel, ConfigDict, Field


class GuardRules(BaseModel):
    """The rules the guard applies for one principal."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    cards: bool = True
    """Replace payment card numbers (13 to 19 digits, a card network's first digit, a valid
    Luhn checksum) by `[card]`. On by default; turning it off is reported by `sbx doctor`."""
    secrets: bool = True
    """Replace API-key and private-key shapes by `[secret]`. On by default (`sbx doctor`
    reports it off)."""
    emails: bool = False
    """Replace e-mail addresses by `[email]`."""
    phones: bool = False
    """Replace phone numbers (international `+...`, or `(555) 123-4567` shapes) by `[phone]`."""
    ibans: bool = False
    """Replace IBANs with a valid mod-97 checksum by `[iban]`."""
    mask_columns: list[str] = Field(default_factory=list)
    """Column names (fnmatch patterns, case-insensitive) whose cells previews and summaries
    show as `[masked]`."""
    drop_columns: list[str] = Field(default_factory=list)
    """Column names (patterns) that previews and summaries leave out entirely."""
    schema_only: bool = False
    """Previews and data summaries show columns and counts, never rows."""


class GuardOverride(BaseModel):
    """`[guard.principals."PATTERN"]`: only the keys given replace the table's."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    cards: bool | None = None
    """See `GuardRules.cards`."""
    secrets: bool | None = None
    """See `GuardRules.secrets`."""
    emails: bool | None = None
    """See `GuardRules.emails`."""
    phones: bool | None = None
    """See `GuardRules.phones`."""
    ibans: bool | None = None
    """See `GuardRules.ibans`."""
    mask_columns: list[str] | None = None
    """See `GuardRules.mask_columns`."""
    drop_columns: list[str] | None = None
    """See `GuardRules.drop_columns`."""
    schema_only: bool | None = None
    """See `GuardRules.schema_only`."""


class GuardPolicy(GuardRules):
    """`[guard]`: the rules for every principal, and overrides by principal pattern."""

    principals: dict[str, GuardOverride] = Field(default_factory=dict)
    """Overrides for the principals (`key:...`, `os:...`, `oidc:...`) matching each pattern."""
    teams: dict[str, GuardOverride] = Field(default_factory=dict)
    """Overrides for the principals of each team (by the team's exact name)."""

    def for_principal(self, principal: str, team: str | None = None) -> GuardRules:
        """The rules for `principal` of `team`: the table, the team's, then matching patterns."""
        values = GuardRules.model_validate(
            self.model_dump(exclude={"principals", "teams"})
        ).model_dump()
        if team is not None and team in self.teams:
            values.update(self.teams[team].model_dump(exclude_none=True))
        for pattern, override in self.principals.items():
            if fnmatchcase(principal.lower(), pattern.lower()):
                values.update(override.model_dump(exclude_none=True))
        return GuardRules.model_validate(values)

    def weakened(self) -> list[str]:
        """The default-on detectors this policy turns off, anywhere (for `sbx doctor`)."""
        off = [name for name in ("cards", "secrets") if not getattr(self, name)]
        for pattern, override in self.principals.items():
            off += [f"{name} for {pattern!r}" for name in ("cards", "secrets")
                    if getattr(override, name) is False]
        for team, override in self.teams.items():
            off += [f"{name} for team {team!r}" for name in ("cards", "secrets")
                    if getattr(override, name) is False]
        return off
