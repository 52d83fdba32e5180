"""What one model reply is (`ModelReply`), parsed from the endpoint's bytes by us, trusting nothing.

The endpoint sits outside the trust boundary: a proxy in front of it may
answer a 200 with an HTML page, a server may send content as a list of parts,
an object where a string belongs, token counts that are negative, fractional
or missing, tool-call ids that are missing or repeated, lone surrogates, or
megabytes of text. `parse_reply` turns the body into a `ModelReply` or one
`ModelError` that says what came, so nothing after it (the loop, the gate,
the transcript, the audit log, a terminal) sees anything but well-formed,
bounded text:

    body        not JSON, not an object, no choice        -> ModelError naming what came
    content     a string; a list of parts -> their text joined; else ModelError;
                cut at `max_answer_chars` with a marker saying so
    tool_calls  a list of objects; names cut at 128 characters; arguments a string,
                or an object or array sent as its JSON text; an id the model did not
                send, sent twice in the reply or longer than 128 characters is replaced
                by one sbx makes (the model's stays in `model_id`)
    usage       each count a non-negative integer, else estimated from the sizes
                (4 characters a token) and flagged `estimated`
    any string  lone surrogates (invalid in UTF-8) become U+FFFD
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from sbx.sandbox.errors import SbxError

CHARS_PER_TOKEN = 4
"""The estimate used when the endpoint reports no usable token count (as in `compaction`)."""
MAX_NAME_CHARS = 128
MAX_ID_CHARS = 128
MAX_FINISH_CHARS = 64
_SURROGATES = re.compile("[\ud800-\udfff]")


class ModelError(SbxError):
    """The model endpoint failed after the retries, or replied with something unusable."""


@dataclass(frozen=True, kw_only=True)
class TokenUsage:
    """Token counts of a request (or a run): the endpoint's when usable, else estimated."""

    prompt_tokens: int = 0
    """Tokens in the request's messages and tools."""
    completion_tokens: int = 0
    """Tokens the model generated."""
    total_tokens: int = 0
    """What the budget counts: at least prompt plus completion, whatever the endpoint says."""
    estimated: bool = False
    """Some count was missing or unusable (negative, not an integer) and was estimated."""

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            estimated=self.estimated or other.estimated,
        )

    def as_dict(self) -> dict[str, Any]:
        """For the transcript and `--json`."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "estimated": self.estimated,
        }


@dataclass(frozen=True, kw_only=True)
class ToolCallRequest:
    """One tool call as the model wrote it; `arguments` is the raw JSON text, unchecked."""

    id: str
    """The `tool_call_id` the answering `tool` message carries: the model's, or one sbx made."""
    model_id: str | None
    """The id the model sent (cut at 128 characters), or None; kept in the audit as data."""
    name: str
    """The tool the model asked for (it may not exist: the gate says so)."""
    arguments: str
    """The arguments as sent (possibly invalid JSON or over the cap: the gate says so)."""
    kept_arguments: str | None = None
    """What the conversation keeps instead of `arguments` when they are over the cap."""


@dataclass(frozen=True, kw_only=True)
class ModelReply:
    """One assistant reply, reduced to what the loop acts on."""

    content: str | None
    """The assistant's text (the answer, when there are no tool calls), bounded."""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    """The calls to run, in the order the model listed them."""
    usage: TokenUsage = field(default_factory=TokenUsage)
    """Tokens this request cost."""
    finish_reason: str | None = None
    """Why the model stopped (`stop`, `tool_calls`, `length`, ...)."""
    duration_s: float = 0.0
    """Wall-clock seconds of the request, retries included."""

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation, in Chat Completions form."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": (
                            call.arguments if call.kept_arguments is None else call.kept_arguments
                        ),
                    },
                }
                for call in self.tool_calls
            ]
        return message


@dataclass(frozen=True, kw_only=True)
class ReplyLimits:
    """The caps a reply is held to (from `AgentSettings`), and the prompt's estimated size."""

    max_answer_chars: int
    """Longer text is cut, with a marker."""
    max_argument_bytes: int
    """Longer arguments are passed to the gate (which refuses them) but not kept."""
    prompt_estimate: int
    """Estimated prompt tokens, used when the endpoint's count is unusable."""


def parse_reply(body: bytes, content_type: str, limits: ReplyLimits) -> ModelReply:
    """Parse a `chat.completion` body; raise `ModelError` for anything unusable."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        kind = printable(content_type, 60)
        start = printable(body.decode("utf-8", "replace"), 120)
        raise ModelError(
            f"the model endpoint's reply is not JSON (content-type '{kind}', {len(body)} bytes): "
            f"'{start}'"
        ) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices:
        raise ModelError(
            "the model endpoint sent a reply without any choice: "
            f"'{printable(json.dumps(data), 120)}'"
        )
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ModelError("the model endpoint sent a choice without a message object")
    content = _content(message.get("content"), limits.max_answer_chars)
    calls = _tool_calls(message.get("tool_calls"), limits.max_argument_bytes)
    finish = choice.get("finish_reason")
    written = len(content or "") + sum(len(call.arguments) for call in calls)
    return ModelReply(
        content=content,
        tool_calls=calls,
        usage=_usage(data.get("usage"), limits.prompt_estimate, written // CHARS_PER_TOKEN + 1),
        finish_reason=clean(finish)[:MAX_FINISH_CHARS] if isinstance(finish, str) else None,
    )


def clean(text: str) -> str:
    """The text with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8."""
    return _SURROGATES.sub("\ufffd", text)


def clean_value(value: Any) -> Any:
    """A copy of a JSON-like value with every string `clean`: what may be sent as UTF-8."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean_value(key): clean_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [clean_value(item) for item in value]
    return value


def printable(text: str, limit: int) -> str:
    """Endpoint-controlled text for a message: one line, controls escaped, at most `limit` chars.

    Control, format (bidi) and other unprintable characters become `\\uXXXX`-style
    escapes, so the text cannot move a terminal's cursor or reorder what it shows.
    """
    text = " ".join(clean(text).split())
    text = text if len(text) <= limit else text[:limit] + "..."
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def _content(value: Any, limit: int) -> str | None:
    """A string, the text parts of a list joined, or None; cut at `limit` characters."""
    if value is None:
        return None
    if isinstance(value, list):
        parts = [_part_text(part) for part in value]
        texts = [part for part in parts if part is not None]
        value = "".join(texts) if texts else None
        if value is None:
            return None
    if not isinstance(value, str):
        raise ModelError(
            f"the model endpoint sent message content of JSON type {_json_type(value)}; "
            "expected a string or a list of text parts"
        )
    text = clean(value)
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n[sbx: the answer was cut here: the model wrote {len(text)} characters, "
        f"over max_answer_chars of {limit}]"
    )


def _part_text(part: Any) -> str | None:
    """The text of one content part (`{"type": "text", "text": ...}` or a plain string)."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return str(part["text"])
    return None


def _tool_calls(value: Any, max_argument_bytes: int) -> tuple[ToolCallRequest, ...]:
    """Each call with a usable id, a bounded name and its arguments as text."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ModelError(
            f"the model endpoint sent tool_calls of JSON type {_json_type(value)}; expected a list"
        )
    calls: list[ToolCallRequest] = []
    seen: set[str] = set()
    for item in value:
        if not isinstance(item, dict):
            raise ModelError("the model endpoint sent a tool call that is not a JSON object")
        call = _tool_call(item, seen, max_argument_bytes)
        seen.add(call.id)
        calls.append(call)
    return tuple(calls)


def _tool_call(item: dict[str, Any], seen: set[str], max_argument_bytes: int) -> ToolCallRequest:
    """One call; its id is the model's unless missing, too long or already used in the reply."""
    function = item.get("function") or item.get("custom")  # `custom`: free-form tools
    function = function if isinstance(function, dict) else {}
    raw_id = item.get("id")
    model_id: str | None = None
    call_id = f"call_sbx_{secrets.token_hex(8)}"
    if isinstance(raw_id, str) and raw_id:
        model_id = clean(raw_id)[:MAX_ID_CHARS]
        if len(raw_id) <= MAX_ID_CHARS and model_id not in seen:
            call_id = model_id
    name = function.get("name")
    raw = function["arguments"] if "arguments" in function else function.get("input")
    arguments = _arguments(raw)
    size = len(arguments.encode("utf-8"))
    kept = None
    if size > max_argument_bytes:
        note = f"{size} bytes of arguments not kept: over max_argument_bytes, {max_argument_bytes}"
        kept = json.dumps({"sbx_note": note})
    return ToolCallRequest(
        id=call_id,
        model_id=model_id,
        name=clean(name)[:MAX_NAME_CHARS] if isinstance(name, str) else "",
        arguments=arguments,
        kept_arguments=kept,
    )


def _arguments(value: Any) -> str:
    """The arguments as JSON text: a string as sent; an object (or other JSON) as its text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return clean(value)
    return clean(json.dumps(value, ensure_ascii=False))


def _usage(value: Any, prompt_estimate: int, completion_estimate: int) -> TokenUsage:
    """The endpoint's counts where usable; missing, negative or non-integer ones are estimated."""
    counts = value if isinstance(value, dict) else {}
    prompt = _count(counts.get("prompt_tokens"))
    completion = _count(counts.get("completion_tokens"))
    total = _count(counts.get("total_tokens"))
    estimated = prompt is None or completion is None or total is None
    prompt = prompt_estimate if prompt is None else prompt
    completion = completion_estimate if completion is None else completion
    return TokenUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=max(total or 0, prompt + completion),
        estimated=estimated,
    )


def _count(value: Any) -> int | None:
    """A token count if it is a non-negative JSON integer (not a bool, not 3.0), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
        return value
    return None


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", float: "number"}
    return names.get(type(value), "number" if isinstance(value, int) else "null")
