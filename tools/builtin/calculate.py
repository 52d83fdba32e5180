"""`calculate`: small exact arithmetic in-process, for what does not deserve a container.

RestrictedPython plus operand-size and time guards (see `calc_engine`,
`calc_guards`). This is not an isolation boundary and does not pretend to be:
it evaluates one arithmetic expression over numbers and an allowlist of
functions, nothing else.
"""

from __future__ import annotations

from sbx.tools.builtin.calc_engine import evaluate, render
from sbx.tools.builtin.calc_guards import CalcError
from sbx.tools.policy import CalculateRule
from sbx.tools.registry import Tool, ToolFailure, build_tool


def make_calculate(rule: CalculateRule) -> Tool:
    """The `calculate` tool with the policy's length, size and time bounds."""

    def calculate(expression: str) -> str:
        """Evaluate one arithmetic expression exactly, without starting a container.

        Fractions stay exact (1/3 + 1/6 = 0.5, 0.1 + 0.2 = 0.3); math functions give
        floating point. Operators: + - * / // % ** << >> & | ^, comparisons. Functions:
        abs round min max sum int float divmod, and math functions such as sqrt log exp
        sin factorial comb gcd (also as math.sqrt); constants pi e tau. No variables,
        imports or attribute access: use execute_python for programs and data.

        Args:
            expression: One expression, e.g. `(1/3 + 0.25) * 12` or `math.comb(52, 5)`.
        """
        try:
            value = evaluate(
                expression,
                max_length=rule.max_expression_length,
                max_digits=rule.max_digits,
                timeout_s=rule.timeout,
            )
        except CalcError as exc:
            raise ToolFailure(str(exc)) from None
        return render(value)

    return build_tool(calculate)
