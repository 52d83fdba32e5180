"""A long execution's progress carries its newest output line.

`LiveTail` is fed as the gate's output sink feeds it; the docker test runs
the real `sbx mcp` with the SDK's client and waits for the progress
notification that carries a line the running code printed.
"""

from __future__ import annotations

import anyio
import pytest

from mcp_support import mcp_client
from sbx.agent.mcp.live_tail import MAX_LINE_CHARS, LiveTail


def test_the_newest_complete_line_is_kept_escaped_and_cut() -> None:
    tail = LiveTail()
    assert tail.newest_line() is None
    tail.add("c1", "stdout", "loading\nhalf")
    assert tail.newest_line() == "loading"  # an unfinished line is not shown yet
    tail.add("c1", "stdout", "way\n\n")
    assert tail.newest_line() == "halfway"
    tail.add("c1", "stderr", "warn: \x1b[2J\u202eslow\n")
    assert tail.newest_line() == "warn: \\x1b[2J\\u202eslow"
    tail.add("c1", "stdout", "x" * 10_000 + "\n")
    line = tail.newest_line()
    assert line is not None and len(line) == MAX_LINE_CHARS and line.endswith("…")
    tail.start()
    assert tail.newest_line() is None  # the next call shows nothing of this one


def test_a_line_without_an_end_holds_bounded_memory() -> None:
    tail = LiveTail()
    for _ in range(1000):
        tail.add("c1", "stdout", "y" * 10_000)
    assert tail.newest_line() is None
    assert sum(len(part) for part in tail._pending.values()) <= 4096


@pytest.mark.docker
def test_progress_of_a_long_execution_carries_what_it_printed(tmp_path) -> None:
    messages: list[str] = []

    async def scenario() -> None:
        async with mcp_client(tmp_path) as client:
            seen = anyio.Event()

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                messages.append(message or "")
                if "halfway" in (message or ""):
                    seen.set()

            code = "print('\\x1b[2Jhalfway', flush=True)\nwhile True: pass"
            with anyio.fail_after(120):  # only stops a hung test; the wait is on the event
                async with anyio.create_task_group() as group:
                    group.start_soon(
                        lambda: client.call_tool(
                            "execute_python", {"code": code}, progress_callback=on_progress
                        )
                    )
                    await seen.wait()
                    group.cancel_scope.cancel()

    anyio.run(scenario)
    carrying = [message for message in messages if "halfway" in message]
    assert carrying[0].endswith("; last output: \\x1b[2Jhalfway")
    assert "time limit 30 s" in carrying[0]
