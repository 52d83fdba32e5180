"""CLI errors carry their cause, and stderr holds only `sbx:` lines beside the program's own.

Real CLI processes: `sbx serve` against a PostgreSQL port where nothing listens, and
`sbx exec --output` run twice into the same directory (a real sandbox).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import TEST_IMAGE

SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
PASSWORD = "hunter2-topsecret"
WRITES = 'open("/output/a.txt", "w").write("x")\nimport sys\nsys.stderr.write("own text\\n")\n'


def test_serve_with_an_unreachable_database_names_the_drivers_message(tmp_path):
    done = subprocess.run(
        [*SBX, "serve", "--database", f"postgresql://sbx:{PASSWORD}@127.0.0.1:1/x",
         "--data-dir", str(tmp_path / "data"), "--port", "0"],
        capture_output=True, text=True, timeout=120, env=os.environ,
    )
    assert done.returncode != 0
    assert "cannot migrate the database" in done.stderr, done.stderr
    assert "OperationalError: connection failed" in done.stderr, done.stderr
    assert 'port 1 failed: Connection refused' in done.stderr, done.stderr
    assert PASSWORD not in done.stderr
    assert all(line.startswith("sbx:") for line in done.stderr.splitlines()), done.stderr


@pytest.mark.docker
def test_exec_twice_into_one_output_directory_prints_only_sbx_lines_on_stderr(tmp_path, engine):
    program = tmp_path / "writes.py"
    program.write_text(WRITES)
    args = [*SBX, "exec", str(program), "--output", str(tmp_path / "out"), "--image", TEST_IMAGE]
    first = subprocess.run(args, capture_output=True, text=True, timeout=120, env=os.environ)
    assert first.returncode == 0, first.stderr
    second = subprocess.run(args, capture_output=True, text=True, timeout=120, env=os.environ)
    assert second.returncode == 0, second.stderr
    lines = second.stderr.splitlines()
    assert "sbx: artifacts refused: 'a.txt' (a file of that name already exists on the host; " \
        "not replaced)" in lines, lines
    assert [line for line in lines if not line.startswith("sbx:")] == ["own text"], lines
