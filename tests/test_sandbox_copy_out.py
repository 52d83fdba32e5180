"""A failed host write is a refused artifact, never a traceback or a lost output.

A full disk is a real one: a 64 KiB tmpfs mounted for the test (CI runs as
root). An output path that is not a usable directory is refused before any
container is created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import assistant, call, tool_calls
from sbx.sandbox.config import RUN_ID_LABEL
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.session import Session, new_run_id
from sbx.sandbox.spec import SessionSpec
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
FULL = "no space left in the host's output directory"
PROGRAM = (
    "open('/output/big.bin', 'wb').write(b'x' * 200_000)\n"
    "open('/output/small.txt', 'w').write('fits')\n"
    "print('the output survives')\n"
)


@contextmanager
def tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at `mount` for the block (CI runs as root)."""
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.fail(f"mounting a tmpfs needs root: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: writes past it fail with ENOSPC, as on a full disk."""
    with tmpfs(tmp_path / "disk", "size=64k") as mount:
        yield mount


@pytest.mark.docker
def test_full_disk_refuses_the_artifact_removes_the_partial_and_keeps_the_output(
    engine, small_disk
) -> None:
    out = small_disk / "out"
    with Session.open(SessionSpec(image=TEST_IMAGE, output_dir=out), engine=engine) as session:
        result = session.run(PROGRAM)
        after = session.run("print('session intact')")
    assert result.stdout == "the output survives\n" and result.ok
    assert [(r.name, r.reason) for r in result.refused_artifacts] == [("big.bin", FULL)]
    assert [a.name for a in result.artifacts] == ["small.txt"]
    assert sorted(p.name for p in out.iterdir()) == ["small.txt"]  # no truncated big.bin
    assert str(small_disk) not in " ".join(result.notes)
    assert after.stdout == "session intact\n"


@pytest.mark.docker
def test_exec_on_a_full_disk_prints_the_output_and_exits_with_the_program_status(
    engine, small_disk
) -> None:
    done = subprocess.run(
        [*SBX, "exec", "-", "--image", TEST_IMAGE, "--output", str(small_disk)],
        input=PROGRAM.encode(),
        capture_output=True,
        timeout=120,
    )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout == b"the output survives\n"
    assert "Traceback" not in err and f"'big.bin' ({FULL})" in err
    assert sorted(p.name for p in small_disk.iterdir()) == ["small.txt"]


@pytest.mark.docker
@pytest.mark.parametrize("below", ["", "sub"])
def test_an_output_path_that_is_not_a_directory_is_refused_before_the_run(
    engine, tmp_path, below
) -> None:
    taken = tmp_path / "results.csv"
    taken.write_text("a,b\n")
    run_id = new_run_id()
    with pytest.raises(InvalidInput, match="output directory .*results.csv"):
        Session.open(
            SessionSpec(image=TEST_IMAGE, output_dir=taken / below, run_id=run_id), engine=engine
        ).close()
    assert taken.read_text() == "a,b\n"
    mine = engine.api.containers(all=True, filters={"label": f"{RUN_ID_LABEL}={run_id}"})
    assert mine == []  # refused before any container was created


@pytest.mark.docker
def test_exec_with_an_unusable_output_is_one_line_and_exit_125(engine, tmp_path) -> None:
    taken = tmp_path / "results.csv"
    taken.write_text("a,b\n")
    for output in (taken, taken / "sub"):
        done = subprocess.run(
            [*SBX, "exec", "-", "--image", TEST_IMAGE, "--output", str(output)],
            input=b"print('never runs')",
            capture_output=True,
            timeout=120,
        )
        lines = done.stderr.decode().strip().splitlines()
        assert done.returncode == 125 and done.stdout == b""
        assert len(lines) == 1 and lines[0].startswith("sbx: output directory"), lines
    assert taken.read_text() == "a,b\n"


@pytest.mark.docker
def test_an_unwritable_output_directory_is_refused_before_the_run(engine, tmp_path) -> None:
    with tmpfs(tmp_path / "ro", "ro,size=4k") as locked:
        with pytest.raises(InvalidInput, match="is not writable"):
            Session.open(
                SessionSpec(image=TEST_IMAGE, output_dir=locked / "out"), engine=engine
            ).close()


@pytest.mark.docker
def test_ask_tells_the_model_a_plain_reason_never_the_host_error(llm, engine, small_disk):
    llm.script(
        [
            tool_calls(call("execute_python", "call_exec", code=PROGRAM)),
            assistant("Done."),
        ]
    )
    scratch = small_disk.parent
    outcome = CliRunner().invoke(
        cli,
        [
            "ask",
            "q",
            "-q",
            "--base-url",
            llm.base_url,
            "--api-key",
            FAKE_KEY,
            "--model",
            "m",
            "--audit-log",
            str(scratch / "audit.jsonl"),
            "--transcript",
            str(scratch / "run.jsonl"),
            "--output",
            str(small_disk),
            "--image",
            TEST_IMAGE,
        ],  # fmt: skip
    )
    assert outcome.exit_code == 0, outcome.output
    events = [json.loads(line) for line in (scratch / "run.jsonl").read_text().splitlines()]
    seen = next(e["content"] for e in events if e["type"] == "tool_result")
    assert "the output survives" in seen and FULL in seen
    assert "Errno" not in seen and str(small_disk) not in seen
    assert sorted(p.name for p in small_disk.iterdir()) == ["small.txt"]
