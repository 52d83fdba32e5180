"""`sbx chat` at a real pseudo-terminal: two questions, a follow-up that uses a variable, /exit.

The test types as a user would and waits for the prompt each time (an event in
the output, never a sleep); the deadline only stops a hung test.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.tools.audit_verify import verify_log
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

PROMPT = b"you> "
DEADLINE_S = 180.0


class Terminal:
    """A child process on a pseudo-terminal, read until an expected text appears."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become the command
            os.chdir(cwd)
            os.execv(argv[0], argv)
        self.seen = b""

    def expect(self, text: bytes) -> bytes:
        """Everything read up to and including `text` (which is consumed)."""
        deadline = time.monotonic() + DEADLINE_S
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"never saw {text!r}; got: {self.seen[-2000:]!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                assert chunk, f"the terminal closed before {text!r}: {self.seen[-2000:]!r}"
                self.seen += chunk
        head, _, self.seen = self.seen.partition(text)
        return head + text

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def wait(self) -> int:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.fd, 65536)
                except OSError:
                    pass
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("sbx chat did not exit")


def _chat(llm, tmp_path: Path) -> Terminal:
    """`sbx chat` on the scripted model, at a terminal; transcript `chat.jsonl`."""
    sbx = str(Path(sys.executable).with_name("sbx"))
    return Terminal(
        [sbx, "chat", "--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted",
         "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl"),
         "--transcript", str(tmp_path / "chat.jsonl")],
        cwd=tmp_path,
    )


@pytest.mark.docker
def test_chat_answers_a_question_and_a_follow_up_then_exits(llm, tmp_path, engine):
    llm.script([
        tool_call("execute_python", code="rows = 3 * 4\nprint(rows)"),
        assistant("There are 12 rows."),
        tool_call("execute_python", code="print(rows + 1)"),
        assistant("One more makes 13."),
    ])
    terminal = _chat(llm, tmp_path)
    terminal.expect(PROMPT)
    terminal.type("How many rows?")
    first = terminal.expect(PROMPT)
    terminal.type("And one more?")
    second = terminal.expect(PROMPT)
    terminal.type("/exit")
    assert terminal.wait() == 0

    assert b"There are 12 rows." in first
    assert b"One more makes 13." in second
    assert llm.requests[3].last_tool_message.startswith("[stdout]\n13")  # `rows` survived
    lines = [json.loads(line) for line in (tmp_path / "chat.jsonl").read_text().splitlines()]
    ends = [line for line in lines if line["type"] == "run_end"]
    assert [e["status"] for e in ends] == ["completed", "completed"]
    assert len({line["conversation_id"] for line in lines}) == 1
    assert verify_log(tmp_path / "audit.jsonl", key=None).ok


@pytest.mark.docker
def test_ctrl_c_cancels_the_question_and_the_next_one_restores_what_it_lost(
    llm, tmp_path, engine
):
    llm.script([
        tool_call("execute_python", code="rows = 12\nprint(rows)"),
        assistant("There are 12 rows."),
        tool_call("execute_python", code="print('started', flush=True)\n"
                                         "import time\ntime.sleep(120)"),
        tool_call("execute_python", code="print(rows + 1)"),
        assistant("One more makes 13."),
    ])
    terminal = _chat(llm, tmp_path)
    terminal.expect(PROMPT)
    terminal.type("How many rows?")
    terminal.expect(PROMPT)
    terminal.type("Wait a while.")
    terminal.expect(b"> started")  # the code runs
    os.write(terminal.fd, b"\x03")  # Ctrl-C
    cancelled = terminal.expect(PROMPT)
    terminal.type("And one more?")
    after = terminal.expect(PROMPT)
    terminal.type("/exit")
    assert terminal.wait() == 0

    assert b"== cancelled:" in cancelled
    assert (b"sbx: cancelled; the sandbox was removed (the next question restores its state)"
            in cancelled)
    assert b"restored 1 cell (a cancel by the user)" in after  # named as what it was
    assert b"One more makes 13." in after
