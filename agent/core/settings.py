"""The agent's configuration: the model endpoint, the run's budget, and how context is bounded.

Everything here is immutable and fixed before a run starts; what changes
during a run lives in `agent.state.RunState`. Values come from, highest first:
command-line flags, the environment (`OPENAI_BASE_URL`, `OPENAI_API_KEY`,
`SBX_MODEL`), the policy file's `[agent]` table (read by `sbx.agent.core.config`),
then the defaults below.

Two timeouts, two names: `request_timeout` bounds one HTTP request to
the model; the sandbox's `timeout` (policy `[sandbox]`, `--timeout` on
`sbx exec`) bounds one execution of the model's code. Neither stands in for
the other, and `Budget.max_wall_time` bounds the whole run.

The API key is never read from the policy file: policy files are shared and
reviewed, keys are secrets. It comes from `--api-key` or `OPENAI_API_KEY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sbx.agent.core.cost import Prices
from sbx.sandbox.errors import SbxError
from sbx.tools.policy import Bytes, Seconds, at_most_seconds

BASE_URL_ENV = "OPENAI_BASE_URL"
API_KEY_ENV = "OPENAI_API_KEY"
MODEL_ENV = "SBX_MODEL"


class SettingsError(SbxError):
    """The agent cannot be configured as given; the message names the key or flag to fix."""


MAX_WALL_TIME_S = 86400.0
"""The longest run `--max-time` may ask for: a day."""
MAX_REQUEST_TIMEOUT_S = 3600.0
"""The longest single model request `--request-timeout` may allow: an hour."""


class Budget(BaseModel):
    """Hard per-run limits. Each is checked before the spending it would allow.

    Strict: a policy's `max_turns = "20"` or `true` is an error, not a number.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_turns: int = Field(default=20, ge=1, le=1000)
    """Most model requests in one run (`--max-turns`); the next one past it ends `step_limit`."""
    max_tool_calls: int = Field(default=40, ge=1, le=10_000)
    """Most tool calls in one run, all tools together (`--max-tool-calls`): `tool_limit`."""
    max_tool_calls_per_turn: int = Field(default=8, ge=1, le=100)
    """Most tool calls one model reply may request (`--max-tool-calls-per-turn`): `tool_limit`."""
    max_wall_time: Annotated[Seconds, AfterValidator(at_most_seconds(MAX_WALL_TIME_S))] = 600.0
    """Wall-clock seconds for the whole run (`--max-time`, e.g. `10m`): `time_limit`."""
    max_total_tokens: int = Field(default=200_000, ge=1)
    """Prompt plus completion tokens over the run, as the endpoint reports them, or estimated
    when a count is missing, negative or not an integer (`--max-tokens`); a request whose
    estimated prompt would pass it ends `token_limit`."""
    max_cost: float | None = Field(default=None, ge=0)
    """Most money the run may cost, in `[agent.prices]`'s currency (None: no cap); checked
    before each model request (with the prompt's estimated price) and each tool call:
    `cost_limit`. The service's key and team budgets are checked beside it, at the same
    points, and end a run `budget_exceeded` (`sbx.agent.core.spend`)."""


class AgentSettings(BaseModel):
    """The policy's `[agent]` table (and the flags that override it). Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    model: str | None = None
    """Model name sent to the endpoint (`--model`, `SBX_MODEL`), e.g. `gpt-4o-mini`."""
    base_url: str | None = None
    """OpenAI-compatible endpoint (`--base-url`, `OPENAI_BASE_URL`); default: OpenAI's."""
    request_timeout: Annotated[
        Seconds, AfterValidator(at_most_seconds(MAX_REQUEST_TIMEOUT_S))
    ] = 120.0
    """Seconds one HTTP request to the model may take (`--request-timeout`), never more than
    what is left of the run's `max_wall_time`; a timed-out request is retried. Not the
    sandbox's execution `timeout`."""
    max_retries: int = Field(default=2, ge=0, le=10)
    """Retries of a failed model request (connection errors, timeouts, 408, 409, 429, 5xx)
    (`--max-retries`), after the wait the endpoint asks for (`Retry-After`) or an exponential
    backoff, and only while the wait fits in the run's `max_wall_time`."""
    context_tokens: int = Field(default=60_000, ge=1_000)
    """Estimated size (4 characters per token) past which older tool observations are
    shortened before a request (`--context-tokens`). Set it well below the model's window."""
    observation_tokens: int = Field(default=4_000, ge=100, le=1_000_000)
    """Estimated tokens (4 characters each) of one tool result the model reads: longer
    stdout and stderr are cut to their head and tail with a marker saying how much was left
    out. The user, the transcript and provenance keep the whole output. Keep it well below
    `context_tokens`."""
    vision_models: list[str] = Field(default_factory=list)
    """Models (names as sent to the endpoint; `"*"`: any) that are shown the images an
    execution saved (`plt.show()` included) as image input after the tool results. Other
    models get a short text description of each (size, titles, axis labels)."""
    max_images: int = Field(default=2, ge=0, le=16)
    """Most images shown to a vision model after one turn; the rest are described."""
    max_image_bytes: Bytes = Field(default=1024 * 1024, le=20 * 1024 * 1024)
    """Largest image file shown to a vision model; a larger one is described instead."""
    parallel_tools: int = Field(default=4, ge=1, le=32)
    """Tool calls of one reply that may run at once (calls sharing a sandbox still run in order)."""
    max_answer_chars: int = Field(default=100_000, ge=100, le=10_000_000)
    """Longest text the model's reply may carry (the answer, or text beside tool calls); the
    rest is cut with a marker that says so, before the conversation, the transcript, the
    audit log or stdout see it."""
    max_argument_bytes: Bytes = Field(default=2 * 1024 * 1024, le=64 * 1024 * 1024)
    """Largest arguments (JSON text) of one tool call; the gate refuses larger ones as invalid
    and tells the model this cap, and the conversation keeps a note instead of them. Keep it
    above the sandbox's `max_code_bytes`: code is JSON-escaped inside the arguments."""
    max_reply_bytes: Bytes = Field(default=32 * 1024 * 1024, le=1024 * 1024 * 1024)
    """Largest HTTP body the endpoint may send for one request (error bodies too); a larger
    one ends the run `model_error`. It bounds sbx's memory, not what is kept (see above)."""
    tool_format: Literal["native", "text"] = "native"
    """How the model calls tools (`--tool-format`): `native` Chat Completions tool calls, or
    `text` for models served without a tool-call parser: each ```python fenced block of a
    reply runs as one `execute_python` call (`sbx.agent.model.textformat`); other tools are not
    offered in text mode."""
    require_answer_parts: bool = False
    """Send back, once, every final answer written without its parts (Measured,
    Interpretation, Assumptions). Off, an unmarked answer is sent back only when it mixes in
    interpretation ("because", "probably"), and is shown as unmarked otherwise."""
    budget: Budget = Budget()
    """The run's hard limits (`[agent.budget]`)."""
    prices: Prices = Prices()
    """The price table: per model (tokens) and for the sandbox (CPU and GB seconds)."""


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where and how to reach the model, resolved from flags, environment and policy."""

    base_url: str | None
    """The endpoint's base URL (ending in `/v1` for most servers); None means OpenAI's."""
    api_key: str
    """The key sent as a bearer token; never written to the transcript, redacted in the audit."""
    model: str
    """The model name."""


BUDGET_FLAGS = tuple(Budget.model_fields)


def apply_flags(settings: AgentSettings, flags: Mapping[str, Any]) -> AgentSettings:
    """The settings with the flags that were given (not None) applied, validated again.

    `flags` holds budget and tuning flags only; the endpoint flags go to `resolve_endpoint`,
    because the environment ranks between them and the policy. A bad value raises
    pydantic's `ValidationError`; the config step words it as the flag.
    """
    data = settings.model_dump(exclude={"budget"})
    budget = settings.budget.model_dump()
    for key, value in flags.items():
        if value is not None:
            (budget if key in BUDGET_FLAGS else data)[key] = value
    return AgentSettings.model_validate({**data, "budget": budget})


FLAG_NAMES = {"max_wall_time": "max-time", "max_total_tokens": "max-tokens"}
"""Settings whose command-line flag is not simply the field name with dashes."""


def resolve_endpoint(
    settings: AgentSettings,
    *,
    base_url: str | None,
    api_key: str | None,
    model: str | None,
    environ: Mapping[str, str],
) -> Endpoint:
    """Each of base URL, key and model: flag > environment > policy `[agent]`; refuse gaps."""
    url = base_url or environ.get(BASE_URL_ENV) or settings.base_url or None
    name = model or environ.get(MODEL_ENV) or settings.model or None
    key = api_key or environ.get(API_KEY_ENV) or None
    if name is None:
        raise SettingsError(
            f"no model configured: pass --model, set {MODEL_ENV}, or set model in the policy's "
            "[agent] table"
        )
    if key is None:
        raise SettingsError(
            f"no API key: set {API_KEY_ENV} or pass --api-key (local servers such as Ollama or "
            "vLLM accept any value)"
        )
    if url is not None and urlsplit(url).scheme not in ("http", "https"):
        raise SettingsError(f"base URL {url!r} must start with http:// or https://")
    return Endpoint(base_url=url, api_key=key, model=name)
