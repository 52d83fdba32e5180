"""The streamed `/v1/execute`'s plumbing: event order, errors, and a client that leaves early.

The docker tests in test_service_execute.py run it end to end; these pin the
cases a real server cannot time: a client gone before the gate exists, and a
stream closed while the work still runs.
"""

from __future__ import annotations

import json
import threading

import anyio
from pydantic import BaseModel

from sbx.agent.model.cancellation import Cancellation
from sbx.agent.service.execute_stream import ExecutionStream
from sbx.agent.service.problems import Problem


class Result(BaseModel):
    status: str


class Gate:
    """Stands in for the gate: only whether it was cancelled matters here."""

    def __init__(self) -> None:
        self.cancels = 0

    def cancel(self) -> None:
        self.cancels += 1


def collect(stream: ExecutionStream) -> list[tuple[str, object]]:
    async def read() -> list[tuple[str, object]]:
        events = []
        async for text in stream.events():
            kind, data = text.split("\n")[:2]
            events.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
        return events

    return anyio.run(read)


def test_output_then_the_result_in_order() -> None:
    def work(sink):
        sink("call-1", "stdout", "one\n")
        sink("call-1", "stderr", "<b>two</b>\n")
        return Result(status="ok")

    stream = ExecutionStream(work, cancel=lambda: None, request_id="req-1").start()
    assert collect(stream) == [
        ("output", {"stream": "stdout", "text": "one\n"}),
        ("output", {"stream": "stderr", "text": "<b>two</b>\n"}),
        ("result", {"status": "ok"}),
    ]


def test_a_problem_or_a_crash_ends_the_stream_with_a_problem_document() -> None:
    def refused(sink):
        raise Problem(503, "busy", "the host is at its sandbox cap")

    def crashed(sink):
        raise RuntimeError("/secret/path leaked?")

    [(kind, body)] = collect(ExecutionStream(refused, cancel=lambda: None, request_id="r").start())
    assert kind == "error" and body["status"] == 503 and body["request_id"] == "r"
    [(kind, body)] = collect(ExecutionStream(crashed, cancel=lambda: None, request_id="r").start())
    assert kind == "error" and body["status"] == 500 and "secret" not in json.dumps(body)


def test_a_client_that_closes_the_stream_cancels_the_running_work() -> None:
    started, cancelled = threading.Event(), threading.Event()

    def work(sink):
        sink("call-1", "stdout", "started\n")
        started.set()
        cancelled.wait(30)  # the code runs until the cancellation comes
        return Result(status="cancelled")

    stream = ExecutionStream(work, cancel=cancelled.set, request_id="r").start()

    async def leave_after_the_first_event() -> None:
        events = stream.events()
        await events.__anext__()
        await events.aclose()  # what Starlette does when the client disconnects

    anyio.run(leave_after_the_first_event)
    assert cancelled.wait(30) and started.is_set()


def test_a_gate_watched_after_the_client_left_is_cancelled_at_once() -> None:
    cancellation, early, late = Cancellation(), Gate(), Gate()
    cancellation.on_cancel(early.cancel)
    assert early.cancels == 0
    cancellation.cancel()
    assert early.cancels == 1
    cancellation.on_cancel(late.cancel)  # the sandbox was still starting
    assert late.cancels == 1
