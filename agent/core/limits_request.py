"""`LimitsRequest`: the one way a face asks for other sandbox limits for a run.

The operator's policy (`[sandbox]`, `AppConfig.limits`) is the ceiling. A
person at the terminal (`sbx exec --memory 256m`), an HTTP client (a body's
`limits`) or an MCP client may ask for less, never for more: `within`
applies a request only when every field tightens the policy and refuses
anything else with one `LimitRefused` that names the knob and the ceiling.

What "tighter" means per knob:

    memory, cpus, pids, timeout   at most the policy's value
    network                       `none` always; `bridge` only if the policy opens it
    runtime                       the policy's; or gVisor (`runsc`) in place of `runc`

Only `runsc` is known to isolate more than `runc`: any other runtime, even
one the engine has registered, is as open as it was built, so it must be the
policy's own. A runtime the engine lacks is still the engine's error at the
start, never a fall-back.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sbx.agent.core.config import describe_validation_error
from sbx.agent.core.settings import SettingsError
from sbx.sandbox.limits import (
    MAX_TIMEOUT_S,
    MIN_MEMORY,
    Bytes,
    Cpus,
    Limits,
    Seconds,
    memory_floor,
)
from sbx.sandbox.units import at_most_seconds, format_duration, format_size

SHARED_KERNEL_RUNTIME = "runc"
"""The default runtime: the container shares the host's kernel."""
STRONGER_RUNTIME = "runsc"
"""gVisor: a user-space kernel in front of the host's; a request may move `runc` to it."""
NUMERIC_KNOBS = ("memory", "cpus", "pids", "timeout")
"""Knobs whose request must be at most the policy's value."""


class LimitRefused(SettingsError):
    """A requested limit is above the policy's ceiling (or opens what the policy keeps closed)."""

    def __init__(self, knob: str, reason: str) -> None:
        super().__init__(f"{knob}: {reason}")
        self.knob = knob
        """The field asked for (`memory`, `network`, ...)."""
        self.reason = reason
        """Why, naming the ceiling: `at most 512 MiB (the policy's [sandbox] memory)`."""

    def describe(self, prefix: str) -> str:
        """The message as a face names the knob: `--memory: ...` or `limits.memory: ...`."""
        return f"{prefix}{self.knob}: {self.reason}"


class LimitTooLow(LimitRefused):
    """A requested memory is below the least a sandbox starts in (under the runtime asked for)."""


class LimitsRequest(BaseModel):
    """Per-run sandbox limits a face asks for; None means "the policy's"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory: Bytes | None = None
    """Memory limit, e.g. `"256m"` (at most the policy's)."""
    cpus: Cpus | None = None
    """CPU quota, e.g. `"0.5"` (at most the policy's)."""
    pids: int | None = Field(default=None, ge=16, le=65536)
    """Most processes plus threads at once (at most the policy's)."""
    timeout: Annotated[Seconds, AfterValidator(at_most_seconds(MAX_TIMEOUT_S))] | None = None
    """Wall-clock limit of one execution, e.g. `"10s"` (at most the policy's)."""
    runtime: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9._-]{0,63}$")
    """OCI runtime: the policy's, or `runsc` (gVisor) when the policy's is `runc`."""
    network: Literal["none", "bridge"] | None = None
    """`none` always; `bridge` only when the policy's network is `bridge`."""

    @classmethod
    def parse(cls, values: dict[str, Any], *, prefix: str = "") -> LimitsRequest:
        """A request from a face's raw values (None: not given); bad values are a SettingsError.

        The error names the field as the face spells it (`prefix="--"` for flags).
        """
        try:
            return cls.model_validate({k: v for k, v in values.items() if v is not None})
        except ValidationError as exc:
            raise SettingsError(
                "invalid value for " + describe_validation_error(exc, prefix=prefix)
            ) from None

    def changes(self) -> dict[str, Any]:
        """The fields asked for."""
        return self.model_dump(exclude_none=True)

    def within(self, ceiling: Limits) -> Limits:
        """The policy's limits with this request applied; `LimitRefused` if it would loosen them."""
        changes = self.changes()
        for knob, value in changes.items():
            refusal = _refusal(knob, value, ceiling)
            if refusal is not None:
                raise LimitRefused(knob, refusal)
        applied = ceiling.model_copy(update=changes)
        floor = memory_floor(applied.runtime)
        if applied.memory < floor:  # the sandbox would die at its start: say so now
            where = f" under {applied.runtime}" if floor != MIN_MEMORY else ""
            raise LimitTooLow("memory", f"at least {format_size(floor)} (the least a sandbox "
                                        f"starts in{where})")
        return applied

    def over(self, base: Limits) -> Limits:
        """`base` with this request applied and no ceiling: only for the operator's own probes.

        `sbx doctor` and `sbx selftest` test the host as the operator configures
        it (they start no run under a policy), so they may ask for anything `Limits` accepts.
        """
        return Limits.model_validate({**base.model_dump(), **self.changes()})


def _refusal(knob: str, value: Any, ceiling: Limits) -> str | None:
    """Why `knob = value` loosens `ceiling`, naming the ceiling; None when it tightens it."""
    allowed = getattr(ceiling, knob)
    source = f"the policy's [sandbox] {knob}"
    if knob in NUMERIC_KNOBS:
        if value <= allowed:
            return None
        return f"at most {_shown(knob, allowed)} ({source})"
    if knob == "network":
        if value == "none" or allowed == value:
            return None
        return f"'{value}' is more open than {source} = '{allowed}'"
    if value == allowed or (allowed == SHARED_KERNEL_RUNTIME and value == STRONGER_RUNTIME):
        return None
    extra = f" or '{STRONGER_RUNTIME}'" if allowed == SHARED_KERNEL_RUNTIME else ""
    return f"'{value}' is not allowed: only '{allowed}'{extra} ({source})"


def _shown(knob: str, value: Any) -> str:
    """A ceiling written the way the policy writes it."""
    if knob == "memory":
        return format_size(int(value))
    if knob == "timeout":
        return format_duration(float(value))
    return f"{value:g}"
