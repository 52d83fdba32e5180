"""A conversation's subscribers see an execution's output while it runs.

`Session.run(on_output=...)` is passed through the workspace and the gate's per-call
`ToolContext` to the conversation, which emits `output_chunk` events (run id, call id,
stream, bounded text) to its subscribers only; the transcript keeps the output where it
always did, in `tool_result`. The CLI's progress shows the lines dimmed and escaped.
Real Docker, the real SDK over HTTP to the scripted server; only the model is scripted.
"""

from __future__ import annotations

import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.display import MAX_LIVE_LINES, Progress
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.events import (
    MAX_OUTPUT_CHUNK_CHARS,
    Event,
    OutputChunk,
    ToolResult,
    output_chunks,
)
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

WAITS = (
    "import os, time\nprint('step 1', flush=True)\n"
    "while not os.path.exists('/tmp/go'):\n    time.sleep(0.01)\nprint('step 2')"
)


@pytest.mark.docker
def test_subscribers_see_output_while_the_code_runs(llm, tmp_path: Path, engine) -> None:
    llm.script([tool_call("execute_python", code=WAITS), assistant("Done.")])
    seen: list[Event] = []
    first_chunk = threading.Event()

    def subscriber(event: Event) -> None:
        seen.append(event)
        if isinstance(event, OutputChunk) and "step 1" in event.text:
            first_chunk.set()

    app = App.open(
        load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE
    )
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    with app, app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "c.jsonl") as conv:
        conv.subscribe(subscriber)
        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(conv.ask, "Count the steps.")
            arrived = first_chunk.wait(timeout=120)
            session = conv.workspace._session
            assert session is not None and session.container_id is not None
            still_running = not any(isinstance(event, ToolResult) for event in seen)
            exec_id = engine.api.exec_create(session.container_id, ["touch", "/tmp/go"])["Id"]
            engine.api.exec_start(exec_id)
            result = asked.result(timeout=180)
    assert arrived and still_running, seen
    assert result.status == "completed"
    chunks = [event for event in seen if isinstance(event, OutputChunk)]
    (tool_result,) = [event for event in seen if isinstance(event, ToolResult)]
    assert seen.index(chunks[0]) < seen.index(tool_result)
    assert {(c.run_id, c.call_id, c.stream) for c in chunks} == {
        (result.run_id, tool_result.call_id, "stdout")
    }
    assert "".join(c.text for c in chunks).startswith("step 1\n")
    assert tool_result.execution is not None
    assert tool_result.execution.stdout == "step 1\nstep 2\n"  # the observation's shape
    lines = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert "output_chunk" not in {line["type"] for line in lines}  # subscribers only


def test_a_long_chunk_becomes_bounded_events() -> None:
    events = output_chunks("run-1", "call_1", "stderr", "x" * (2 * MAX_OUTPUT_CHUNK_CHARS + 5))
    assert [len(e.text) for e in events] == [MAX_OUTPUT_CHUNK_CHARS] * 2 + [5]
    assert {(e.run_id, e.call_id, e.stream) for e in events} == {("run-1", "call_1", "stderr")}


def test_progress_shows_whole_live_lines_escaped_and_bounded() -> None:
    out = io.StringIO()
    progress = Progress(out)
    chunk = {"type": "output_chunk", "run_id": "r", "call_id": "c1", "stream": "stdout"}
    ended = {"type": "tool_result", "turn": 1, "name": "execute_python", "status": "ok",
             "failed": False, "content": "[stdout]\nplain"}
    progress({**chunk, "text": "plain\n\x1b[2Jcleared?\x9b\npart"})
    progress({**chunk, "text": "ial\n"})
    progress({**chunk, "stream": "stderr", "text": "warn\u202eing"})  # no newline yet
    progress({**ended, "call_id": "c1"})
    progress({**chunk, "call_id": "c2", "text": "".join(f"{i}\n" for i in range(1000))})
    progress({**ended, "call_id": "c2"})
    shown = out.getvalue().splitlines()
    assert shown[:4] == [
        "   > plain", "   > \\x1b[2Jcleared?\\x9b", "   > partial", "   2> warn\\u202eing",
    ]  # the unfinished stderr line is shown when its call ends
    assert shown[4].startswith("<- ok")
    assert "\x1b" not in out.getvalue() and "\u202e" not in out.getvalue()
    assert sum(line.startswith("   > ") for line in shown[5:]) == MAX_LIVE_LINES
    assert any("more output while it runs is not shown" in line for line in shown)
    assert shown[-1].startswith("<- ok")


SLOW_NUMBER = (  # print writes 'TOTAL ' first; the number comes within one frame interval
    "import time\nclass Total:\n    def __str__(self):\n        time.sleep(0.005)\n"
    "        return '1234.5'\ntime.sleep(0.01)\nprint('TOTAL', Total())"
)


@pytest.mark.docker
def test_a_printed_line_reaches_the_events_and_the_progress_whole(llm, tmp_path, engine) -> None:
    """`print('TOTAL', x)` was shown live as `> TOTAL`: the runner had streamed `TOTAL ` and
    the number came with the result, which never reached the subscribers."""
    llm.script([tool_call("execute_python", code=SLOW_NUMBER), assistant("It is 1234.5.")])
    chunks: list[OutputChunk] = []
    shown = io.StringIO()
    progress = Progress(shown)
    app = App.open(
        load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE
    )
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "out")
    with app, app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "c.jsonl") as conv:
        conv.subscribe(lambda e: chunks.append(e) if isinstance(e, OutputChunk) else None)
        conv.subscribe(progress)
        result = conv.ask("What is the total?")
    assert result.status == "completed"
    assert "".join(chunk.text for chunk in chunks) == "TOTAL 1234.5\n"
    assert "   > TOTAL 1234.5" in shown.getvalue().splitlines()
