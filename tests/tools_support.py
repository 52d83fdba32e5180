"""Helpers for the tools tests: a real gate over a real audit file, and a real code runner.

`SubprocessRunner` runs code in a child Python process (no container): the
gate and the renderer are what these tests exercise, not the sandbox, whose
own tests use Docker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sbx.sandbox.limits import Limits
from sbx.sandbox.result import ExecutionError, ExecutionResult
from sbx.tools.audit import AuditLog
from sbx.tools.context import ToolContext
from sbx.tools.gate import ToolGate, build_gate
from sbx.tools.policy import Policy
from sbx.tools.redact import Redactor
from sbx.tools.registry import Tool

FAKE_KEY = "sk-test-FAKE0123456789abcdefghijklmnop"


class SubprocessRunner:
    """Runs code with the host's Python in a child process; reports like the sandbox does."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self.calls: list[str] = []

    def run(self, code: str, *, on_output=None, timeout=None, show_values=True) -> ExecutionResult:
        self.calls.append(code)
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=self.timeout
            )
        except subprocess.TimeoutExpired:
            return ExecutionResult(exit_code=137, timed_out=True, state_reset=True)
        error = None
        if proc.returncode == 1 and "Traceback" in proc.stderr:
            last = proc.stderr.strip().splitlines()[-1]
            kind, _, message = last.partition(": ")
            error = ExecutionError(type=kind, message=message, traceback=proc.stderr)
        return ExecutionResult(
            stdout=proc.stdout,
            stderr="" if error else proc.stderr,
            exit_code=proc.returncode,
            error=error,
            duration_s=time.perf_counter() - started,
        )


def policy_from(data: dict[str, Any]) -> Policy:
    """A policy from a dict shaped like the TOML file."""
    return Policy.model_validate(data)


def open_log(path: Path, *, key: bytes | None = None, secrets: list[str] | None = None) -> AuditLog:
    redact = Redactor.build(secret_values=secrets or [], secret_fields=["api_key", "password"])
    return AuditLog.open(path, key=key, redact=redact)


def make_gate(
    tmp_path: Path,
    policy: Policy,
    *,
    extra_tools: list[Tool] | None = None,
    runner: Any = None,
    data_paths: list[Path] | None = None,
    api_key: str | None = None,
    run_id: str = "run-test",
    limits: Limits | None = None,
    replace: bool = False,
) -> tuple[ToolGate, Path]:
    """A gate writing to `tmp_path/audit.jsonl`; returns it and the log path."""
    log_path = tmp_path / "audit.jsonl"
    audit = open_log(log_path, secrets=[api_key] if api_key else None)
    context = ToolContext(run_id=run_id, runner=runner, data_paths=data_paths or [])
    gate = build_gate(
        policy, limits=limits, context=context, audit=audit, extra_tools=extra_tools or [],
        replace=replace,
    )
    return gate, log_path


def records(path: Path) -> list[dict[str, Any]]:
    """Every record of a log file, parsed."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def events(path: Path, event: str) -> list[dict[str, Any]]:
    """The `data` of every record of one event type."""
    return [r["data"] for r in records(path) if r["event"] == event]


TESTS_DIR = Path(__file__).resolve().parent


def worker_command(*lines: str) -> list[str]:
    """A `python -c` command that can import this module (for writer subprocesses)."""
    prelude = f"import sys; sys.path.insert(0, {str(TESTS_DIR)!r})"
    return [sys.executable, "-c", "\n".join([prelude, *lines])]


def run_calls(log_path: str, run_id: str, calls: int, key: str | None = None) -> None:
    """Subprocess body: one gate, `calls` calculate calls, run start and end records."""
    policy = policy_from({"tools": {"calculate": {"enabled": True}}})
    audit = open_log(Path(log_path), key=key.encode() if key else None)
    context = ToolContext(run_id=run_id, runner=None)
    gate = build_gate(policy, context=context, audit=audit)
    for i in range(calls):
        outcome = gate.call(
            name="calculate",
            arguments=json.dumps({"expression": f"{i}*2"}),
            call_id=f"{run_id}-{i}",
        )
        if outcome.text != str(i * 2):
            raise SystemExit(f"bad outcome {outcome.text!r}")
    gate.close()
    audit.close()


def write_forever_then_tear(log_path: str) -> None:
    """Subprocess body: append records, then write half of one, say "torn" on stdout and wait
    to be killed."""
    import sbx.tools.audit as audit_module

    log = open_log(Path(log_path))
    for i in range(20):
        log.record("run-torn", "outcome", {"i": i})
    real_write = audit_module._write_all

    def half_then_hang(fd: int, data: bytes) -> None:
        real_write(fd, data[: len(data) // 2])
        print("torn", flush=True)
        time.sleep(60)  # until the test kills it

    audit_module._write_all = half_then_hang
    log.record("run-torn", "outcome", {"i": "never complete"})


def write_until_killed(log_path: str, announce_bytes: int = 200_000) -> None:
    """Subprocess body: append records as fast as possible until killed; say "going" on stdout
    once the log holds `announce_bytes`, and keep writing."""
    log = open_log(Path(log_path))
    i = 0
    announced = False
    while True:
        log.record("run-kill", "outcome", {"i": i, "pad": "x" * (i % 5000)})
        i += 1
        if not announced and os.path.getsize(log_path) >= announce_bytes:
            print("going", flush=True)
            announced = True
