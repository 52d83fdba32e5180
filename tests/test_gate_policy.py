"""Acceptance 2: disabled tool, denied argument, exhausted quota: denied, recorded, never run."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from sbx.sandbox.limits import Limits
from sbx.tools.builtin.http_get import make_http_get
from sbx.tools.registry import Tool, build_tool, tool
from tools_support import SubprocessRunner, events, make_gate, policy_from

ENTERED: list[str] = []


@tool
def probe(message: str) -> str:
    """Record that the function was entered.

    Args:
        message: Anything.
    """
    ENTERED.append(message)
    return f"probe saw {message}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    ENTERED.clear()


def _spy_http_get(policy_data: dict[str, Any]) -> Tool:
    """The real http_get tool wrapped so the test can see whether its function ran."""
    policy = policy_from(policy_data)
    real = make_http_get(policy.tools.http_get)

    def http_get(url: str) -> str:
        """Fetch a URL.

        Args:
            url: The URL.
        """
        ENTERED.append(url)
        return str(real.fn(url=url))

    return build_tool(http_get)


def test_disabled_tool_is_denied_recorded_and_not_entered(tmp_path) -> None:
    gate, log = make_gate(tmp_path, policy_from({}), extra_tools=[probe])
    outcome = gate.call(name="probe", arguments='{"message": "hi"}', call_id="c1")
    assert outcome.status == "denied"
    assert outcome.rule == "tools.custom.probe.enabled"
    assert "denied by policy rule tools.custom.probe.enabled" in outcome.text
    assert ENTERED == []
    decision = events(log, "decision")[-1]
    assert decision["decision"] == "denied"
    assert decision["rule"] == "tools.custom.probe.enabled"
    assert decision["text"] == outcome.text  # the log holds exactly what the model saw
    assert events(log, "outcome") == []
    assert gate.schemas() == []  # a disabled tool is never offered


def test_builtin_disabled_names_its_rule_and_available_tools(tmp_path) -> None:
    policy = policy_from({"tools": {"calculate": {"enabled": True}}})
    gate, log = make_gate(tmp_path, policy)
    outcome = gate.call(name="http_get", arguments='{"url": "http://example.com/"}', call_id="c1")
    assert outcome.status == "denied"
    assert outcome.rule == "tools.http_get.enabled"
    assert "Available tools: calculate" in outcome.text


def test_denied_domain_is_denied_before_the_tool_runs(tmp_path) -> None:
    data = {"tools": {"http_get": {"enabled": True, "allowed_domains": ["data.example.org"]}}}
    spy = _spy_http_get(data)
    gate, log = make_gate(tmp_path, policy_from(data), extra_tools=[spy], replace=True)
    outcome = gate.call(
        name="http_get", arguments='{"url": "https://evil.example.com/x"}', call_id="c1"
    )
    assert outcome.status == "denied"
    assert outcome.rule == "tools.http_get.allowed_domains"
    assert "'evil.example.com' is not in the allowed domains" in outcome.text
    assert ENTERED == []
    assert events(log, "decision")[-1]["rule"] == "tools.http_get.allowed_domains"
    # scheme and port are rules too
    for url, rule in [
        ("file:///etc/passwd", "tools.http_get.scheme"),
        ("http://data.example.org:8080/", "tools.http_get.allowed_ports"),
    ]:
        outcome = gate.call(name="http_get", arguments=json.dumps({"url": url}), call_id="c2")
        assert (outcome.status, outcome.rule) == ("denied", rule)
    assert ENTERED == []


def test_exhausted_quota_is_denied_and_recorded(tmp_path) -> None:
    policy = policy_from(
        {"tools": {"custom": {"probe": {"enabled": True}}}, "quotas": {"per_tool": {"probe": 2}}}
    )
    gate, log = make_gate(tmp_path, policy, extra_tools=[probe])
    statuses = [
        gate.call(name="probe", arguments='{"message": "m"}', call_id=f"c{i}").status
        for i in range(3)
    ]
    assert statuses == ["ok", "ok", "denied"]
    assert ENTERED == ["m", "m"]
    decision = events(log, "decision")[-1]
    assert (decision["decision"], decision["rule"]) == ("denied", "quotas.per_tool.probe")


def test_argument_rules_for_builtins(tmp_path) -> None:
    policy = policy_from({"tools": {"calculate": {"enabled": True, "max_expression_length": 5}}})
    gate, _ = make_gate(tmp_path, policy)
    outcome = gate.call(name="calculate", arguments='{"expression": "1+2+3+4"}', call_id="1")
    assert (outcome.status, outcome.rule) == ("denied", "tools.calculate.max_expression_length")


def test_unknown_tool_and_invalid_arguments_are_observations(tmp_path) -> None:
    policy = policy_from(
        {"tools": {"calculate": {"enabled": True}, "custom": {"probe": {"enabled": True}}}}
    )
    gate, log = make_gate(tmp_path, policy, extra_tools=[probe])
    unknown = gate.call(name="rm_rf", arguments="{}", call_id="1")
    assert unknown.status == "unknown"
    assert unknown.text == "Unknown tool name: 'rm_rf'. Available tools: calculate, probe"
    invalid = gate.call(name="probe", arguments='{"mesage": 1}', call_id="2")
    assert invalid.status == "invalid"
    assert invalid.text.endswith("Fix the errors and try again.")
    errors = json.loads(invalid.text.split(": ", 1)[1].rsplit("\n", 1)[0])
    assert {e["type"] for e in errors} == {"missing", "extra_forbidden"}
    broken = gate.call(name="probe", arguments='{"message": ', call_id="3")
    assert broken.status == "invalid" and "json_invalid" in broken.text
    assert ENTERED == []
    requests = events(log, "request")
    assert requests[-1]["arguments_raw"] == '{"message": '  # unparseable JSON is kept as text


def test_too_many_denials_halt_the_run(tmp_path) -> None:
    policy = policy_from(
        {
            "tools": {"custom": {"probe": {"enabled": True}}},
            "quotas": {"max_denied": 2, "per_tool": {"probe": 0}},
        }
    )
    gate, log = make_gate(tmp_path, policy, extra_tools=[probe])
    statuses = [
        gate.call(name="probe", arguments='{"message": "x"}', call_id=str(i)).status
        for i in range(4)
    ]
    assert statuses == ["denied", "denied", "halted", "halted"]
    assert events(log, "decision")[2]["rule"] == "quotas.max_denied"
    assert ENTERED == []


def test_tool_failures_and_bugs_become_error_observations(tmp_path) -> None:
    @tool
    def broken(x: int) -> str:
        """Always fails.

        Args:
            x: Ignored.
        """
        raise KeyError("boom")

    policy = policy_from(
        {"tools": {"calculate": {"enabled": True}, "custom": {"broken": {"enabled": True}}}}
    )
    gate, log = make_gate(tmp_path, policy, extra_tools=[broken])
    outcome = gate.call(name="broken", arguments='{"x": 1}', call_id="1")
    assert outcome.status == "error"
    assert outcome.text == "Error from broken: KeyError: 'boom'"
    calc = gate.call(name="calculate", arguments='{"expression": "1/0"}', call_id="2")
    assert (calc.status, calc.text) == ("error", "Error from calculate: division by zero")
    assert [o["status"] for o in events(log, "outcome")] == ["error", "error"]


def test_execute_python_goes_through_the_gate(tmp_path) -> None:
    policy = policy_from({"tools": {"execute_python": {"enabled": True}}})
    runner = SubprocessRunner()
    gate, log = make_gate(tmp_path, policy, runner=runner)
    outcome = gate.call(
        name="execute_python", arguments='{"code": "print(6*7)\\n1/0"}', call_id="1"
    )
    assert outcome.status == "ok"
    assert outcome.text.startswith("Error: ZeroDivisionError: division by zero")
    assert "[stdout]\n42" in outcome.text
    assert outcome.execution is not None and outcome.execution.exit_code == 1
    request = events(log, "request")[-1]
    assert request["arguments"]["code"] == "print(6*7)\n1/0"
    assert len(request["code_sha256"]) == 64
    result = events(log, "outcome")[-1]
    assert (result["exit_code"], result["error_type"]) == (1, "ZeroDivisionError")
    assert gate.sequential_key("execute_python") == "sandbox-session"


def test_sequential_tools_never_overlap(tmp_path) -> None:
    active = []
    overlaps = []
    release = threading.Event()

    @tool(sequential="session")
    def slow(n: int) -> int:
        """Hold the session until the test lets go.

        Args:
            n: Echoed.
        """
        active.append(n)
        if len(active) > 1:
            overlaps.append(tuple(active))
        release.wait(60)  # only stops a hung test
        active.remove(n)
        return n

    policy = policy_from({"tools": {"custom": {"slow": {"enabled": True}}}})
    gate, log = make_gate(tmp_path, policy, extra_tools=[slow])
    threads = [
        threading.Thread(
            target=gate.call,
            kwargs={"name": "slow", "arguments": json.dumps({"n": i}), "call_id": str(i)},
        )
        for i in range(6)
    ]
    for thread in threads:
        thread.start()
    # Every call has passed the gate's checks (its "decision" record is written) while the
    # first holds the session: all six are at the tool's door before any is let through.
    _wait_for(lambda: _decided(log) == 6 and bool(active))
    release.set()
    for thread in threads:
        thread.join()
    assert overlaps == []
    assert len(events(log, "outcome")) == 6


def _decided(log) -> int:
    """Gate decisions so far (a line being written by another thread is not counted yet)."""
    text = log.read_text() if log.exists() else ""
    return sum(
        json.loads(line)["event"] == "decision" for line in text.splitlines(keepends=True)
        if line.endswith("\n")
    )


def _wait_for(condition, seconds: float = 60.0) -> None:
    """Poll a condition; the deadline only stops a hung test."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_run_start_and_end_records(tmp_path) -> None:
    policy = policy_from({"tools": {"calculate": {"enabled": True}}})
    gate, log = make_gate(tmp_path, policy, limits=Limits(network="bridge"))
    gate.call(name="calculate", arguments='{"expression": "2**10"}', call_id="1")
    gate.close()
    gate.close()  # idempotent
    start = events(log, "run_start")
    end = events(log, "run_end")
    assert len(start) == 1 and len(end) == 1
    assert start[0]["enabled_tools"] == ["calculate"]
    assert start[0]["sandbox"]["network"] == "bridge"  # an opening is on the record
    assert end[0]["calls"] == {"calculate": 1}
