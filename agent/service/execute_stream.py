"""`POST /v1/execute` streamed: the program's output as Server-Sent Events while it runs.

A caller that asks for `Accept: text/event-stream` gets

    event: output
    data: {"stream": "stdout", "text": "step 1 of 3\n"}

    event: result
    data: {"run_id": "run-...", "status": "ok", "observation": "...", ...}

`output` events carry what the sandbox streamed (the head of each stream,
bounded by the caps, C25; the head's last part follows as the program ends, so
its lines end whole), then one `result` event with the same document the
JSON answer has, or one `error` event with a problem document (RFC 9457) when
the execution could not run. The execution runs on a thread of its own; the
events reach the client through a queue. A client that goes away cancels the
execution (its sandbox is removed), as `POST /v1/runs/{id}/cancel` does for a run.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from pydantic import BaseModel

from sbx.agent.service.problems import Problem, document
from sbx.agent.service.sse import KEEPALIVE_S

logger = logging.getLogger(__name__)

Work = Callable[[Callable[[str, str, str], None]], BaseModel]
"""Runs the execution, handing output to the sink `(call_id, stream, text)`; the result."""


class ExecutionStream:
    """One streamed execution: the worker thread, its events, and its cancellation."""

    def __init__(self, work: Work, *, cancel: Callable[[], None], request_id: str) -> None:
        self._work = work
        self._cancel = cancel
        self._request_id = request_id
        self._events: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._done = threading.Event()

    def start(self) -> ExecutionStream:
        """Start the execution on its own thread."""
        threading.Thread(target=self._run, name="sbx-execute-stream", daemon=True).start()
        return self

    async def events(self) -> AsyncIterator[str]:
        """The SSE text, until the result; a client that leaves cancels the execution."""
        try:
            while True:
                item = await anyio.to_thread.run_sync(self._next, abandon_on_cancel=True)
                if item is None:
                    return
                kind, data = item
                yield f"event: {kind}\ndata: {data}\n\n" if kind else ": keepalive\n\n"
        finally:
            if not self._done.is_set():  # the client left: stop the code (off the event loop)
                threading.Thread(target=self._cancel, name="sbx-execute-cancel").start()

    def _next(self) -> tuple[str, str] | None:
        try:
            return self._events.get(timeout=KEEPALIVE_S)
        except queue.Empty:
            return ("", "")

    def _output(self, call_id: str, stream: str, text: str) -> None:
        del call_id
        self._events.put(("output", json.dumps({"stream": stream, "text": text})))

    def _run(self) -> None:
        try:
            result = self._work(self._output)
            self._events.put(("result", result.model_dump_json()))
        except Problem as problem:
            self._events.put(("error", _json(document(problem, self._request_id))))
        except Exception:
            logger.exception("a streamed execution failed (request %s)", self._request_id)
            internal = Problem(500, "internal", "the execution failed on the server; see its log")
            self._events.put(("error", _json(document(internal, self._request_id))))
        finally:
            self._done.set()
            self._events.put(None)


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False)
