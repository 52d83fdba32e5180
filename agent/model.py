"""`ModelClient`: Chat Completions through the `openai` SDK, against any OpenAI-compatible server.

The SDK does the retrying (`max_retries`, exponential backoff, honouring
`Retry-After`) and the HTTP timeout (`request_timeout`, per attempt). What is
left when it gives up becomes one `ModelError` whose message says what failed,
where, and which knob to turn: the loop ends the run with `model_error` and
that message. A reply is reduced to what the loop needs (`ModelReply`): the
text, the tool calls as raw strings (the gate validates the arguments; a
broken JSON string is the model's error, not ours), usage and timing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import OpenAI, Timeout

from sbx.agent.settings import AgentSettings, Endpoint

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
"""Seconds to open the TCP (and TLS) connection, capped by `request_timeout`."""


class ModelError(Exception):
    """The model endpoint failed after the SDK's retries, or replied with something unusable."""


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token counts as the endpoint reports them (zeros when it reports none)."""

    prompt_tokens: int = 0
    """Tokens in the request's messages and tools."""
    completion_tokens: int = 0
    """Tokens the model generated."""
    total_tokens: int = 0
    """What the endpoint counts against its own limits; the budget counts this."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        """For the transcript and `--json`."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True, kw_only=True)
class ToolCallRequest:
    """One tool call as the model wrote it; `arguments` is the raw JSON string, unchecked."""

    id: str
    """The `tool_call_id` the answering `tool` message must carry."""
    name: str
    """The tool the model asked for (it may not exist: the gate says so)."""
    arguments: str
    """The arguments exactly as sent (possibly invalid JSON: the gate says so)."""


@dataclass(frozen=True, kw_only=True)
class ModelReply:
    """One assistant reply, reduced to what the loop acts on."""

    content: str | None
    """The assistant's text (the answer, when there are no tool calls)."""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    """The calls to run, in the order the model listed them."""
    usage: Usage = field(default_factory=Usage)
    """Tokens this request cost."""
    finish_reason: str | None = None
    """Why the model stopped (`stop`, `tool_calls`, `length`, ...)."""
    duration_s: float = 0.0
    """Wall-clock seconds of the request, SDK retries included."""

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation, in Chat Completions form."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in self.tool_calls
            ]
        return message


class ModelClient:
    """A configured Chat Completions client for one model; safe to share between runs."""

    def __init__(self, *, client: OpenAI, model: str, max_retries: int) -> None:
        self._client = client
        self.model = model
        self.max_retries = max_retries

    @classmethod
    def connect(cls, endpoint: Endpoint, settings: AgentSettings) -> ModelClient:
        """Build the SDK client with the configured retries and request timeout (no I/O yet)."""
        client = OpenAI(
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            max_retries=settings.max_retries,
            timeout=request_timeout(settings.request_timeout),
        )
        return cls(client=client, model=endpoint.model, max_retries=settings.max_retries)

    def close(self) -> None:
        """Close the SDK's connection pool."""
        self._client.close()

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """The endpoint actually used (the SDK's default when none was configured)."""
        return str(self._client.base_url)

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        *,
        timeout: float,
    ) -> ModelReply:
        """Send the conversation and the tool list; `timeout` caps each attempt, in seconds."""
        started = time.monotonic()
        extra: dict[str, Any] = {"tools": list(tools)} if tools else {}
        logger.debug("Requesting a completion from %s (%d messages)", self.model, len(messages))
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=list(messages),  # type: ignore[arg-type]
                timeout=request_timeout(timeout),
                **extra,
            )
        except openai.APIStatusError as exc:
            raise ModelError(self._status_message(exc)) from None
        except openai.APITimeoutError:
            raise ModelError(
                f"the model endpoint {self.base_url} did not answer within {timeout:g} s "
                f"(after {self.max_retries} retries; raise --request-timeout)"
            ) from None
        except openai.APIConnectionError as exc:
            raise ModelError(
                f"cannot reach the model endpoint {self.base_url}: {_cause(exc)} "
                f"(after {self.max_retries} retries; check --base-url / OPENAI_BASE_URL)"
            ) from None
        except openai.OpenAIError as exc:
            raise ModelError(f"the model endpoint's reply could not be used: {exc}") from None
        return _reply(response, time.monotonic() - started)

    def _status_message(self, exc: openai.APIStatusError) -> str:
        detail = _error_detail(exc)
        retried = ""
        if exc.status_code >= 500 or exc.status_code in (408, 409, 429):
            retried = (
                f" after {self.max_retries} retries (--max-retries)"
                if self.max_retries
                else " (not retried: --max-retries is 0)"
            )
        hint = {401: "; check the API key", 404: "; check --model and --base-url"}
        return (
            f"the model endpoint {self.base_url} answered HTTP {exc.status_code}{retried}: "
            f"{detail}{hint.get(exc.status_code, '')}"
        )


def request_timeout(seconds: float) -> Timeout:
    """The whole request may take `seconds`; connecting, at most `CONNECT_TIMEOUT_S` of them."""
    return Timeout(seconds, connect=min(CONNECT_TIMEOUT_S, seconds))


def _reply(response: Any, duration: float) -> ModelReply:
    """Reduce a `ChatCompletion` to a `ModelReply`; a reply without a choice is a ModelError."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise ModelError("the model endpoint sent a reply without any choice")
    choice = choices[0]
    message = choice.message
    calls = []
    for index, call in enumerate(message.tool_calls or []):
        data = call.model_dump()
        function = data.get("function") or data.get("custom") or {}
        calls.append(
            ToolCallRequest(
                id=str(data.get("id") or f"call_{index}"),
                name=str(function.get("name") or ""),
                arguments=str(function.get("arguments") or function.get("input") or ""),
            )
        )
    usage = response.usage
    counted = Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        total_tokens=int(getattr(usage, "total_tokens", 0) or 0),
    )
    return ModelReply(
        content=message.content,
        tool_calls=tuple(calls),
        usage=counted,
        finish_reason=choice.finish_reason,
        duration_s=duration,
    )


def _error_detail(exc: openai.APIStatusError) -> str:
    """The server's own error message when it sent one, else the SDK's."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
    return str(exc.message)[:300]


def _cause(exc: BaseException) -> str:
    """The innermost cause's text: `Connection refused`, not `Connection error.`."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return str(exc) or type(exc).__name__
