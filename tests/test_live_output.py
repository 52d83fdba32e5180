"""Stdout and stderr reach the host while the code runs, and survive a kill.

The runner streams the head of each stream in `output` frames as it is printed;
`Session.run(on_output=...)` sees it while the program runs, and the result keeps the
same text in the same shape as before. On the landed code nothing came before the end,
and under gVisor a program killed at the memory limit lost everything it printed.
Every wait here is on an event (a chunk arriving, a file the test creates with
`docker exec`), never on the clock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker

WAIT_FOR_GO = """
while not os.path.exists("/tmp/go"):
    time.sleep(0.01)
"""


@pytest.fixture
def long_session(engine: Engine, runtime: str, tmp_path: Path) -> Iterator[Session]:
    """A session whose timeout leaves room for `docker exec` on a loaded host."""
    limits = Limits(timeout="60s", runtime=runtime)
    spec = SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path)
    with Session.open(spec, engine=engine) as live:
        yield live


class Listener:
    """Collects live chunks; `wait_for(text)` returns once `text` has arrived."""

    def __init__(self) -> None:
        self.chunks: list[tuple[str, str]] = []
        self._changed = threading.Condition()

    def __call__(self, stream: str, text: str) -> None:
        with self._changed:
            self.chunks.append((stream, text))
            self._changed.notify_all()

    def text(self, stream: str) -> str:
        with self._changed:
            return "".join(text for kind, text in self.chunks if kind == stream)

    def wait_for(self, wanted: str, stream: str = "stdout") -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: wanted in self.text(stream), timeout=60)


def create_go_file(engine: Engine, container_id: str | None) -> None:
    """What the waiting program waits for, created from outside (root, through the engine).

    The program ends as soon as the file exists, and the runner then kills every process
    left in the container: on a loaded host that can be `touch` itself, not yet gone
    (exit 137 after its work). So the exit code proves nothing; the run ending does.
    """
    assert container_id is not None
    exec_id = engine.api.exec_create(container_id, ["touch", "/tmp/go"])["Id"]
    engine.api.exec_start(exec_id)
    assert engine.api.exec_inspect(exec_id)["ExitCode"] in (0, 137)


def run_until_printed(
    session: Session, engine: Engine, code: str, wanted: str
) -> tuple[ExecutionResult, Listener]:
    """Run `code`; once `wanted` has arrived live, let it go on (create /tmp/go)."""
    listener = Listener()
    container_id = session.container_id
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(session.run, code, on_output=listener)
        arrived = listener.wait_for(wanted)
        if arrived:
            assert not running.done(), "the chunk came with the result, not while it ran"
        create_go_file(engine, container_id)  # also on failure: the program must end
        result = running.result(timeout=180)
    assert arrived, f"{wanted!r} never arrived while the program ran: {listener.chunks}"
    return result, listener


PRINTS_THEN_WAITS = (
    "import os, sys, time\nprint('started')\nprint('to stderr', file=sys.stderr)\n"
    + WAIT_FOR_GO
    + "print('finished')\n"
)


def test_output_arrives_while_the_program_runs(long_session: Session, engine: Engine) -> None:
    result, listener = run_until_printed(long_session, engine, PRINTS_THEN_WAITS, "started\n")
    assert result.ok and result.stdout == "started\nfinished\n"
    assert result.stderr == "to stderr\n"  # whether it streamed or came with the result
    assert listener.text("stdout").startswith("started\n")
    assert long_session.run("print('next')").stdout == "next\n"  # the session goes on


MEMORY_BOMB = (
    "import os, time\nprint('printed before the bomb')\n"
    + WAIT_FOR_GO
    + "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))\n"
)


def test_output_printed_before_an_oom_kill_survives(long_session: Session, engine: Engine) -> None:
    """Under gVisor the memory limit kills the whole sandbox, runner included: the landed
    code came back with the kill note alone. Under runc the runner survives and drains."""
    result, _ = run_until_printed(long_session, engine, MEMORY_BOMB, "printed before the bomb")
    assert result.oom_killed and result.exit_code == 137 and not result.ok
    assert result.stdout.startswith("printed before the bomb\n"), result
    assert any("memory limit" in note for note in result.notes), result.notes
    after = long_session.run("print('alive')")  # a new interpreter, or a new container
    assert after.stdout == "alive\n"


def test_streamed_output_reads_as_buffered_output(engine: Engine, runtime: str, tmp_path) -> None:
    """The same programs, with and without live output: the results are equal, whole
    characters everywhere (a 3-byte character straddles the head's end and a pipe read)."""
    programs = [
        "import sys\nsys.stdout.write('\u20ac' * 200_000)\n_ = sys.stderr.write('\u00e9' * 10)",
        "print('\u20ac' * 100)\nprint('tail')",
        "import sys\nfor i in range(2000):\n    print(i, '\u00e9' * (i % 7))",
    ]
    limits = Limits(runtime=runtime, stdout_bytes="400k")
    results: dict[bool, list[ExecutionResult]] = {}
    for streaming in (True, False):
        spec = SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path / str(streaming))
        with Session.open(spec, engine=engine) as session:
            session.stream_output = streaming
            listener = Listener()
            results[streaming] = [session.run(code, on_output=listener) for code in programs]
            assert bool(listener.chunks) is streaming
            assert "\ufffd" not in listener.text("stdout")  # no character cut between chunks
    for streamed, buffered in zip(results[True], results[False], strict=True):
        assert streamed.stdout == buffered.stdout and streamed.stderr == buffered.stderr
        assert streamed.stdout_dropped_bytes == buffered.stdout_dropped_bytes
    assert results[True][0].stdout_dropped_bytes == 600_000 - 400 * 1024


def test_a_callback_that_raises_is_dropped_and_the_execution_goes_on(
    long_session: Session, engine: Engine
) -> None:
    calls: list[str] = []

    def broken(stream: str, text: str) -> None:
        calls.append(text)
        raise RuntimeError("a broken subscriber")

    code = "import os, time\nprint('one')\n" + WAIT_FOR_GO + "print('two')"
    listener = Listener()

    def both(stream: str, text: str) -> None:
        listener(stream, text)
        broken(stream, text)

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(long_session.run, code, on_output=both)
        assert listener.wait_for("one")
        create_go_file(engine, long_session.container_id)
        result = running.result(timeout=180)
    assert result.ok and result.stdout == "one\ntwo\n"
    # Called once, then dropped (the first chunk may be "one" alone when the newline comes
    # in a later read of the pipe).
    assert len(calls) == 1 and "one\n".startswith(calls[0])


SLOW_NUMBER = """import time
class Total:
    def __str__(self):
        time.sleep(0.005)  # print writes 'TOTAL ' first, then this, within one frame interval
        return '1234.5'
time.sleep(0.01)
print('TOTAL', Total())
"""


def test_a_line_cut_between_frames_ends_whole_in_the_live_output(session: Session) -> None:
    """The runner cuts frames by time: `TOTAL ` streamed and the number came with the result,
    so a live watcher saw `TOTAL` alone. The rest of the head now follows the result."""
    for code in (SLOW_NUMBER, "print('quick', 1)"):
        listener = Listener()
        result = session.run(code, on_output=listener)
        assert result.ok, result
        assert listener.text("stdout") == result.stdout, listener.chunks
    assert listener.chunks == [("stdout", "quick 1\n")]  # nothing streamed: all with the result


def test_the_live_output_stays_within_the_head(engine: Engine, runtime: str, tmp_path) -> None:
    limits = Limits(runtime=runtime, stdout_bytes="4k")
    spec = SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path)
    with Session.open(spec, engine=engine) as session:
        listener = Listener()
        result = session.run("print('x' * 100_000)", on_output=listener)
    assert result.stdout_dropped_bytes > 0
    assert listener.text("stdout") == "x" * 2048  # the head; the cut marker and tail are not live
