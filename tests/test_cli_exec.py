"""`sbx exec` as a user types it: exit statuses, one-line errors, artifacts listed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_IMAGE

SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]


def sbx(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*SBX, *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {lines}"
    assert "Traceback" not in lines[0]
    return lines[0]


def test_engine_unreachable_says_how_to_start_it() -> None:
    done = sbx("exec", "-", stdin=b"print(1)", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 125
    line = one_line(done.stderr)
    assert "cannot reach the Docker engine" in line and "dockerd" in line


def test_invalid_limit_is_a_usage_error() -> None:
    done = sbx("exec", "-", "--memory", "lots", stdin=b"print(1)")
    assert done.returncode == 2
    assert "memory" in one_line(done.stderr)


def test_unreadable_file_is_one_line() -> None:
    done = sbx("exec", "/nonexistent/program.py")
    assert done.returncode == 2
    assert "cannot read" in one_line(done.stderr)


@pytest.mark.docker
def test_missing_image_says_build_it(engine) -> None:
    done = sbx("exec", "-", "--image", "sbx-missing:none", stdin=b"print(1)")
    assert done.returncode == 125
    assert "sbx image build" in one_line(done.stderr)


@pytest.mark.docker
def test_missing_data_path_and_bad_code(engine, tmp_path) -> None:
    done = sbx(
        "exec", "-", "--image", TEST_IMAGE, "--data", str(tmp_path / "nope.csv"), stdin=b"print(1)"
    )
    assert done.returncode == 125 and "does not exist" in one_line(done.stderr)
    done = sbx("exec", "-", "--image", TEST_IMAGE, stdin=b"print('\xff\xfe')")
    assert done.returncode == 125 and "UTF-8" in one_line(done.stderr)


@pytest.mark.docker
def test_exit_status_output_and_artifacts(engine, tmp_path) -> None:
    code = b"import sys\nprint('to stdout')\nopen('/output/r.txt', 'w').write('r')\nsys.exit(3)"
    done = sbx("exec", "-", "--image", TEST_IMAGE, "--output", str(tmp_path), stdin=code)
    assert done.returncode == 3
    assert done.stdout == b"to stdout\n"
    assert f"sbx: artifact {tmp_path / 'r.txt'}" in done.stderr.decode()
    assert (tmp_path / "r.txt").read_text() == "r"


@pytest.mark.docker
def test_timeout_and_oom_have_their_own_codes(engine, tmp_path) -> None:
    done = sbx(
        "exec",
        "-",
        "--image",
        TEST_IMAGE,
        "--timeout",
        "1s",
        "--output",
        str(tmp_path),
        stdin=b"while True: pass",
    )
    assert done.returncode == 124 and "timed out" in one_line(done.stderr)
    done = sbx(
        "exec",
        "-",
        "--image",
        TEST_IMAGE,
        "--memory",
        "64m",
        "--output",
        str(tmp_path),
        stdin=b"x = bytearray(1 << 30)",
    )
    assert done.returncode == 137 and "memory limit 64 MiB" in one_line(done.stderr)


@pytest.mark.docker
def test_uncaught_exception_prints_the_trimmed_traceback(engine, tmp_path) -> None:
    done = sbx("exec", "-", "--image", TEST_IMAGE, "--output", str(tmp_path), stdin=b"1/0")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "ZeroDivisionError: division by zero" in err and "runner.py" not in err


def test_doctor_without_engine_says_how_to_fix() -> None:
    done = sbx("doctor", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 1
    out = done.stdout.decode()
    assert "FAIL" in out and "cannot reach the Docker engine" in out and "fix: dockerd" in out


@pytest.mark.docker
def test_doctor_passes_on_this_host_and_probes_each_runtime(engine) -> None:
    done = sbx("doctor", "--image", TEST_IMAGE)
    out = done.stdout.decode()
    assert done.returncode == 0, out
    assert "runtime runc" in out and "limits.memory" in out and "FAIL" not in out


@pytest.mark.docker
def test_unregistered_runtime_is_an_error_never_a_fallback(engine, tmp_path) -> None:
    policy = tmp_path / "sbx.toml"
    policy.write_text('[tools.execute_python]\nenabled = true\n[sandbox]\nruntime = "kata"\n')
    # the policy's own runtime may be asked for: the engine refuses it, never a fall-back
    done = sbx("exec", "-", "--image", TEST_IMAGE, "--policy", str(policy), "--runtime", "kata",
               "--audit-log", str(tmp_path / "audit.jsonl"), stdin=b"print(1)")
    assert done.returncode == 125 and done.stdout == b""
    assert "runtime 'kata' is not registered" in one_line(done.stderr)


@pytest.mark.docker
def test_each_run_gets_its_own_output_directory_and_says_where(engine, tmp_path) -> None:
    code = b"open('/output/r.txt', 'w').write('r')"
    first = sbx("exec", "-", "--image", TEST_IMAGE, stdin=code, cwd=tmp_path)
    second = sbx("exec", "-", "--image", TEST_IMAGE, stdin=code, cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    runs = sorted((tmp_path / "sbx-output").iterdir())
    assert len(runs) == 2 and all(run.name.startswith("run-") for run in runs)
    assert all((run / "r.txt").is_file() for run in runs)
    for done in (first, second):
        said = [line for line in done.stderr.decode().splitlines() if "output directory" in line]
        assert len(said) == 1 and said[0].startswith("sbx: output directory sbx-output/run-")
    assert second.stderr.decode().count("refused") == 0


@pytest.mark.docker
def test_data_the_sandbox_cannot_read_is_an_error_before_the_run(engine, tmp_path) -> None:
    locked = tmp_path / "locked.csv"
    locked.write_text("secret\n")
    locked.chmod(0o000)
    done = sbx("exec", "-", "--image", TEST_IMAGE, "--data", str(locked), stdin=b"print(1)")
    assert done.returncode == 125 and done.stdout == b""
    assert "not readable by the sandbox's user 1000:1000" in one_line(done.stderr)
