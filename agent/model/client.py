"""`ModelClient`: Chat Completions through the `openai` SDK, against any OpenAI-compatible server.

The run's wall-time budget must hold through everything the endpoint does,
so sbx makes the retries itself (the SDK's `max_retries` is 0): each attempt
may take `request_timeout`, but never past the time the caller gave
`complete`, and every socket operation is held to that deadline
(`agent.model_http`). A retry waits what the endpoint asks (`Retry-After`,
`retry-after-ms`) or an exponential backoff, only when the wait fits in the
time left; when it does not, `OutOfTime` says so at once instead of sleeping
(the loop ends the run `time_limit`). What is left when the retries are spent
is one `ModelError` whose message says what failed, where, and which knob to
turn. sbx parses the reply body itself (`agent.model_reply`): the SDK's
lenient models let a hostile body through as half-typed objects.

Every request passes the run's `RequestGuard` (`agent.model.boundary`) last,
after the messages are in their final shape: that is the one boundary where
data leaves for the provider, whatever built the messages.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import httpx2
import openai
from openai import OpenAI, Timeout

from sbx.agent.model.boundary import RequestGuard
from sbx.agent.model.cancellation import Cancellation, Cancelled
from sbx.agent.model.http import UnusableReply, attempt_deadline, guarded_client
from sbx.agent.model.reply import (
    ModelError,
    ModelReply,
    ReplyLimits,
    TokenUsage,
    ToolCallRequest,
    clean_value,
    parse_reply,
    printable,
)
from sbx.agent.model.request_size import estimate_tokens
from sbx.agent.model.textformat import as_text_messages, with_code_calls

__all__ = [
    "CONNECT_TIMEOUT_S", "ModelClient", "ModelError", "ModelReply", "OutOfTime", "RetryHook",
    "ToolCallRequest", "TokenUsage", "request_timeout",
]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
"""Seconds to open the TCP (and TLS) connection, capped by `request_timeout`."""
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
_RETRIED_STATUS = frozenset({408, 409, 429})


class OutOfTime(ModelError):
    """The time the caller gave ran out, or a retry's wait would not fit in what is left."""


RetryHook = Callable[[int, str], None]
"""`on_retry(retries, reason)`: the request failed and is tried again (`reason`: `HTTP 503`)."""
_NOTE = "\x00"
"""Where a failure's message says how often it was retried."""


class _Retry(Exception):
    """One failed attempt that may be retried after `wait` seconds (None: the backoff).

    `template` holds `_NOTE` where the retry count goes; `status` picks its wording;
    `reason` is the short why a waiting line shows (`HTTP 503`), without the endpoint.
    """

    def __init__(
        self, template: str, wait: float | None = None, *, status: bool, reason: str
    ) -> None:
        super().__init__(template.replace(_NOTE, ""))
        self.template = template
        self.wait = wait
        self.status = status
        self.reason = reason

    def final(self, retries: int) -> str:
        """The message once no retry is left."""
        if self.status:
            note = (
                f" after {retries} retries (--max-retries)"
                if retries
                else " (not retried: --max-retries is 0)"
            )
        else:
            note = f"after {retries} retries; "
        return self.template.replace(_NOTE, note)


class Endpoint(Protocol):
    """Where the model is (the core's `Endpoint`, resolved from flags, environment, policy)."""

    @property
    def base_url(self) -> str | None:
        """The endpoint's base URL; None means OpenAI's."""

    @property
    def api_key(self) -> str:
        """The key sent as a bearer token."""

    @property
    def model(self) -> str:
        """The model name."""


class ClientSettings(Protocol):
    """What the client needs of the agent's settings (the core's `AgentSettings` has them)."""

    max_retries: int
    """Retries of a failed request."""
    request_timeout: float
    """Seconds one HTTP request may take."""
    max_reply_bytes: int
    """The largest reply body read."""
    max_answer_chars: int
    """The longest answer text kept."""
    max_argument_bytes: int
    """The largest tool-call arguments kept."""
    tool_format: Literal["native", "text"]
    """`native` tool calls, or `text` (code in fenced blocks)."""


class ModelClient:
    """A configured Chat Completions client for one model; safe to share between runs.

    It reads its endpoint and settings by their shape (`Endpoint`, `ClientSettings`): the
    core's types fit them, and the model layer needs nothing of the core.
    """

    def __init__(self, *, client: OpenAI, model: str, settings: ClientSettings) -> None:
        self._client = client
        self.model = model
        self.max_retries = settings.max_retries
        self._settings = settings

    @classmethod
    def connect(cls, endpoint: Endpoint, settings: ClientSettings) -> ModelClient:
        """Build the SDK client over the guarded HTTP client (no I/O yet); sbx does the retries."""
        client = OpenAI(
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            max_retries=0,
            timeout=request_timeout(settings.request_timeout),
            http_client=guarded_client(endpoint.base_url, max_bytes=settings.max_reply_bytes),
        )
        return cls(client=client, model=endpoint.model, settings=settings)

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
        guard: RequestGuard,
        cancel: Cancellation | None = None,
        on_retry: RetryHook | None = None,
    ) -> ModelReply:
        """Send the conversation and the tool list; all attempts together take at most `timeout` s.

        Every message passes `guard` (the run principal's data guard) as it leaves.
        Raises `OutOfTime` when `timeout` runs out first, `Cancelled` within about
        `CANCEL_POLL_S` of `cancel` firing (the request in flight is abandoned),
        `ModelError` for anything else. `on_retry(retries, reason)` hears each retry
        before its wait (the waiting line's count and why).
        """
        started = time.monotonic()
        deadline = started + timeout
        limits = ReplyLimits(
            max_answer_chars=self._settings.max_answer_chars,
            max_argument_bytes=self._settings.max_argument_bytes,
            prompt_estimate=estimate_tokens(messages, tools),
        )
        text_format = self._settings.tool_format == "text"
        if text_format:  # no tools on the wire; code comes back in fenced blocks
            messages, tools = as_text_messages(messages), ()
        logger.debug("Requesting a completion from %s (%d messages)", self.model, len(messages))
        sendable = clean_value(guard.messages(messages))  # a lone surrogate cannot be UTF-8
        attempt = 0
        while True:
            try:
                body, content_type = self._attempt(sendable, tools, deadline, attempt, cancel)
            except _Retry as failed:
                if attempt >= self.max_retries:
                    raise ModelError(failed.final(self.max_retries)) from None
                if on_retry is not None:
                    on_retry(attempt + 1, failed.reason)
                self._wait(failed, attempt, deadline, cancel)
                attempt += 1
                continue
            reply = parse_reply(body, content_type, limits)
            if text_format:
                reply = with_code_calls(reply, max_argument_bytes=limits.max_argument_bytes)
            return _timed(reply, time.monotonic() - started)

    def _attempt(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        deadline: float,
        attempt: int,
        cancel: Cancellation | None = None,
    ) -> tuple[bytes, str]:
        """One HTTP request; the body and its content type, or `_Retry`, or a final error."""
        if cancel is not None:
            cancel.check()
        left = deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime(f"no time was left for attempt {attempt + 1} of the model request")
        body: dict[str, Any] = {"model": self.model, "messages": list(messages),
                                **({"tools": list(tools)} if tools else {})}
        per_attempt = min(self._settings.request_timeout, left)
        try:
            with attempt_deadline(deadline, cancel):
                # The SDK's documented raw request: `chat.completions.create` first walks every
                # message and tool schema against its typed parameters (its `transform`), which
                # rewrites nothing in this plain JSON and was most of sbx's CPU per question.
                response = self._client.post(
                    "/chat/completions", cast_to=httpx2.Response, body=body,
                    options={"timeout": request_timeout(per_attempt),
                             "headers": {"x-stainless-retry-count": str(attempt)}},
                )
        except UnusableReply as exc:  # raised in the transport, under the SDK
            raise ModelError(str(exc)) from None
        except Cancelled:
            raise
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from None
        except openai.APITimeoutError:
            if time.monotonic() >= deadline:
                raise OutOfTime(
                    f"the model endpoint {self.base_url} did not answer before the run's "
                    "wall-time budget ran out"
                ) from None
            raise _Retry(
                f"the model endpoint {self.base_url} did not answer within {per_attempt:g} s "
                f"({_NOTE}raise --request-timeout)",
                status=False, reason=f"no answer within {per_attempt:g} s",
            ) from None
        except openai.APIConnectionError as exc:
            cause = _cause(exc)
            if isinstance(cause, Cancelled):  # the SDK wraps what the transport raised
                raise Cancelled(str(cause)) from None
            if isinstance(cause, UnusableReply):  # SDKs that wrap every send error
                raise ModelError(str(cause)) from None
            raise _Retry(
                f"cannot reach the model endpoint {self.base_url}: {cause} "
                f"({_NOTE}check --base-url / OPENAI_BASE_URL)",
                status=False, reason="cannot connect",
            ) from None
        except openai.OpenAIError as exc:
            raise ModelError(f"the model endpoint's reply could not be used: {exc}") from None
        return response.content, response.headers.get("content-type", "")

    def _status_error(self, exc: openai.APIStatusError) -> Exception:
        """A `_Retry` for the statuses worth retrying, else the final `ModelError`."""
        detail = _error_detail(exc)
        status = exc.status_code
        hint = {401: "; check the API key", 404: "; check --model and --base-url"}
        template = (
            f"the model endpoint {self.base_url} answered HTTP {status}{_NOTE}: "
            f"{detail}{hint.get(status, '')}"
        )
        should = exc.response.headers.get("x-should-retry", "").strip().lower()
        retried = status >= 500 or status in _RETRIED_STATUS
        if should == "false" or (not retried and should != "true"):
            return ModelError(template.replace(_NOTE, ""))
        wait = _retry_after(exc.response.headers)
        return _Retry(template, wait, status=True, reason=f"HTTP {status}")

    def _wait(self, failed: _Retry, attempt: int, deadline: float,
              cancel: Cancellation | None = None) -> None:
        """Sleep before the next attempt, or raise `OutOfTime` when the wait would not fit."""
        wait = failed.wait
        asked = wait is not None
        if wait is None:
            wait = min(INITIAL_BACKOFF_S * 2**attempt, MAX_BACKOFF_S) * (1 - 0.25 * random.random())
        left = deadline - time.monotonic()
        if wait >= left:
            said = f"asked to retry after {wait:g} s" if asked else f"a retry after {wait:.1f} s"
            raise OutOfTime(f"{failed}; {said}, but the run has {max(left, 0):.1f} s left")
        logger.debug("Retrying the model request in %.2f s", wait)
        if cancel is None:
            time.sleep(wait)
        elif cancel.wait(wait):
            cancel.check()


def request_timeout(seconds: float) -> Timeout:
    """The whole request may take `seconds`; connecting, at most `CONNECT_TIMEOUT_S` of them."""
    return Timeout(seconds, connect=min(CONNECT_TIMEOUT_S, seconds))


def _timed(reply: ModelReply, duration: float) -> ModelReply:
    return ModelReply(
        content=reply.content,
        tool_calls=reply.tool_calls,
        usage=reply.usage,
        finish_reason=reply.finish_reason,
        duration_s=duration,
    )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait the endpoint asked for (`retry-after-ms`, `retry-after` seconds or date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            parsed = email.utils.parsedate_tz(value) if name == "retry-after" else None
            if parsed is None:
                continue
            seconds = email.utils.mktime_tz(parsed) - time.time()
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _error_detail(exc: openai.APIStatusError) -> str:
    """The server's own error message when it sent one, else the SDK's; escaped and bounded."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return printable(inner["message"], 300)
    return printable(str(exc.message), 300)


def _cause(exc: BaseException) -> BaseException:
    """The innermost cause: `Connection refused`, not `Connection error.`."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc
