"""The configuration step: the policy file read once, each table handed to its own layer.

One TOML file (`sbx.toml`; the packaged, fully commented default is
`tools/sbx.toml`) configures all of sbx. It is read here and nowhere else,
and split by owner, so configuration never climbs back up through a lower
layer:

    [sandbox]                  ──▶ sbx.sandbox.limits.Limits       (the container)
    [tools.*] [quotas] [audit] ──▶ sbx.tools.policy.Policy         (the gate)
    [agent] [agent.budget]     ──▶ sbx.agent.settings.AgentSettings (the loop)

Every mistake in the file is a `PolicyError` naming the file, the line and
the dotted key (`sbx.toml:12: sandbox.memory: ...`); faces report it as an
operator error. Command-line flags are applied afterwards (`with_flags`,
`with_limits`), and a bad flag is a `SettingsError` naming the flag.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sbx.agent.settings import FLAG_NAMES, AgentSettings, SettingsError, apply_flags
from sbx.sandbox.limits import Limits
from sbx.tools.custom import custom_tools
from sbx.tools.policy import Policy, PolicyError, default_policy_path
from sbx.tools.toml_lines import key_lines, line_of

_Model = TypeVar("_Model", bound=BaseModel)


@dataclass(frozen=True, kw_only=True)
class AppConfig:
    """Everything a policy file configures, typed, immutable, each part for one layer."""

    source: Path
    """The file it was read from (the packaged default when none was given)."""
    policy: Policy
    """Tools, argument rules, quotas and the audit log: the gate's part."""
    settings: AgentSettings
    """The model, the budget and context handling: the loop's part (flags applied)."""
    limits: Limits
    """The sandbox's resource and isolation limits: the container's part (flags applied)."""

    def digest(self) -> str:
        """SHA-256 of the effective configuration (canonical JSON), recorded at each run."""
        effective = {
            "policy": self.policy.model_dump(mode="json"),
            "agent": self.settings.model_dump(mode="json"),
            "sandbox": self.limits.model_dump(mode="json"),
        }
        text = json.dumps(effective, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def with_flags(self, flags: Mapping[str, Any]) -> AppConfig:
        """The agent settings with command-line flags applied (None means not given)."""
        try:
            return replace(self, settings=apply_flags(self.settings, flags))
        except ValidationError as exc:
            raise SettingsError(
                "invalid value for " + describe_validation_error(exc, prefix="--")
            ) from None

    def with_limits(self, overrides: Mapping[str, Any]) -> AppConfig:
        """The sandbox limits with command-line overrides applied (None means not given)."""
        given = {key: value for key, value in overrides.items() if value is not None}
        if not given:
            return self
        try:
            limits = Limits.model_validate({**self.limits.model_dump(), **given})
        except ValidationError as exc:
            raise SettingsError(
                "invalid value for " + describe_validation_error(exc, prefix="--")
            ) from None
        return replace(self, limits=limits)


def load_config(path: Path | None = None) -> AppConfig:
    """Read and validate the policy file once; `None` reads the packaged default."""
    source = path or default_policy_path()
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{source}: cannot read policy: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{source}: not valid TOML: {exc}") from None
    sandbox = data.pop("sandbox", {})
    agent = data.pop("agent", {})
    policy = _validate(Policy, data, (), source, text)
    try:
        custom_tools(policy)  # a bad `entry` is the operator's error now, not at the first call
    except PolicyError as exc:
        raise PolicyError(f"{source}: {exc}") from None
    return AppConfig(
        source=source,
        limits=_validate(Limits, sandbox, ("sandbox",), source, text),
        settings=_validate(AgentSettings, agent, ("agent",), source, text),
        policy=policy,
    )


def _validate(
    model: type[_Model], data: Any, table: tuple[str, ...], source: Path, text: str
) -> _Model:
    """Validate one table; a failure names the file, the line and the dotted key."""
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: [{'.'.join(table)}] must be a table")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = [*table, *(part for part in first["loc"] if isinstance(part, str | int))]
        line = line_of(key_lines(text), loc)
        where = f"{source}:{line}" if line else str(source)
        raise PolicyError(f"{where}: {describe_validation_error(exc, table=table)}") from None


def describe_validation_error(
    exc: ValidationError, *, table: tuple[str, ...] = (), prefix: str = ""
) -> str:
    """The one operator-facing wording of a pydantic error: `dotted.key: what is wrong`.

    Only the first error is spelled out (it names its key; fixing it often
    fixes the rest), followed by a count of the others. Flags pass
    `prefix="--"` so the key reads as the flag that sets it.
    """
    errors = exc.errors(include_url=False)
    first = errors[0]
    parts = [*table, *(str(part) for part in first["loc"] if isinstance(part, str | int))]
    dotted = ".".join(parts) or "(top level)"
    if prefix:
        last = parts[-1] if parts else "value"
        dotted = prefix + FLAG_NAMES.get(last, last.replace("_", "-"))
    message = "unknown key" if first["type"] == "extra_forbidden" else str(first["msg"])
    message = message.removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{dotted}: {message}{more}"
