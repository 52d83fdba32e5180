"""A scripted model: a loopback OpenAI-compatible Chat Completions server that replays turns (G8).

`sbx demo` runs the agent against it (clearly labelled, no LLM anywhere), and
the tests use it, so the real `openai` SDK, real HTTP, real retries and real
timeouts are exercised; only the model's choices are scripted.

A script is an ordered queue of turns. A turn is a fixed `Reply` (text,
tool calls, usage), an `HttpFailure` (a status code the SDK may retry), or a
responder: a function of the `ScriptedRequest` that returns either, for
turns that depend on what the model was sent. Every request is recorded. A
request past the end of the script gets HTTP 400 naming its call index (and
`x-should-retry: false`, so the SDK does not retry it); `assert_complete()`
fails if that happened or if turns are left unconsumed.

The server binds 127.0.0.1 on a port the OS chooses, and nothing else.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class ScriptError(AssertionError):
    """The script and the requests disagree: an extra request, leftover turns, a broken turn."""


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


@dataclass(frozen=True, kw_only=True)
class HttpFailure:
    """An HTTP error answer; 408, 409, 429 and 5xx are retried by the SDK."""

    status: int = 500
    """The status code."""
    message: str = "scripted server error"
    """The error message in the body."""
    retry_after_ms: int = 10
    """Sent as `retry-after-ms`, so retries in tests wait milliseconds, not seconds."""


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


Responder = Callable[[ScriptedRequest], Reply | HttpFailure]
Turn = Reply | HttpFailure | Responder


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


class _Server(ThreadingHTTPServer):
    """Quiet about clients that hang up (a timed-out request is a normal test scenario)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Drop the error: the test that caused it sees its own timeout or failure."""


@dataclass(kw_only=True)
class _Script:
    """The queue and the record, shared with the handler threads under one lock."""

    turns: deque[Turn] = field(default_factory=deque)
    requests: list[ScriptedRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedLLM:
    """The server; `start()` it (or use `with`), point the SDK at `base_url`, then `close()`."""

    def __init__(self, turns: Iterable[Turn] = ()) -> None:
        self._script = _Script(turns=deque(turns))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def script(self, turns: Iterable[Turn]) -> None:
        """Append turns to the queue."""
        with self._script.lock:
            self._script.turns.extend(turns)

    @property
    def requests(self) -> list[ScriptedRequest]:
        """Every request received so far, in order."""
        with self._script.lock:
            return list(self._script.requests)

    @property
    def remaining(self) -> int:
        """Turns not consumed yet."""
        with self._script.lock:
            return len(self._script.turns)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`."""
        if self._server is None:
            raise ScriptError("the scripted LLM server is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ScriptedLLM:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread."""
        self._server = _Server(("127.0.0.1", 0), _handler(self._script))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="scripted-llm", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def assert_complete(self) -> None:
        """Fail if a request came that the script did not expect, or turns are left."""
        with self._script.lock:
            problems = list(self._script.problems)
            left = len(self._script.turns)
        if left:
            problems.append(f"{left} scripted turn(s) were never requested")
        if problems:
            raise ScriptError("; ".join(problems))

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler(script: _Script) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to one script."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the record is `ScriptedLLM.requests`."""

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": {"message": "scripted LLM: body is not JSON"}})
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"scripted LLM: no route {self.path}"}})
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            with script.lock:
                request = ScriptedRequest(
                    index=len(script.requests) + 1, path=self.path, headers=headers, body=body
                )
                script.requests.append(request)
                turn = script.turns.popleft() if script.turns else None
                total = len(script.requests) - 1 + len(script.turns) + (turn is not None)
            if turn is None:
                self._unexpected(request, total)
                return
            self._answer(request, turn)

        def _unexpected(self, request: ScriptedRequest, total: int) -> None:
            message = (
                f"scripted LLM: unexpected model call #{request.index} "
                f"(the script had {total} turn(s))"
            )
            with script.lock:
                script.problems.append(message)
            self._send(400, {"error": {"message": message}}, {"x-should-retry": "false"})

        def _answer(self, request: ScriptedRequest, turn: Turn) -> None:
            try:
                reply = turn(request) if callable(turn) else turn
            except Exception as exc:  # a broken responder must fail the test, not hang it
                message = f"scripted LLM: responder for call #{request.index} raised {exc!r}"
                with script.lock:
                    script.problems.append(message)
                self._send(400, {"error": {"message": message}}, {"x-should-retry": "false"})
                return
            if isinstance(reply, HttpFailure):
                error = {"error": {"message": reply.message, "type": "scripted"}}
                self._send(reply.status, error, {"retry-after-ms": str(reply.retry_after_ms)})
                return
            self._send(200, completion(request, reply))

        def _send(
            self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler


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
    return {
        "id": f"chatcmpl-scripted-{request.index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(request.body.get("model", "scripted")),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completed,
            "total_tokens": prompt + completed,
        },
    }
