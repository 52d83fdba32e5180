"""Cost in money: the policy's price table applied to what a run measurably used.

    [agent.prices]                       currency = "EUR"
    [agent.prices.models."gpt-4o*"]      input = 2.5, output = 10.0   (per million tokens)
    [agent.prices.sandbox]               cpu_second = 0.00005, gb_second = 0.00001

A run's cost is its tokens at its model's price (the first pattern that
matches the model name, exact names first) plus its sandbox time: CPU seconds
from the container's cgroup, and GB-seconds as each execution's peak memory
times its wall time. Token counts the endpoint did not send are estimated and
the cost says so (`estimated`); a model without a price costs nothing for its
tokens and the cost says that too (`priced: false`), so a missing price is
visible rather than a silent zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sbx.agent.core.state import SandboxUsage
from sbx.agent.model.reply import TokenUsage

PER_TOKENS = 1_000_000
"""Model prices are per this many tokens (as providers list them)."""


class ModelPrice(BaseModel):
    """What one model's tokens cost, per million."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    input: float = Field(ge=0)
    """Price of a million prompt tokens."""
    output: float = Field(ge=0)
    """Price of a million completion tokens."""


class SandboxPrice(BaseModel):
    """What sandbox time costs."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    cpu_second: float = Field(default=0.0, ge=0)
    """Price of one CPU second the sandbox used (its cgroup's figure)."""
    gb_second: float = Field(default=0.0, ge=0)
    """Price of one GB (GiB) of peak memory held for one second of execution."""


class Prices(BaseModel):
    """`[agent.prices]`: the currency, a price per model (name or pattern), the sandbox's."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    currency: str = Field(default="USD", min_length=1, max_length=8)
    """Shown beside every amount; budgets are in it too."""
    models: dict[str, ModelPrice] = Field(default_factory=dict)
    """By model name, or an fnmatch pattern (`gpt-4o*`); an exact name wins over patterns."""
    sandbox: SandboxPrice = SandboxPrice()
    """Sandbox CPU seconds and GB-seconds."""

    def tariff(self, model: str) -> Tariff:
        """The prices that apply to a run of `model`."""
        price = self.models.get(model)
        if price is None:
            price = next((p for pattern, p in self.models.items()
                          if fnmatchcase(model, pattern)), None)
        return Tariff(currency=self.currency, model=price, sandbox=self.sandbox)


@dataclass(frozen=True, kw_only=True)
class Cost:
    """What a run cost, in the policy's currency."""

    model: float
    """Its tokens."""
    sandbox: float
    """Its sandbox time (CPU seconds and GB-seconds)."""
    currency: str
    """The price table's currency."""
    estimated: bool = False
    """Some token count was estimated (the endpoint sent none, or an unusable one)."""
    priced: bool = True
    """The model had a price; False: its tokens were counted as free."""

    @property
    def total(self) -> float:
        """Model plus sandbox."""
        return self.model + self.sandbox

    def as_dict(self) -> dict[str, Any]:
        """For the transcript, `--json` and the service's run resource."""
        return {"total": round(self.total, 6), "model": round(self.model, 6),
                "sandbox": round(self.sandbox, 6), "currency": self.currency,
                "estimated": self.estimated, "priced": self.priced}

    def describe(self) -> str:
        """One line for a person: `0.0123 EUR (estimated)`."""
        notes = [note for note, on in (("estimated", self.estimated),
                                       ("model unpriced", not self.priced)) if on]
        suffix = f" ({', '.join(notes)})" if notes else ""
        return f"{self.total:.4f} {self.currency}{suffix}"


@dataclass(frozen=True, kw_only=True)
class Tariff:
    """The prices one run pays: its model's and the sandbox's."""

    currency: str
    """The price table's currency."""
    model: ModelPrice | None
    """The model's price, None when the table has none for it."""
    sandbox: SandboxPrice
    """The sandbox's prices."""

    def cost(self, usage: TokenUsage, sandbox: SandboxUsage) -> Cost:
        """What `usage` tokens and `sandbox` time cost."""
        tokens = 0.0
        if self.model is not None:
            tokens = (usage.prompt_tokens * self.model.input
                      + usage.completion_tokens * self.model.output) / PER_TOKENS
        time = (sandbox.cpu_seconds * self.sandbox.cpu_second
                + sandbox.gb_seconds * self.sandbox.gb_second)
        return Cost(model=tokens, sandbox=time, currency=self.currency,
                    estimated=usage.estimated, priced=self.model is not None)

    def prompt(self, tokens: int) -> float:
        """What sending `tokens` prompt tokens would cost (before a request is made)."""
        return tokens * self.model.input / PER_TOKENS if self.model is not None else 0.0
