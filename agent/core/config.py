"""The configuration step: the policy file read once, each table handed to its own layer.

One TOML file (`sbx.toml`; the packaged, fully commented default is
`tools/sbx.toml`) configures all of sbx. It is read here and nowhere else,
and split by owner, so configuration never climbs back up through a lower
layer:

    [sandbox]                  ──▶ sbx.sandbox.limits.Limits       (the container)
    [tools.*] [quotas] [audit] ──▶ sbx.tools.policy.Policy         (the gate)
    [agent] [agent.budget]     ──▶ sbx.agent.core.settings.AgentSettings (the loop)
    [service] [service.quotas] ──▶ ServiceSettings (below)            (`sbx serve` only)
    [service.oidc]             ──▶ OidcSettings: the web page's sign-in through a provider
    [restore]                  ──▶ RestoreSettings (below) (state replay)
    [pool]                     ──▶ PoolSettings (below) (warm containers)

A table the file leaves out (`[tools]`, `[sandbox]`, `[agent]`, ...) takes the
packaged default's, so a file holding only the table to change changes only it.
Every mistake in the file is a `PolicyError` naming the file, the line and
the dotted key (`sbx.toml:12: sandbox.memory: ...`); faces report it as an
operator error. Command-line flags are applied afterwards (`with_flags`), and
a bad flag is a `SettingsError` naming the flag; a face's per-run limits come
in one way, a `LimitsRequest` (`limited`), only ever below `[sandbox]`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sbx.agent.core.settings import FLAG_NAMES, AgentSettings, SettingsError, apply_flags
from sbx.agent.core.teams import TeamSettings, check_team_names
from sbx.sandbox.config import MODULE_NAME
from sbx.sandbox.limits import Bytes, Limits, Seconds, Wait
from sbx.tools.custom import custom_tools
from sbx.tools.policy import Policy, PolicyError, default_policy_path
from sbx.tools.toml_lines import key_lines, line_of

if TYPE_CHECKING:
    from sbx.agent.core.limits_request import LimitsRequest

_Model = TypeVar("_Model", bound=BaseModel)
ModuleName = Annotated[str, Field(pattern=f"^{MODULE_NAME.pattern}$", max_length=200)]
"""A dotted module name, as `import` takes it (the sandbox layer's own check)."""


class PoolSettings(BaseModel):
    """The operator's warm-pool knobs (`[pool]`); no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(default=0, ge=0, le=1024)
    """Warm containers kept ready with no demand (with `max_size` 0: always exactly this many)."""
    max_size: int = Field(default=0, ge=0, le=1024)
    """Most warm containers when the size follows demand: leases taken in about the last
    `window`, plus (`sbx serve`) open conversations that hold no sandbox; 0: a fixed size."""
    window: Seconds = Field(default=60.0, gt=0, le=86_400)
    """How far back arrivals count (the decayed rate's time constant), and so how long the
    pool stays grown after a burst before idle containers are removed."""
    refill_delay: Wait = Field(default=2.0, le=60)
    """How long a refill may wait after a take while the next arrival is still served warm
    or unlikely that soon, so it does not compete with the taker's first questions; 0: at
    once."""
    memory_budget: Bytes = 2 * 1024**3
    """Bytes of memory limits (`[sandbox] memory` each) the warm containers reserve at most
    together; the host's caps bound them too."""

    @property
    def keeps_warm(self) -> bool:
        """Whether any container is kept warm at all (a key to warm is needed)."""
        return self.size > 0 or self.max_size > 0


class RestoreSettings(BaseModel):
    """The operator's switch and bounds for restore by replay (`[restore]`); no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    """Rebuild a lost sandbox's state by replaying the conversation's successful executions;
    false: the next question starts empty and the model is told so."""
    max_cells: int = Field(default=100, ge=0, le=10_000)
    """Most executions one replay re-runs; a conversation with more is not restored."""
    cpu_seconds: float = Field(default=120.0, ge=0)
    """Sandbox CPU seconds a replay may use in all; checked after each cell."""
    snapshot_bytes: int = Field(default=32 * 2**20, ge=0)
    """Largest snapshot of a conversation's state (its variables and files, taken inside its
    sandbox when it is released for idleness) the host keeps; 0: no snapshots, replay alone.
    A state larger than this, or than `max_artifact_bytes`, is restored by replay."""
    wall_time: Seconds = 300.0
    """Wall-clock seconds a replay may take in all; checked after each cell (one cell is also
    bounded by the sandbox's own `timeout`)."""
    preimport: tuple[ModuleName, ...] = Field(
        default=("sklearn.ensemble", "matplotlib.pyplot"), max_length=16)
    """Modules a restore-ready container imports past the data stack: a snapshot taken in a
    conversation that had one's package imported (a fitted model, a figure) is loaded in such
    a container, so the restore does not wait for the import (`sklearn.ensemble`: 0.7 s)."""
    ready: int = Field(default=1, ge=0, le=64)
    """Most restore-ready containers kept at once by one process (each `sbx serve` worker),
    only while released conversations that want one wait (each costs a warm container's
    memory and about 1.5 s of CPU to build); 0: none, a restore imports the modules itself."""


class ServiceQuotas(BaseModel):
    """Per-principal defaults of `sbx serve` (`[service.quotas]`); each API key may override them.

    Past one, the service answers 429 with `Retry-After` and a problem body naming the quota
    (an upload larger than `upload_bytes` is 413: retrying cannot help).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_conversations: int = Field(default=4, ge=0, le=10_000)
    """Conversations open at once (each may hold a sandbox); deleting one frees its slot."""
    runs_per_hour: int = Field(default=120, ge=0, le=1_000_000)
    """Questions and `/v1/execute` calls started in any rolling hour."""
    cpu_seconds_per_day: float = Field(default=3600.0, ge=0)
    """Sandbox CPU seconds used in any rolling 24 hours; checked before each run starts."""
    dataset_bytes: Bytes = 1024**3
    """Bytes of uploaded datasets stored at once."""
    upload_bytes: Bytes = 100 * 1024**2
    """Largest single upload; the stream is cut (413) as soon as it passes this. It also
    bounds the bytes of one key's uploads in progress at once (429 past it)."""
    storage_bytes: Bytes = 5 * 1024**3
    """Bytes stored at once: datasets, run artifacts and stored run events together; past
    it new runs and uploads are refused (429) until runs or datasets are deleted."""
    cost_per_day: float | None = Field(default=None, ge=0)
    """Money one principal's runs may cost per UTC day, in `[agent.prices]`' currency (None:
    no cap); a run that would pass it stops `budget_exceeded`, the next is refused (429)."""
    cost_per_month: float | None = Field(default=None, ge=0)
    """Money one principal's runs may cost per UTC calendar month (None: no cap)."""


class OidcSettings(BaseModel):
    """Sign-in to the web page through the organization's OpenID Connect provider.

    `[service.oidc]`; `sbx.agent.service.web.oidc` uses it. API keys keep working beside it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(min_length=1, max_length=512)
    """The provider's issuer URL, exactly as its discovery document and ID tokens say it
    (https; plain http only for a provider on this machine)."""
    client_id: str = Field(min_length=1, max_length=255)
    """This server's client id at the provider (the ID token's audience)."""
    client_secret_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The environment variable holding the client secret (never the secret in this file)."""
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email"], max_length=20)
    """Scopes asked for; `openid` must be among them."""
    principal_claim: str = Field(default="sub", min_length=1, max_length=64)
    """The claim whose value makes the principal `oidc:<value>` (`sub`, or e.g. `email`)."""
    role_claim: str | None = Field(default=None, min_length=1, max_length=64)
    """A claim (a string or a list, e.g. `groups`) whose values can grant the admin role."""
    admin_values: list[str] = Field(default_factory=list, max_length=100)
    """Values of `role_claim` that make the person an admin; anyone else is a user."""
    team_claim: str | None = Field(default=None, min_length=1, max_length=64)
    """A claim (a string or a list, e.g. `groups`) whose first value naming a team of
    `[service.teams]` makes the person a member of it; none matching: no team."""
    redirect_url: str | None = Field(default=None, max_length=512)
    """The callback URL registered at the provider (default: this server's own URL, from
    `--advertise-url` or the request, + `/web/oidc/callback`)."""
    timeout: Seconds = 10.0
    """Seconds each request to the provider may take."""

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        parts = urlsplit(value)
        local = parts.hostname in ("127.0.0.1", "localhost", "::1")
        if parts.scheme != "https" and not (parts.scheme == "http" and local):
            raise ValueError("must be an https URL (http only for a provider on this machine)")
        if parts.query or parts.fragment or not parts.netloc:
            raise ValueError("must be a plain URL without query or fragment")
        return value

    @field_validator("scopes")
    @classmethod
    def _openid_scope(cls, value: list[str]) -> list[str]:
        if "openid" not in value:
            raise ValueError("must include 'openid'")
        if any(not scope or any(c.isspace() for c in scope) for scope in value):
            raise ValueError("each scope is one word")
        return value


MAX_WORKERS = 32
"""Most worker processes of one `sbx serve`: past a few per core they only add memory."""


class ServiceSettings(BaseModel):
    """How `sbx serve` behaves (`[service]`): sizes, timeouts, queue, replicas; no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    idle_timeout: Seconds = 120.0
    """Seconds a conversation with no run keeps its sandbox; the next question restores its
    state by replay (`[restore]`), or starts empty and is told so."""
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    """Worker processes `sbx serve` runs on its one address (`--workers`): each a replica over
    the same store, so the service uses more than one core. The warm pool's sizes (`[pool]`)
    are the host's, shared among them; `max_running` and `max_queued` are each worker's."""
    max_running: int = Field(default=8, ge=1, le=1024)
    """Runs executing at once in one replica (each holds a worker thread); each worker of
    `workers` is one."""
    max_queued: int = Field(default=64, ge=0, le=100_000)
    """Runs waiting for a worker; past it a question gets 503 with `Retry-After`."""
    max_in_flight: int = Field(default=4, ge=1, le=10_000)
    """`/v1/execute` calls of one key in flight at once on a replica, while they wait for the
    host's capacity and while they run (streamed ones until their stream ends); past it 429."""
    max_body: Bytes = 1024**2
    """Largest JSON request body (uploads are bounded by the upload quota instead)."""
    client_timeout: Seconds = 30.0
    """Seconds a client may take to send a request's head (then the connection is closed),
    and may pause between two chunks of its body (then 408); its whole body must arrive
    within twice this plus 1 s per 16 KiB (else the connection is closed)."""
    client_connections: int = Field(default=64, ge=1, le=100_000)
    """Connections one client address may hold open at once; the next gets 503. Behind a
    proxy named in `trusted_proxies`, the requests in progress of one forwarded client."""
    trusted_proxies: list[str] = Field(default_factory=list, max_length=256)
    """Reverse proxies (addresses or CIDR networks) whose `X-Forwarded-For` is believed:
    their requests count against the client the nearest of them saw (none: every peer is
    its own client, and a proxy's clients share its `client_connections`)."""
    mcp_sessions: int = Field(default=8, ge=1, le=1000)
    """MCP transport sessions (`initialize` on `/mcp`) one key may hold open at once on a
    replica; a request that would open another is 429 (the replica's limit is 1000)."""
    max_question_chars: int = Field(default=20_000, ge=1, le=1_000_000)
    """Longest question accepted."""
    models: list[str] = Field(default_factory=list)
    """Models a conversation may ask for besides the configured one (none: only that one)."""
    key_cache: Seconds = Field(default=2.0, le=300)
    """Seconds a replica trusts an API key it has looked up before it asks the store again:
    a key revoked by `sbx keys revoke` or on another replica is refused within this."""
    heartbeat: Seconds = 2.0
    """Seconds between a replica's heartbeats in the store."""
    stale_after: Seconds = 15.0
    """A replica silent this long is dead: its conversations and runs become `interrupted`."""
    retention: Seconds = 7 * 86400.0
    """Seconds an ended run (its events and artifacts) is kept; the housekeeper then deletes
    it. At most a week."""
    quotas: ServiceQuotas = ServiceQuotas()
    """Per-principal defaults; `sbx keys create --max-conversations ...` overrides per key."""
    oidc: OidcSettings | None = None
    """Sign-in through an OpenID Connect provider for the web page (none: API keys only)."""
    teams: Annotated[dict[str, TeamSettings], AfterValidator(check_team_names)] = Field(
        default_factory=dict)
    """Teams by name: shared money budgets, tools withheld, members' quota defaults."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network!r} is not an IP address or network") from None
        return value

    @model_validator(mode="after")
    def _team_quotas(self) -> ServiceSettings:
        for name, team in self.teams.items():
            try:
                ServiceQuotas.model_validate({**self.quotas.model_dump(), **team.quotas})
            except ValidationError as exc:
                raise ValueError(f"teams.{name}.quotas: "
                                 f"{describe_validation_error(exc)}") from None
        return self

    def team_quotas(self, team: str | None) -> ServiceQuotas:
        """The per-principal quota defaults for a member of `team` (the policy's otherwise)."""
        found = self.teams.get(team) if team is not None else None
        if found is None or not found.quotas:
            return self.quotas
        return ServiceQuotas.model_validate({**self.quotas.model_dump(), **found.quotas})


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
    service: ServiceSettings = ServiceSettings()
    """`sbx serve`'s sizes, timeouts and per-principal quota defaults (other faces ignore it)."""
    restore: RestoreSettings = RestoreSettings()
    """Whether and within which bounds a lost sandbox's state is rebuilt by replay."""
    pool: PoolSettings = PoolSettings()
    """How many warm containers the core keeps, and how far demand may grow them."""

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

    def limited(self, request: LimitsRequest) -> AppConfig:
        """This configuration with a face's per-run limits applied, only ever tighter.

        Raises `LimitRefused` (naming the knob and the policy's value) for a
        request above the policy's `[sandbox]` ceiling.
        """
        if not request.changes():
            return self
        return replace(self, limits=request.within(self.limits))


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
    data = with_default_tables(data, source)
    sandbox = data.pop("sandbox", {})
    agent = data.pop("agent", {})
    service = data.pop("service", {})
    restore = data.pop("restore", {})
    pool = data.pop("pool", {})
    policy = _validate(Policy, data, (), source, text)
    try:
        custom_tools(policy)  # a bad `entry` is the operator's error now, not at the first call
    except PolicyError as exc:
        raise PolicyError(f"{source}: {exc}") from None
    settings = _validate(ServiceSettings, service, ("service",), source, text)
    for name, team in settings.teams.items():  # the tools it withholds must exist
        unknown = [tool for tool in team.disabled_tools if policy.tools.rule(tool) is None]
        if unknown:
            raise PolicyError(f"{source}: service.teams.{name}.disabled_tools: unknown tool "
                              f"{unknown[0]!r} (known: {', '.join(policy.tools.known_names())})")
    return AppConfig(
        source=source,
        service=settings,
        limits=_validate(Limits, sandbox, ("sandbox",), source, text),
        restore=_validate(RestoreSettings, restore, ("restore",), source, text),
        pool=_validate(PoolSettings, pool, ("pool",), source, text),
        settings=_validate(AgentSettings, agent, ("agent",), source, text),
        policy=policy,
    )


def with_default_tables(data: dict[str, Any], source: Path) -> dict[str, Any]:
    """`data` with each top-level table it lacks taken whole from the packaged default.

    A file that only sets `[sandbox] memory = "1g"` must not turn every tool off: a
    table the file leaves out keeps its documented default. A table the file has is
    its own, whole (`[tools]` with nothing enabled still enables nothing).
    """
    default = default_policy_path()
    if source == default:
        return data
    defaults = tomllib.loads(default.read_text(encoding="utf-8"))
    return {**{key: value for key, value in defaults.items() if key not in data}, **data}


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
