"""The ops team's policy: which tools run, with which arguments, how often, in which sandbox.

A policy is a TOML file (`sbx.toml`; the packaged default is `tools/sbx.toml`,
every key commented there). Everything is closed by default: a tool absent
from the file is disabled, an unknown key or tool name is an error at load,
and each rule has a dotted name (`tools.http_get.allowed_domains`,
`quotas.per_tool`) that denials and audit records quote. The file is read
once by the configuration step (`sbx.agent.core.config`); this module holds the
gate's models only. Booleans and
numbers are strict: `enabled = "yes"` or `max_denied = "5"` is an error, never a guess.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from sbx.sandbox.errors import SbxError

# Bytes, Seconds and Wait are re-exported: the agent's settings use the same units.
from sbx.sandbox.limits import Bytes as Bytes
from sbx.sandbox.limits import Seconds as Seconds
from sbx.sandbox.limits import Wait as Wait
from sbx.sandbox.units import at_most_seconds as at_most_seconds
from sbx.sandbox.units import parse_size
from sbx.tools.guard_policy import GuardPolicy
from sbx.tools.sql_policy import QuerySqlRule

BUILTIN_TOOLS = (
    "execute_python", "calculate", "list_data_files", "preview_data_file", "http_get", "ask_user",
    "upload_dataset", "update_plan", "query_sql", "remember", "run_command",
)
DEFAULT_CALL_TIMEOUT_S = 30.0
"""`[tools] timeout`: seconds one tool call may take at the gate, unless its own rule says."""
_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_DOMAIN = re.compile(rf"^(\*\.)?({_LABEL}\.)*{_LABEL}$")


class PolicyError(SbxError):
    """The policy file cannot be used; the message names the file, the line and the key."""


class ToolRule(BaseModel):
    """Rules every tool has: whether the model may call it at all."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool = False
    """Deny by default: only tools with `enabled = true` are offered to the model and run."""
    timeout: Seconds | None = None
    """Wall-clock seconds one call may take at the gate (None: `[tools] timeout`); a call past
    it ends `error` and its thread is abandoned, its result ignored."""


class CalculateRule(ToolRule):
    """Argument rules for `calculate`."""

    max_expression_length: int = Field(default=500, ge=1, le=10_000)
    """Longest expression accepted, in characters (bounds the number of operations too)."""
    max_digits: int = Field(default=4000, ge=10, le=4000)
    """Most decimal digits of any integer, intermediate or final (Python prints up to 4300)."""
    timeout: Seconds = 1.0
    """Wall-clock seconds one evaluation may take, checked between operations (the gate
    allows a grace beyond it, so this check's own message normally comes first)."""


class ListDataFilesRule(ToolRule):
    """Argument rules for `list_data_files`."""

    max_files: int = Field(default=1000, ge=1, le=100_000)
    """Most files listed (directories are walked up to this many entries)."""


class PreviewDataFileRule(ToolRule):
    """Argument rules for `preview_data_file`."""

    max_rows: int = Field(default=50, ge=1, le=10_000)
    """Most rows (or lines) the model may ask for; larger requests are denied."""
    max_bytes: Bytes = 64 * 1024
    """Most bytes read from the start of the file, whatever `rows` says."""


class HttpGetRule(ToolRule):
    """Argument rules for `http_get`: off unless enabled with a non-empty domain allowlist."""

    allowed_domains: list[str] = Field(default_factory=list)
    """Hosts the model may fetch: `example.com` (exactly) or `*.example.com` (any subdomain)."""
    allowed_ports: list[int] = Field(default_factory=lambda: [80, 443])
    """Ports the model may connect to."""
    max_bytes: Bytes = 1024 * 1024
    """Most response-body bytes read; the rest is cut and the observation says so."""
    timeout: Seconds = 10.0
    """Wall-clock seconds for the whole fetch, redirects included (the gate allows a grace)."""
    max_redirects: int = Field(default=3, ge=0, le=10)
    """Redirects followed; each target is checked like the first URL."""

    @field_validator("allowed_domains")
    @classmethod
    def _domains(cls, domains: list[str]) -> list[str]:
        cleaned = [domain.strip().lower().rstrip(".") for domain in domains]
        for domain in cleaned:
            if not _DOMAIN.match(domain):
                raise ValueError(f"{domain!r} is not a host name or '*.domain' pattern")
        return cleaned

    @model_validator(mode="after")
    def _enabled_needs_domains(self) -> HttpGetRule:
        if self.enabled and not self.allowed_domains:
            raise ValueError("http_get is enabled but allowed_domains is empty; list the hosts")
        return self


class AskUserRule(ToolRule):
    """`ask_user`: the model asks the person who asked; offered only where someone can answer."""

    timeout: Seconds = 600.0
    """Seconds the operator at a terminal has to answer; then the call ends `error`."""


DataSize = Annotated[int, BeforeValidator(parse_size), Field(ge=0), PlainSerializer(int)]
"""A byte count that may be 0 (`"10m"`, `0`)."""


class PlanRule(ToolRule):
    """`update_plan`: the model writes its plan and keeps it current; every face shows it."""

    max_steps: int = Field(default=12, ge=1, le=50)
    """Most steps one plan may have; a longer plan is refused (the model is told to merge)."""
    max_step_chars: int = Field(default=200, ge=10, le=1000)
    """Most characters of one step's description."""
    max_updates: int = Field(default=20, ge=1, le=200)
    """Plans saved per run (the first and every revision); later calls are refused."""
    require_plan_from_data: DataSize | None = None
    """A run whose data totals at least this many bytes must write a plan before its first
    execution (`execute_python` is refused until then); 0: every run; None: never."""


class RememberRule(ToolRule):
    """`remember`: the model saves a short note about a dataset when the user states a fact.

    Notes reach later conversations' system prompts (`sbx.agent.core.notes`), so the tool
    is off unless the operator enables it; people's own notes (`sbx notes`, the API) obey
    the same bounds and sharing either way.
    """

    max_chars: int = Field(default=300, ge=10, le=4000)
    """Longest note, in characters (whitespace runs count as one)."""
    max_notes: int = Field(default=20, ge=1, le=1000)
    """Most notes one author keeps on one dataset."""
    share_with_team: bool = False
    """Notes are seen by the author's team too (the service's teams); false: by the author
    alone."""


class UploadDatasetRule(ToolRule):
    """`upload_dataset`: an MCP client over `sbx serve`'s `/mcp` stores a file as a dataset.

    Only the HTTP MCP face offers it (it needs the service's datasets); elsewhere the key
    is read and ignored. The file arrives inside a tool call, so it is bounded three ways:
    this cap on the decoded bytes, the key's `upload_bytes` quota, and the HTTP body limit
    (`[service] max_body`, which base64 content must fit with a third to spare).
    """

    max_bytes: Bytes = 512 * 1024
    """Largest file accepted, after decoding (base64 content is a third larger on the wire)."""


class CustomToolRule(ToolRule):
    """`[tools.custom.NAME]`: a tool an embedding program registers, or the policy loads."""

    entry: str | None = None
    """`package.module:function` to load the tool from (a typed function or a `Tool`); it runs
    in sbx's own process, not in the sandbox, so only trusted code belongs here."""

    @field_validator("entry")
    @classmethod
    def _entry(cls, entry: str | None) -> str | None:
        if entry is not None and not _ENTRY.match(entry):
            raise ValueError(f"{entry!r} is not 'package.module:function'")
        return entry


class ToolsPolicy(BaseModel):
    """One table per built-in tool, plus `[tools.custom.NAME]` for tools a program registers."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    execute_python: ToolRule = ToolRule()
    """Run Python in the sandbox session (limits in `[sandbox]`)."""
    calculate: CalculateRule = CalculateRule()
    """Exact arithmetic in-process (RestrictedPython; not an isolation boundary)."""
    list_data_files: ListDataFilesRule = ListDataFilesRule()
    """List the run's data files (host side)."""
    preview_data_file: PreviewDataFileRule = PreviewDataFileRule()
    """Show the first rows of one data file (host side)."""
    http_get: HttpGetRule = HttpGetRule()
    """Fetch a URL from the host, allowlisted domains only."""
    ask_user: AskUserRule = AskUserRule()
    """Ask the person who asked a question, where someone can answer."""
    upload_dataset: UploadDatasetRule = UploadDatasetRule()
    """Store a file sent in a tool call as the caller's dataset (`sbx serve`'s `/mcp` only)."""
    update_plan: PlanRule = PlanRule()
    """The model's plan: its steps and their status, revised as results arrive."""
    query_sql: QuerySqlRule = QuerySqlRule()
    """Read-only SQL against the operator's named sources; results land in `/data/queries`."""
    remember: RememberRule = RememberRule()
    """Save a note about a dataset for later conversations (its bounds bind people too)."""
    run_command: ToolRule = ToolRule()
    """A shell command in the sandbox session (off: allowing Python is not allowing a shell)."""
    custom: dict[str, CustomToolRule] = Field(default_factory=dict)
    """Tools loaded from `entry` or registered by the embedding program; each must exist when
    the gate is built."""
    timeout: Seconds = DEFAULT_CALL_TIMEOUT_S
    """Wall-clock seconds one tool call may take at the gate when its own rule sets none."""

    @field_validator("custom")
    @classmethod
    def _custom_names(cls, custom: dict[str, CustomToolRule]) -> dict[str, CustomToolRule]:
        for name in custom:
            if name in BUILTIN_TOOLS:
                raise ValueError(f"{name!r} is a built-in tool; a custom tool needs its own name")
            if not _TOOL_NAME.match(name):
                raise ValueError(f"{name!r} is not a tool name ([A-Za-z0-9_-], 1 to 64)")
        return custom

    def rule(self, name: str) -> ToolRule | None:
        """Return the rule for a tool name, or None when the policy does not know it."""
        if name in BUILTIN_TOOLS:
            rule: ToolRule = getattr(self, name)
            return rule
        return self.custom.get(name)

    def known_names(self) -> list[str]:
        """Every tool name the policy has a rule for."""
        return [*BUILTIN_TOOLS, *self.custom]


class Quotas(BaseModel):
    """Per-run call budgets of single tools, counted on allowed calls only.

    The run's total of tool calls is one budget, the agent's
    (`[agent.budget] max_tool_calls`), checked before the calls are made.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    per_tool: dict[str, int] = Field(default_factory=dict)
    """Allowed calls per run for one tool, by name."""
    max_denied: int | None = Field(default=20, ge=0)
    """Refused calls per run (denied, unknown tool or invalid arguments) after which the gate
    halts the run: a model probing the policy or flailing (`None`: no cap)."""
    max_identical_failures: int | None = Field(default=5, ge=1)
    """The circuit breaker: after this many failures of one tool in a row, each the same way,
    the tool is disabled for the rest of the run and the model is told (`None`: never)."""


class AuditPolicy(BaseModel):
    """Where the audit log goes and what never reaches it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: Path | None = Field(default=None, strict=False)
    """Log file; `--audit-log` and `SBX_AUDIT_LOG` override it; default `./sbx-audit.jsonl`."""
    secret_env: list[str] = Field(
        default_factory=lambda: ["OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "SBX_AUDIT_KEY"]
    )
    """Environment variables whose values are replaced by `[REDACTED]` wherever they appear."""
    secret_fields: list[str] = Field(
        default_factory=lambda: ["api_key", "password", "secret", "token", "authorization"]
    )
    """Argument names (case-insensitive) whose values are always redacted."""


class Policy(BaseModel):
    """The gate's part of the policy file: `[tools.*]`, `[quotas]`, `[audit]`, `[guard]`.

    The file's `[sandbox]` and `[agent]` tables belong to other layers; the
    configuration step (`sbx.agent.core.config`) reads the file once and hands each
    table to its owner. Unknown keys anywhere are an error (`extra="forbid"`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tools: ToolsPolicy = ToolsPolicy()
    """Which tools are enabled and their argument rules."""
    quotas: Quotas = Quotas()
    """How many calls a run may make."""
    audit: AuditPolicy = AuditPolicy()
    """The audit log's path and redaction."""
    guard: GuardPolicy = GuardPolicy()
    """The data guard: what is replaced in text before it leaves for the model."""

    @model_validator(mode="after")
    def _quota_names(self) -> Policy:
        for name in self.quotas.per_tool:
            if self.tools.rule(name) is None:
                known = ", ".join(self.tools.known_names())
                raise ValueError(f"quotas.per_tool names unknown tool {name!r} (known: {known})")
        return self

    def digest(self) -> str:
        """SHA-256 of the effective policy (canonical JSON), recorded at each run's start."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()


def default_policy_path() -> Path:
    """The documented default policy shipped inside the package."""
    return Path(str(resources.files("sbx.tools").joinpath("sbx.toml")))
