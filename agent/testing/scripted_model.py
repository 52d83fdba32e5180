"""A scripted model: a loopback OpenAI-compatible Chat Completions server that replays turns.

`sbx demo` runs the agent against it (clearly labelled, no LLM anywhere), and
the tests use it, so the real `openai` SDK, real HTTP, real retries and real
timeouts are exercised; only the model's choices are scripted.

A script is an ordered queue of turns (`agent.cli.scripted_turns`): a fixed
`Reply` (text, tool calls, usage), an `HttpFailure` (a status code the client
may retry), a `RawReply` or a `Hang` (a broken endpoint), or a responder: a
function of the `ScriptedRequest` that returns one of them, for turns that
depend on what the model was sent. Every request is recorded. A request past
the end of the script gets HTTP 400 naming its call index (and
`x-should-retry: false`, so the client does not retry it); `assert_complete()`
fails if that happened or if turns are left unconsumed.

The server binds 127.0.0.1 on a port the OS chooses, and nothing else.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sbx.agent.testing.scripted_turns import (
    Hang,
    HttpFailure,
    RawReply,
    Reply,
    Responder,
    ScriptedCall,
    ScriptedRequest,
    Turn,
    assistant,
    call,
    completion,
    load_turns,
    raw_completion,
    tool_call,
    tool_calls,
    turn_from_dict,
)

__all__ = [
    "Hang", "HttpFailure", "RawReply", "Reply", "Responder", "ScriptError", "ScriptedCall",
    "ScriptedLLM", "ScriptedRequest", "Turn", "assistant", "call", "completion", "load_turns",
    "raw_completion", "tool_call", "tool_calls", "turn_from_dict",
]


class ScriptError(AssertionError):
    """The script and the requests disagree: an extra request, leftover turns, a broken turn."""


class _Server(ThreadingHTTPServer):
    """Quiet about clients that hang up (a timed-out request is a normal test scenario).

    Its listen queue holds a burst: with socketserver's default of 5, 32 conversations
    opening their model connections at once overflowed it (the kernel's ListenOverflows
    counter rose by 13 in one `sbx bench serve` run), and each dropped connection waited
    for the client's SYN retry, a second or more, inside the measured answer.
    """

    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Drop the error: the test that caused it sees its own timeout or failure."""


@dataclass(kw_only=True)
class _Script:
    """The queue and the record, shared with the handler threads under one lock."""

    turns: deque[Turn] = field(default_factory=deque)
    requests: list[ScriptedRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)
    """Set by `close()`: a `Hang` turn stops waiting."""


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
        self._script.closing.set()
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
    return type("Handler", (_Handler,), {"script": script})


class _Handler(BaseHTTPRequestHandler):
    """Serves `script` (set on the subclass `_handler` makes)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    script: _Script

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the record is `ScriptedLLM.requests`."""

    def do_POST(self) -> None:
        """Record the request, take the next turn, play it."""
        script = self.script
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "scripted LLM: body is not JSON"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"scripted LLM: no route {self.path}"}})
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        with script.lock:
            request = ScriptedRequest(
                index=len(script.requests) + 1, path=self.path, headers=headers, body=body,
                raw=raw,
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
        with self.script.lock:
            self.script.problems.append(message)
        self._send(400, {"error": {"message": message}}, {"x-should-retry": "false"})

    def _answer(self, request: ScriptedRequest, turn: Turn) -> None:
        try:
            reply = turn(request) if callable(turn) else turn
        except Exception as exc:  # a broken responder must fail the test, not hang it
            message = f"scripted LLM: responder for call #{request.index} raised {exc!r}"
            with self.script.lock:
                self.script.problems.append(message)
            self._send(400, {"error": {"message": message}}, {"x-should-retry": "false"})
            return
        match reply:
            case HttpFailure():
                error = {"error": {"message": reply.message, "type": "scripted"}}
                self._send(reply.status, error, {"retry-after-ms": str(reply.retry_after_ms)})
            case RawReply(trickle_s=trickle) if trickle > 0:
                self._trickle(reply)
            case RawReply():
                self._send_bytes(reply.status, dict(reply.headers), reply.body)
            case Hang():
                self.script.closing.wait()
                self.close_connection = True
            case Reply():
                self._send(200, completion(request, reply))

    def _send(
        self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self._send_bytes(status, {"content-type": "application/json", **(headers or {})}, data)

    def _trickle(self, reply: RawReply) -> None:
        """Send the answer a byte at a time; stop when the client hangs up or the server closes."""
        lines = [f"HTTP/1.1 {reply.status} Scripted", *(f"{k}: {v}" for k, v in reply.headers)]
        lines.append(f"content-length: {len(reply.body)}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode() + reply.body
        self.close_connection = True
        for index in range(len(data)):
            if self.script.closing.wait(reply.trickle_s):
                return
            try:
                self.wfile.write(data[index : index + 1])
                self.wfile.flush()
            except OSError:
                return

    def _send_bytes(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
