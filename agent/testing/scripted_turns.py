"""The turns a `ScriptedLLM` can play, and the Chat Completions body it sends for a `Reply`.

A turn is what the server does with one request:

    Reply        a well-formed completion (text, tool calls, usage, finish_reason)
    HttpFailure  an HTTP error with a JSON error body (408, 409, 429 and 5xx are retryable)
    RawReply     any status, headers and body bytes: a proxy's HTML page, hostile JSON
    Hang         read the request and answer nothing until the client gives up
    responder    a function of the `ScriptedRequest` returning any of the above

`RawReply` and `Hang` play a broken or hostile endpoint; `raw_completion`
builds a `RawReply` from a message dict as the endpoint would send it, so a
test can give it list content, an object as arguments, a missing id or
negative token counts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ScriptedCall:
    """One tool call in a scripted reply."""

    name: str
    """The tool name the scripted model asks for."""
    arguments: str
    """The arguments as the raw JSON string the model would send (may be invalid on purpose)."""
    id: str | None = None
    """The tool_call_id; default `call_<request>_<position>`."""


@dataclass(frozen=True, kw_only=True)
class Reply:
    """A successful completion."""

    content: str | None = None
    """The assistant's text."""
    tool_calls: tuple[ScriptedCall, ...] = ()
    """Tool calls, in order."""
    usage: tuple[int, int] | None = None
    """(prompt_tokens, completion_tokens); None: estimated from the sizes (4 chars a token)."""
    finish_reason: str | None = None
    """Sent as is; None: `tool_calls` when there are calls, else `stop`."""


@dataclass(frozen=True, kw_only=True)
class HttpFailure:
    """An HTTP error answer; 408, 409, 429 and 5xx are retried by the client."""

    status: int = 500
    """The status code."""
    message: str = "scripted server error"
    """The error message in the body."""
    retry_after_ms: int = 10
    """Sent as `retry-after-ms`, so retries in tests wait milliseconds, not seconds."""


@dataclass(frozen=True, kw_only=True)
class RawReply:
    """Any HTTP answer, byte for byte, to play a broken endpoint or a proxy in front of one."""

    status: int = 200
    """The status code."""
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)
    """Response headers (content-length is added)."""
    body: bytes = b""
    """The body, sent as is."""
    trickle_s: float = 0.0
    """When set, the whole answer (status line and headers too) goes out one byte at a time,
    this many seconds apart, until it is sent or the server closes: a slow-loris endpoint."""


@dataclass(frozen=True, kw_only=True)
class Hang:
    """Read the request, then send nothing until the client hangs up or the server closes."""


@dataclass(frozen=True, kw_only=True)
class ScriptedRequest:
    """One request as the server received it."""

    index: int
    """1-based position among all requests (retries included)."""
    path: str
    """The URL path, e.g. `/v1/chat/completions`."""
    headers: Mapping[str, str]
    """Request headers, lower-cased names."""
    body: dict[str, Any]
    """The parsed JSON body."""
    raw: bytes = b""
    """The body's bytes as they arrived (what left the client, before any parsing)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation sent."""
        messages: list[dict[str, Any]] = self.body.get("messages", [])
        return messages

    def tool_messages(self) -> list[dict[str, Any]]:
        """The `tool` messages sent, in order."""
        return [m for m in self.messages if m.get("role") == "tool"]

    @property
    def last_tool_message(self) -> str:
        """The content of the last `tool` message ("" when there is none)."""
        tools = self.tool_messages()
        return str(tools[-1].get("content") or "") if tools else ""


Answer = Reply | HttpFailure | RawReply | Hang
Responder = Callable[[ScriptedRequest], Answer]
Turn = Answer | Responder


def assistant(text: str, *, usage: tuple[int, int] | None = None) -> Reply:
    """A final answer."""
    return Reply(content=text, usage=usage)


def call(name: str, call_id: str | None = None, /, **arguments: Any) -> ScriptedCall:
    """A tool call with JSON-encoded keyword arguments."""
    return ScriptedCall(name=name, arguments=json.dumps(arguments), id=call_id)


def tool_calls(
    *calls: ScriptedCall, content: str | None = None, usage: tuple[int, int] | None = None
) -> Reply:
    """A reply asking for several tool calls at once."""
    return Reply(content=content, tool_calls=calls, usage=usage)


def tool_call(name: str, call_id: str | None = None, /, **arguments: Any) -> Reply:
    """A reply asking for one tool call."""
    return Reply(tool_calls=(call(name, call_id, **arguments),))


def raw_completion(
    message: Mapping[str, Any],
    *,
    usage: Any = None,
    finish_reason: Any = "stop",
    content_type: str = "application/json",
) -> RawReply:
    """A 200 `chat.completion` whose message and usage are sent exactly as given (None: omitted)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-raw",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "scripted",
        "choices": [{"index": 0, "message": dict(message), "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage
    return RawReply(headers=(("content-type", content_type),), body=json.dumps(body).encode())


def turn_from_dict(data: Mapping[str, Any]) -> Reply | HttpFailure:
    """A turn from its JSON form (`tests/fixtures/turns/*.json`)."""
    if "status" in data:
        return HttpFailure(status=int(data["status"]), message=str(data.get("message", "error")))
    calls = []
    for item in data.get("tool_calls", []):
        arguments = item.get("arguments", {})
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(ScriptedCall(name=item["name"], arguments=raw, id=item.get("id")))
    usage = data.get("usage")
    return Reply(
        content=data.get("content"),
        tool_calls=tuple(calls),
        usage=(int(usage[0]), int(usage[1])) if usage else None,
    )


def load_turns(path: Path) -> list[Turn]:
    """The turns of a JSON script file: `{"turns": [...]}`."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [turn_from_dict(item) for item in data["turns"]]


def completion(request: ScriptedRequest, reply: Reply) -> dict[str, Any]:
    """The `chat.completion` object for a scripted reply."""
    calls = [
        {
            "id": item.id or f"call_{request.index}_{position}",
            "type": "function",
            "function": {"name": item.name, "arguments": item.arguments},
        }
        for position, item in enumerate(reply.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = calls
    if reply.usage is not None:
        prompt, completed = reply.usage
    else:
        prompt = len(json.dumps(request.messages)) // 4 + 1
        written = len(reply.content or "") + sum(len(c.arguments) for c in reply.tool_calls)
        completed = written // 4 + 1
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    return {
        "id": f"chatcmpl-scripted-{request.index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.body.get("model", "scripted")),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completed,
            "total_tokens": prompt + completed,
        },
    }
