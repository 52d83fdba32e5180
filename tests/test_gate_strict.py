"""The stricter gate, one rule per test: strict arguments, one tool per name, a timeout on every
call, and the circuit breaker. (Unknown tools and invalid arguments counting toward the run's
halt is `test_gate_refusals.py::test_refused_calls_of_any_kind_halt_the_run_past_max_denied`.)

The gate, the audit file and the tools are real; no model is involved here.
"""

from __future__ import annotations

import threading
from typing import Annotated

import pytest
from pydantic import Field

from sbx.sandbox.limits import Limits
from sbx.tools.breaker import BREAKER_RULE
from sbx.tools.builtin.execute_python import make_execute_python
from sbx.tools.registry import DuplicateToolError, ToolFailure, build_tool, tool
from sbx.tools.rules import SANDBOX_GRACE_S, call_timeout
from tools_support import events, make_gate, policy_from


@tool
def count(n: int, flag: bool, label: str) -> str:
    """Echo typed values.

    Args:
        n: A whole number.
        flag: A boolean.
        label: Some text.
    """
    return f"{n} {flag} {label}"


@tool
def note(text: Annotated[str, Field(min_length=0)]) -> str:
    """Accept any text, even none.

    Args:
        text: Possibly empty.
    """
    return f"[{text}]"


def _custom(*names: str, **extra: object) -> dict[str, object]:
    return {"tools": {"custom": {name: {"enabled": True} for name in names}}, **extra}


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ('{"n": "5", "flag": true, "label": "x"}', "n"),  # a string is not a number
        ('{"n": 5, "flag": "true", "label": "x"}', "flag"),  # nor a boolean
        ('{"n": 5, "flag": 1, "label": "x"}', "flag"),
        ('{"n": 5.0, "flag": true, "label": "x"}', "n"),  # 5.0 is not an integer either
        ('{"n": 5, "flag": true, "label": ""}', "label"),  # a required string must say something
    ],
)
def test_arguments_are_validated_strictly(tmp_path, arguments, field) -> None:
    gate, log = make_gate(tmp_path, policy_from(_custom("count")), extra_tools=[count])
    outcome = gate.call(name="count", arguments=arguments, call_id="c1")
    assert outcome.status == "invalid"
    assert f"{field}:" in outcome.text or f"'{field}'" in outcome.text or field in outcome.text
    assert events(log, "decision")[-1]["decision"] == "invalid"
    ok = gate.call(name="count", arguments='{"n": 5, "flag": true, "label": "x"}', call_id="c2")
    assert (ok.status, ok.text) == ("ok", "5 True x")


def test_a_tool_may_accept_an_empty_string_when_it_says_so(tmp_path) -> None:
    gate, _ = make_gate(tmp_path, policy_from(_custom("note")), extra_tools=[note])
    outcome = gate.call(name="note", arguments='{"text": ""}', call_id="c1")
    assert (outcome.status, outcome.text) == ("ok", "[]")


def test_empty_code_and_expressions_are_refused_by_the_built_ins(tmp_path) -> None:
    policy = policy_from({"tools": {"calculate": {"enabled": True}}})
    gate, _ = make_gate(tmp_path, policy)
    assert gate.call(name="calculate", arguments='{"expression": ""}', call_id="c1").status == (
        "invalid"
    )
    schema = make_execute_python().openai_schema()["function"]
    assert schema["strict"] is True  # strict mode's subset has no minLength: not advertised
    assert "minLength" not in str(schema["parameters"])
    assert count.args_model.model_json_schema()["properties"]["label"]["minLength"] == 1


def test_two_tools_with_one_name_are_an_error(tmp_path) -> None:
    @tool(name="count")
    def other(n: int) -> str:
        """Another tool of the same name.

        Args:
            n: Anything.
        """
        return str(n)

    with pytest.raises(DuplicateToolError, match="'count'"):
        make_gate(tmp_path, policy_from(_custom("count")), extra_tools=[count, other])

    @tool(name="calculate")
    def fake_calculate(expression: str) -> str:
        """Shadow the built-in.

        Args:
            expression: Anything.
        """
        return "shadowed"

    with pytest.raises(DuplicateToolError, match="'calculate'"):  # a built-in is no exception
        make_gate(tmp_path, policy_from({"tools": {"calculate": {"enabled": True}}}),
                  extra_tools=[fake_calculate])
    gate, _ = make_gate(  # the explicit way to swap one in
        tmp_path, policy_from({"tools": {"calculate": {"enabled": True}}}),
        extra_tools=[fake_calculate], replace=True,
    )
    assert gate.call(name="calculate", arguments='{"expression": "1"}', call_id="c").text == (
        "shadowed"
    )
    twice = "^two tools are registered under the name 'count'$"
    with pytest.raises(DuplicateToolError, match=twice):  # replace never allows two in one list
        make_gate(tmp_path, policy_from(_custom("count")), extra_tools=[count, other],
                  replace=True)


def _hanging(release: threading.Event, entered: threading.Event, name: str = "hang"):
    def hang(seconds: int) -> str:
        """Block until the test releases it.

        Args:
            seconds: Ignored.
        """
        entered.set()
        release.wait(60)
        return "finished late"

    return build_tool(hang, name=name, sequential="shared")


def test_a_call_past_its_timeout_ends_error_and_is_abandoned(tmp_path) -> None:
    release, entered = threading.Event(), threading.Event()
    policy = policy_from({"tools": {"custom": {"hang": {"enabled": True, "timeout": "200ms"}}}})
    gate, log = make_gate(tmp_path, policy, extra_tools=[_hanging(release, entered)])
    try:
        outcome = gate.call(name="hang", arguments='{"seconds": 1}', call_id="c1")
        assert entered.is_set()
        assert outcome.status == "error"
        assert outcome.rule == "tools.custom.hang.timeout"
        assert "did not finish within 0.2 s (tools.custom.hang.timeout) and was abandoned" in (
            outcome.text
        )
        # the abandoned call still holds its sequential key: the next one waits within its own
        # timeout and ends the same way, rather than hanging the run
        second = gate.call(name="hang", arguments='{"seconds": 1}', call_id="c2")
        assert second.status == "error"
    finally:
        release.set()
    recorded = [o for o in events(log, "outcome") if o["tool"] == "hang"]
    assert [o["status"] for o in recorded] == ["error", "error"]
    assert all("finished late" not in o["text"] for o in recorded)  # its result is never used


def test_the_policy_default_timeout_bounds_custom_tools_without_their_own(tmp_path) -> None:
    release, entered = threading.Event(), threading.Event()
    policy = policy_from(
        {"tools": {"timeout": "150ms", "custom": {"slowpoke": {"enabled": True}}}}
    )
    gate, _ = make_gate(tmp_path, policy, extra_tools=[_hanging(release, entered, "slowpoke")])
    try:
        outcome = gate.call(name="slowpoke", arguments='{"seconds": 1}', call_id="c1")
    finally:
        release.set()
    assert (outcome.status, outcome.rule) == ("error", "tools.timeout")


def test_execute_python_is_bounded_past_the_sandboxs_own_deadline() -> None:
    policy = policy_from({"tools": {"timeout": "5s", "execute_python": {"timeout": "1s"}}})
    seconds, key = call_timeout(policy, Limits(timeout="20s"), "execute_python")
    assert (seconds, key) == (20 + SANDBOX_GRACE_S, "sandbox.timeout")
    policy = policy_from({"tools": {"execute_python": {"timeout": "10m"}}})
    assert call_timeout(policy, Limits(timeout="20s"), "execute_python") == (
        600.0, "tools.execute_python.timeout"
    )


FAILURES: list[str] = []


@tool
def flaky(mode: str) -> str:
    """Fail as told.

    Args:
        mode: "same", "other" or "ok".
    """
    FAILURES.append(mode)
    if mode == "ok":
        return "fine"
    raise ToolFailure(f"broken ({mode})")


def test_the_breaker_disables_a_tool_after_identical_failures(tmp_path) -> None:
    FAILURES.clear()
    policy = policy_from(_custom("flaky", quotas={"max_identical_failures": 3}))
    gate, log = make_gate(tmp_path, policy, extra_tools=[flaky])

    def send(mode: str):
        return gate.call(name="flaky", arguments=f'{{"mode": "{mode}"}}', call_id=mode)

    assert [send(m).status for m in ("same", "same", "ok", "same", "other")] == ["error"] * 2 + [
        "ok", "error", "error"
    ]  # a success or a different failure starts the count anew
    send("same")
    second = send("same")
    assert second.rule is None and "disabled" not in second.text
    tripping = send("same")
    assert tripping.status == "error" and tripping.rule == BREAKER_RULE
    assert "failed the same way 3 times in a row, so it is now disabled" in tripping.text
    entered = len(FAILURES)
    after = send("ok")  # even a call that would succeed is refused now
    assert (after.status, after.rule) == ("denied", BREAKER_RULE)
    assert len(FAILURES) == entered  # never entered
    assert events(log, "decision")[-1]["rule"] == BREAKER_RULE
