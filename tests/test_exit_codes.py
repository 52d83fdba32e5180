"""Exit codes as the README states them: 2 a bad flag or value, 125 sbx could not run
(policy file, audit log, transcript, engine, image), each with one line naming the cause.
"""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner

from sbx.agent.cli.main import cli

SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent.sock"}
ENDPOINT = ["--model", "m", "--api-key", "k", "--base-url", "http://127.0.0.1:9/v1"]


def invoke(*args: str, env: dict[str, str] | None = None):
    outcome = CliRunner().invoke(cli, list(args), env=env)
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit), (
        outcome.exc_info
    )
    assert "Traceback" not in outcome.output
    return outcome


def one_line(outcome) -> str:
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def policy(tmp_path, text: str) -> str:
    path = tmp_path / "sbx.toml"
    path.write_text(text)
    return str(path)


def test_image_commands_without_an_engine_exit_125_like_the_others():
    # A child process: docker-py leaks the socket of a failed connection, which would
    # surface here as an unraisable ResourceWarning in whatever test runs next.
    info = subprocess.run([*SBX, "image", "info"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **NO_ENGINE})
    assert info.returncode == 125
    assert one_line(info).startswith("sbx: cannot reach the Docker engine")


def test_files_sbx_opens_itself_are_its_own_errors_not_usage_errors(tmp_path):
    directory = str(tmp_path)
    audit = invoke("ask", "q", *ENDPOINT, "--audit-log", directory)
    transcript = invoke("ask", "q", *ENDPOINT, "--audit-log", str(tmp_path / "a.jsonl"),
                        "--transcript", directory)
    policy_dir = invoke("ask", "q", *ENDPOINT, "--policy", directory)

    assert audit.exit_code == 125 and "cannot open audit log" in one_line(audit)
    assert transcript.exit_code == 125 and "transcript" in one_line(transcript)
    assert policy_dir.exit_code == 125 and "cannot read policy" in one_line(policy_dir)


def test_every_policy_file_error_exits_125_agent_table_included(tmp_path):
    agent = invoke("ask", "q", *ENDPOINT, "--policy", policy(tmp_path, "[agent]\nmodle = 'x'\n"))
    budget = invoke("ask", "q", *ENDPOINT,
                    "--policy", policy(tmp_path, "[agent.budget]\nmax_turns = '20'\n"))
    tools = invoke("ask", "q", *ENDPOINT,
                   "--policy", policy(tmp_path, "[tools.calculate]\nenabled = true\nx = 1\n"))

    assert agent.exit_code == 125
    assert one_line(agent).endswith("sbx.toml:2: agent.modle: unknown key")
    assert budget.exit_code == 125 and "agent.budget.max_turns" in one_line(budget)
    assert tools.exit_code == 125 and "tools.calculate.x: unknown key" in one_line(tools)


def test_policy_booleans_and_numbers_are_strict(tmp_path):
    for text, key in [
        ("[tools.http_get]\nenabled = \"yes\"\nallowed_domains = [\"a.test\"]\n",
         "tools.http_get.enabled"),
        ("[tools.calculate]\nenabled = 1\n", "tools.calculate.enabled"),
        ("[quotas]\nmax_denied = \"5\"\n", "quotas.max_denied"),
        ("[sandbox]\npids = 300.0\n", "sandbox.pids"),
    ]:
        path = policy(tmp_path, text)
        outcome = invoke("ask", "q", *ENDPOINT, "--policy", path)
        assert outcome.exit_code == 125, text
        line = one_line(outcome)
        assert line.startswith(f"sbx: {path}:2: {key}: Input should be a valid"), line


def test_limits_past_their_bound_are_bad_flags_naming_the_flag_and_the_bound(tmp_path):
    timeout = invoke("exec", "-", "--timeout", "99999999999h")
    memory = invoke("exec", "-", "--memory", "2t")
    max_time = invoke("ask", "q", *ENDPOINT, "--max-time", "99999999999h")
    request = invoke("ask", "q", *ENDPOINT, "--request-timeout", "2h")
    in_policy = invoke("ask", "q", *ENDPOINT,
                       "--policy", policy(tmp_path, "[sandbox]\ntimeout = \"99999999999h\"\n"))

    assert timeout.exit_code == 2
    assert one_line(timeout) == (
        "sbx: invalid value for --timeout: 99999999999h is longer than the most sbx accepts, 7d"
    )
    assert memory.exit_code == 2 and "--memory: 2t is more than the most sbx accepts, 1 TiB" in (
        one_line(memory)
    )
    assert max_time.exit_code == 2 and one_line(max_time) == (
        "sbx: invalid value for --max-time: 99999999999h is longer than the most sbx accepts, 7d"
    )
    assert request.exit_code == 2
    assert "--request-timeout: 2h is longer than the most allowed, 1h" in one_line(request)
    assert in_policy.exit_code == 125 and "sandbox.timeout: 99999999999h is longer" in (
        one_line(in_policy)
    )
