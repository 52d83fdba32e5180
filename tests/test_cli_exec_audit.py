"""`sbx exec` is gated and audited like a model's call, and its limit flags only tighten the policy.

Real CLI processes, a real sandbox, the real `sbx audit verify`.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from tools_support import events, records

SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
QUIET = b"import socket\nprint(socket.gethostname() != '')\n"
"""Makes no network connection at all (nothing may leave this machine), bridge or not."""
EXECUTE = "[tools.execute_python]\nenabled = true\n"
"""A policy file names what it enables (deny by default)."""


def sbx(*args: str, stdin: bytes = b"", cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[bytes]:
    environ = {k: v for k, v in os.environ.items() if k != "SBX_AUDIT_LOG"}
    return subprocess.run([*SBX, *args], input=stdin, capture_output=True, timeout=120, cwd=cwd,
                          env={**environ, **(env or {})})


def policy(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sbx.toml"
    path.write_text(text)
    return str(path)


def run_start(log: Path) -> dict:
    (start,) = events(log, "run_start")
    return start


@pytest.mark.docker
def test_exec_writes_where_ask_does_and_sbx_audit_verify_accepts_it(engine, tmp_path) -> None:
    done = sbx("exec", "-", "--image", TEST_IMAGE, stdin=b"print(6 * 7)", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout == b"42\n"
    log = tmp_path / "sbx-audit.jsonl"  # ask's default: the working directory
    assert [r["event"] for r in records(log)] == [
        "run_start", "request", "decision", "outcome", "run_end"]
    start = run_start(log)
    assert start["principal"] == f"os:{getpass.getuser()}"
    assert start["sandbox"]["network"] == "none" and start["sandbox"]["memory"] == 512 * 1024**2
    assert {r["run_id"] for r in records(log)} == {start["conversation_id"]}
    (outcome,) = events(log, "outcome")
    assert outcome["status"] == "ok" and outcome["exit_code"] == 0
    verified = sbx("audit", "verify", str(log), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith(b"OK: 5 records, 1 runs")


@pytest.mark.docker
def test_limit_flags_below_the_policy_apply_and_are_audited(engine, tmp_path) -> None:
    log = tmp_path / "audit.jsonl"
    done = sbx("exec", "-", "--image", TEST_IMAGE, "--audit-log", str(log), "--memory", "64m",
               "--pids", "64", "--timeout", "10s", "--cpus", "0.5", "--runtime", "runc",
               stdin=b"x = bytearray(1 << 30)", cwd=tmp_path)

    assert done.returncode == 137 and b"memory limit 64 MiB" in done.stderr
    sandbox = run_start(log)["sandbox"]
    assert (sandbox["memory"], sandbox["pids"], sandbox["timeout"], sandbox["cpus"]) == (
        64 * 1024**2, 64, 10.0, 0.5)
    assert sbx("audit", "verify", str(log), cwd=tmp_path).returncode == 0


def test_limit_flags_above_the_policy_are_refused_before_anything_runs(tmp_path) -> None:
    log = tmp_path / "audit.jsonl"
    cases = {
        ("--memory", "1g"): "sbx: --memory: at most 512 MiB (the policy's [sandbox] memory)",
        ("--cpus", "2"): "sbx: --cpus: at most 1 (the policy's [sandbox] cpus)",
        ("--pids", "1000"): "sbx: --pids: at most 256 (the policy's [sandbox] pids)",
        ("--timeout", "1h"): "sbx: --timeout: at most 30s (the policy's [sandbox] timeout)",
        ("--network", "bridge"): "sbx: --network: 'bridge' is more open than the policy's "
                                 "[sandbox] network = 'none'",
        ("--runtime", "kata"): "sbx: --runtime: 'kata' is not allowed: only 'runc' or 'runsc' "
                               "(the policy's [sandbox] runtime)",
    }
    for flag, line in cases.items():
        done = sbx("exec", "-", "--audit-log", str(log), *flag, stdin=b"print(1)", cwd=tmp_path)
        assert done.returncode == 2, flag
        assert done.stderr.decode().splitlines() == [line]
    assert not log.exists() or records(log) == []  # nothing ran, nothing to audit


@pytest.mark.docker
def test_a_bridge_run_says_so_in_its_record(engine, tmp_path) -> None:
    opened = policy(tmp_path, EXECUTE + '[sandbox]\nnetwork = "bridge"\n')
    log = tmp_path / "audit.jsonl"
    bridge = sbx("exec", "-", "--image", TEST_IMAGE, "--policy", opened, "--audit-log", str(log),
                 "--network", "bridge", stdin=QUIET, cwd=tmp_path)
    assert bridge.returncode == 0, bridge.stderr
    closed = sbx("exec", "-", "--image", TEST_IMAGE, "--policy", opened, "--audit-log", str(log),
                 "--network", "none", stdin=QUIET, cwd=tmp_path)
    assert closed.returncode == 0, closed.stderr

    starts = events(log, "run_start")
    assert [start["sandbox"]["network"] for start in starts] == ["bridge", "none"]
    assert all(start["principal"] == f"os:{getpass.getuser()}" for start in starts)
    assert sbx("audit", "verify", str(log), cwd=tmp_path).returncode == 0


def test_a_policy_without_execute_python_denies_exec_and_the_denial_is_audited(tmp_path) -> None:
    closed = policy(tmp_path, "[tools.execute_python]\nenabled = false\n")
    log = tmp_path / "audit.jsonl"
    done = sbx("exec", "-", "--policy", closed, "--audit-log", str(log), stdin=b"print(1)",
               cwd=tmp_path)

    assert done.returncode == 125 and done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert "tools.execute_python.enabled" in line
    (decision,) = events(log, "decision")
    assert decision["decision"] == "denied" and decision["rule"] == "tools.execute_python.enabled"
    assert sbx("audit", "verify", str(log), cwd=tmp_path).returncode == 0
