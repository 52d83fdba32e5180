"""The limit flags on every CLI command that runs code: below the policy they apply, above it
they are refused with one line before anything runs (`ask`, `chat`, `demo`, `replay --rerun`;
`sbx exec` in test_cli_exec_audit.py).

The real CLI, the scripted model over real HTTP, the real sandbox and audit log.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY
from tools_support import events, records

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

MIB = 1024**2


def _files(tmp_path: Path) -> list[str]:
    return ["--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl"),
            "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out")]


def _model(llm) -> list[str]:
    return ["--base-url", llm.base_url, "--api-key", FAKE_KEY, "--model", "scripted"]


def _sandboxes(tmp_path: Path) -> list[dict]:
    return [start["sandbox"] for start in events(tmp_path / "audit.jsonl", "run_start")]


def _refused(outcome, line: str, tmp_path: Path) -> None:
    assert outcome.exit_code == 2, outcome.output
    assert outcome.stderr.splitlines() == [line]
    log = tmp_path / "audit.jsonl"
    assert not log.exists() or records(log) == []  # nothing ran


@pytest.mark.docker
def test_ask_runs_under_lower_limits_and_the_audit_says_so(llm, tmp_path, engine) -> None:
    llm.script([tool_call("execute_python", code="print(6 * 7)"), assistant("42.")])
    outcome = CliRunner().invoke(cli, [
        "ask", "What is six times seven?", *_model(llm), *_files(tmp_path),
        "--memory", "256m", "--cpus", "0.5", "--pids", "128", "--timeout", "10s",
    ])

    assert outcome.exit_code == 0, outcome.output
    (sandbox,) = _sandboxes(tmp_path)
    assert (sandbox["memory"], sandbox["cpus"], sandbox["pids"], sandbox["timeout"]) == (
        256 * MIB, 0.5, 128, 10.0)
    assert sandbox["network"] == "none" and sandbox["runtime"] == "runc"
    assert llm.requests[1].last_tool_message.startswith("[stdout]\n42")


def test_ask_above_the_policy_is_refused_before_the_model_is_asked(llm, tmp_path) -> None:
    outcome = CliRunner().invoke(cli, [
        "ask", "q", *_model(llm), *_files(tmp_path), "--memory", "1g",
    ])
    _refused(outcome, "sbx: --memory: at most 512 MiB (the policy's [sandbox] memory)", tmp_path)
    assert llm.requests == []


@pytest.mark.parametrize(("flags", "line"), [
    (["--memory", "6m"], "sbx: --memory: at least 24 MiB (the least a sandbox starts in)"),
    (["--memory", "32m", "--runtime", "runsc"],
     "sbx: --memory: at least 48 MiB (the least a sandbox starts in under runsc)"),
])
def test_memory_a_sandbox_cannot_start_in_is_refused_naming_the_minimum(llm, tmp_path, flags,
                                                                         line) -> None:
    outcome = CliRunner().invoke(cli, ["ask", "q", *_model(llm), *_files(tmp_path), *flags])
    _refused(outcome, line, tmp_path)
    assert llm.requests == []


@pytest.mark.docker
def test_chat_takes_the_same_flags(llm, tmp_path, engine) -> None:
    llm.script([tool_call("execute_python", code="print(1)"), assistant("One.")])
    outcome = CliRunner().invoke(cli, ["chat", *_model(llm), *_files(tmp_path), "--memory",
                                       "384m", "--timeout", "5s"], input="How many?\n/exit\n")

    assert outcome.exit_code == 0, outcome.output
    (sandbox,) = _sandboxes(tmp_path)
    assert (sandbox["memory"], sandbox["timeout"]) == (384 * MIB, 5.0)

    refused = CliRunner().invoke(cli, ["chat", *_model(llm), *_files(tmp_path / "x"),
                                       "--network", "bridge"], input="/exit\n")
    _refused(refused, "sbx: --network: 'bridge' is more open than the policy's [sandbox] "
             "network = 'none'", tmp_path / "x")


@pytest.mark.docker
def test_demo_takes_the_same_flags(tmp_path, engine) -> None:
    outcome = CliRunner().invoke(cli, ["demo", "--quiet", *_files(tmp_path), "--pids", "100"])

    assert outcome.exit_code == 0, outcome.output
    assert {sandbox["pids"] for sandbox in _sandboxes(tmp_path)} == {100}

    refused = CliRunner().invoke(cli, ["demo", *_files(tmp_path / "x"), "--cpus", "4"])
    _refused(refused, "sbx: --cpus: at most 1 (the policy's [sandbox] cpus)", tmp_path / "x")


@pytest.mark.docker
def test_replay_rerun_takes_the_same_flags_and_replay_alone_refuses_them(
    llm, tmp_path, engine
) -> None:
    llm.script([tool_call("execute_python", code="print(2 + 2)"), assistant("4.")])
    asked = CliRunner().invoke(cli, ["ask", "2 + 2?", *_model(llm), *_files(tmp_path)])
    assert asked.exit_code == 0, asked.output
    transcript = str(tmp_path / "run.jsonl")

    again = CliRunner().invoke(cli, ["replay", "--rerun", transcript, "--image", TEST_IMAGE,
                                     "--audit-log", str(tmp_path / "audit.jsonl"),
                                     "--timeout", "7s", "--memory", "300m"])

    assert again.exit_code == 0, again.output
    recorded, rerun = _sandboxes(tmp_path)
    assert (recorded["timeout"], recorded["memory"]) == (30.0, 512 * MIB)
    assert (rerun["timeout"], rerun["memory"]) == (7.0, 300 * MIB)
    above = CliRunner().invoke(cli, ["replay", "--rerun", transcript, "--audit-log",
                                     str(tmp_path / "other.jsonl"), "--timeout", "1h"])
    assert above.exit_code == 2
    assert above.stderr.splitlines() == [
        "sbx: --timeout: at most 30s (the policy's [sandbox] timeout)"]
    alone = CliRunner().invoke(cli, ["replay", transcript, "--memory", "256m"])
    assert alone.exit_code == 2
    assert alone.stderr.splitlines() == [
        "sbx: the limit flags apply only with --rerun (nothing else runs code)"]
