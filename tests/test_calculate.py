"""Acceptance 5: calculate is exact; refuses escapes, imports and huge powers, clearly.

"Fast" is pinned by wording, not by a stopwatch: a huge power is refused by the
estimate made *before* computing ("would have about N digits"), a message that the
check after computing ("has more than N digits") never produces.
"""

from __future__ import annotations

import json

import pytest

from sbx.tools.builtin.calc_engine import evaluate, render
from sbx.tools.builtin.calc_guards import CalcError
from tools_support import make_gate, policy_from


def calc(expression: str, **limits) -> str:
    bounds = {"max_length": 500, "max_digits": 4000, "timeout_s": 1.0, **limits}
    return render(evaluate(expression, **bounds))


def refusal(expression: str, **limits) -> str:
    """The refusal's message; each caller asserts on it."""
    with pytest.raises(CalcError) as info:
        calc(expression, **limits)
    return str(info.value)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1/3 + 1/6", "0.5"),
        ("0.1 + 0.2", "0.3"),
        ("1/3", "1/3 (≈ 0.333333333333333)"),
        ("2**-3", "0.125"),
        ("7 // 2, 7 % 2", "(3, 1)"),
        ("math.factorial(20)", "2432902008176640000"),
        ("comb(52, 5)", "2598960"),
        ("sqrt(2)", "1.4142135623730951 (floating point)"),
        ("round(2/3, 4)", "0.6667"),
        ("max(1, 2.5, 7/3)", "2.5"),
        ("2**100", "1267650600228229401496703205376"),
        ("1 if 3 > 2 else 0", "1"),
        ("-2**2", "-4"),
    ],
)
def test_exact_arithmetic(expression, expected) -> None:
    assert calc(expression) == expected


def test_refuses_dunder_attribute_escape() -> None:
    message = refusal("().__class__.__bases__")
    assert message == '"__bases__" is an invalid attribute name because it starts with "_".'
    assert "invalid attribute name" in refusal("math.sqrt.__self__")
    assert "attribute 'real' is not allowed" in refusal("(1).real")


def test_refuses_imports() -> None:
    assert (
        refusal("import os")
        == "imports are not allowed: calculate evaluates one arithmetic expression"
    )
    assert "imports are not allowed" in refusal("from os import system")
    assert (
        refusal('__import__("os")')
        == '"__import__" is an invalid variable name because it starts with "_"'
    )


@pytest.mark.parametrize(
    "expression",
    [
        "10**10**10",
        "9**9**9",
        "2**(2**64)",
        "(10**2000)**3",
        "1 << 10**9",
        "(2**13000) * (2**13000)",
    ],
)
def test_refuses_huge_numbers_before_computing(expression) -> None:
    message = refusal(expression)
    assert " would have about " in message  # the estimate made before computing
    assert message.endswith(" digits; the limit is 4000 digits")


def test_huge_results_from_functions_are_refused() -> None:
    assert "more than 4000 digits" in refusal("factorial(5000)")
    assert "larger than 10000" in refusal("factorial(10**6)")
    assert "larger than 1000" in refusal("round(1/3, 10**6)")


def test_other_refusals_are_clear() -> None:
    assert "unknown name 'x'" in refusal("x + 1")
    assert "unknown name 'open'" in refusal("open('/etc/passwd')")
    assert "Lambda is not allowed" in refusal("(lambda: 1)()")
    assert "ListComp is not allowed" in refusal("[x for x in (1, 2)]")
    assert "'a' is not a number" in refusal("'a' * 3")
    assert "operator '*' works on numbers only" in refusal("[1] * 10")
    assert refusal("1/0") == "division by zero"
    assert "single expression" in refusal("a = 1")
    assert "not a real number" in refusal("(-8) ** (1/3)")
    assert "longer than 5 characters" in refusal("1+2+3+4", max_length=5)


def test_time_bound_is_checked_between_operations() -> None:
    assert "took longer than" in refusal("1+1", timeout_s=1e-9)


def test_calculate_through_the_gate(tmp_path) -> None:
    gate, _ = make_gate(tmp_path, policy_from({"tools": {"calculate": {"enabled": True}}}))
    ok = gate.call(name="calculate", arguments='{"expression": "(1/3 + 0.25) * 12"}', call_id="1")
    assert (ok.status, ok.text) == ("ok", "7")
    bad = gate.call(name="calculate", arguments='{"expression": "10**10**10"}', call_id="2")
    assert bad.status == "error"  # and refused before computing: "would have about"
    assert (
        bad.text == "Error from calculate: 10 ** 10000000000 would have about 10000000000 digits; "
        "the limit is 4000 digits"
    )


NOT_A_NUMBER = "the result is not a number: calculate returns numbers and tuples of numbers"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("max((), default=abs)", "max() takes numbers (or tuples of numbers) only"),
        ("min((), default=math.sqrt)", "min() takes numbers (or tuples of numbers) only"),
        ("abs", NOT_A_NUMBER),
        ("math.sqrt", NOT_A_NUMBER),
        ("(1, sqrt)", NOT_A_NUMBER),
        ("abs if 1 else 1", NOT_A_NUMBER),
        ("min((abs, 1))", "min() takes numbers (or tuples of numbers) only"),
    ],
)
def test_only_numbers_come_back_never_a_host_object(expression, message) -> None:
    # The whole message is pinned, so no host object's repr ("<function ... at 0x...>")
    # can ride along in it.
    assert refusal(expression) == message


@pytest.mark.parametrize(
    "expression",
    [
        "-" * 490 + "1",
        "-" * 20_000 + "1",
        "abs(" * 120 + "1" + ")" * 120,
        "(" * 250 + "1" + ")" * 250,
        "1" + "+1" * 3000,
    ],
)
def test_deep_nesting_is_refused_cleanly(expression) -> None:
    assert refusal(expression, max_length=100_000) == (
        "the expression is nested too deeply (more than 100 levels); "
        "use sum() for long sums, or execute_python"
    )


def test_moderate_nesting_still_works() -> None:
    assert calc("(" * 150 + "1" + ")" * 150) == "1"
    assert calc("max(1, -2, key=abs)") == "-2"
    assert calc("-" * 20 + "1") == "1"
    assert calc("abs(" * 10 + "-1" + ")" * 10) == "1"
    assert calc("1" + "+1" * 20) == "21"


def test_deep_nesting_through_the_gate_is_an_error_observation(tmp_path) -> None:
    gate, _ = make_gate(tmp_path, policy_from({"tools": {"calculate": {"enabled": True}}}))
    expression = "-" * 490 + "1"
    arguments = json.dumps({"expression": expression})
    outcome = gate.call(name="calculate", arguments=arguments, call_id="1")
    assert outcome.status == "error" and "nested" in outcome.text
