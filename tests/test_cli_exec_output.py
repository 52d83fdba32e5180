"""`sbx exec` output: the program's text goes as written to a pipe, escaped on a terminal;
sbx's own `sbx:` lines (artifact names, notes) are escaped wherever they go.

Real CLI processes, a real pseudo-terminal, a real sandbox.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from conftest import TEST_IMAGE

SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
PROGRAM = r"""
import sys
print("out \x1b]52;c;cm0gLXJm\x07 \u202efdp.exe \x9b2A end")
sys.stderr.write("err \x1b[2A\n")
open("/output/inv_\u202efdp.exe", "w").write("x")
open("/output/a\x1b[1A.txt", "w").write("x")
None
"""
RAW_OUT = "out \x1b]52;c;cm0gLXJm\x07 \u202efdp.exe \x9b2A end\n"
UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def inert(text: str) -> bool:
    return not any(unicodedata.category(c) in UNSAFE and c not in "\n\t" for c in text)


def run_exec(tmp_path: Path, *extra: str, stdout: int | None = None) -> subprocess.CompletedProcess:
    source = tmp_path / "hostile.py"
    source.write_text(PROGRAM)
    args = [*SBX, "exec", str(source), "--output", str(tmp_path / "out"), "--image", TEST_IMAGE]
    return subprocess.run(
        [*args, *extra],
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
        env=os.environ,
    )


def sbx_lines(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode().splitlines() if line.startswith("sbx:")]


@pytest.mark.docker
def test_to_a_pipe_the_program_output_is_as_written_and_sbx_lines_are_escaped(tmp_path, engine):
    done = run_exec(tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == RAW_OUT  # data the user asked for, byte for byte
    lines = sbx_lines(done.stderr)
    refusal = next(line for line in lines if line.startswith("sbx: artifacts refused: "))
    assert "'a\\x1b[1A.txt'" in refusal and "'inv_\\u202efdp.exe'" in refusal  # quoted escaped
    assert all(inert(line) for line in lines)


@pytest.mark.docker
def test_on_a_terminal_the_program_output_is_escaped(tmp_path, engine):
    leader, follower = pty.openpty()
    try:
        done = run_exec(tmp_path, stdout=follower)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the writer has gone
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)

    assert done.returncode == 0, done.stderr
    text = shown.decode().replace("\r\n", "\n")
    assert inert(text)
    assert "out \\x1b]52;c;cm0gLXJm\\x07 \\u202efdp.exe \\x9b2A end" in text


@pytest.mark.docker
def test_json_output_keeps_the_values_and_loses_the_controls(tmp_path, engine):
    done = run_exec(tmp_path, "--json")

    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert inert(text)
    result = json.loads(text)
    assert result["stdout"] == RAW_OUT
    assert any("\\u202e" in item["name"] for item in result["refused_artifacts"])


@pytest.mark.docker
def test_stdout_is_exactly_what_the_program_wrote_not_its_last_value(tmp_path, engine):
    source = tmp_path / "write.py"
    source.write_text('import sys\nsys.stdout.write("exact\\n")\n')  # returns 6: not printed
    done = subprocess.run(
        [*SBX, "exec", str(source), "--output", str(tmp_path / "o"), "--image", TEST_IMAGE],
        capture_output=True, timeout=120, env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"exact\n"


@pytest.mark.docker
def test_on_a_terminal_output_shows_live_and_ctrl_c_keeps_what_was_printed(tmp_path, engine):
    import select
    import signal

    source = tmp_path / "slow.py"
    source.write_text('import time\nprint("first \\x1b[2J line", flush=True)\ntime.sleep(120)\n')
    leader, follower = pty.openpty()
    args = [*SBX, "exec", str(source), "--output", str(tmp_path / "o"), "--image", TEST_IMAGE]
    proc = subprocess.Popen(args, stdout=follower, stderr=subprocess.DEVNULL, env=os.environ)
    os.close(follower)
    shown = b""
    try:
        while b"line" not in shown:  # it arrives while the program still runs
            ready, _, _ = select.select([leader], [], [], 90)
            assert ready, f"nothing shown live; so far {shown!r}"
            shown += os.read(leader, 65536)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    text = shown.decode().replace("\r\n", "\n")
    assert "first \\x1b[2J line" in text and inert(text)  # escaped, and shown before Ctrl-C
