"""Compile and evaluate one `calculate` expression with RestrictedPython, exactly where possible.

Pipeline: length cap; `ast.parse` in eval mode (an `import` gets its own
message); RestrictedPython's compiler with a stricter policy subclass that
allows only arithmetic nodes, calls to an allowlist of functions (`sqrt` or
`math.sqrt`), and no names starting with `_` (RestrictedPython's own rule,
which is what refuses `().__class__` and `__import__`). The policy rewrites
every binary operator into a call to `Guards.binop` and every float literal
into an exact `Fraction`, so `0.1 + 0.2` is `3/10` and `1/3` stays a fraction.
Math functions return floats (inexact) and the answer says so.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

from RestrictedPython.compile import compile_restricted_eval
from RestrictedPython.transformer import RestrictingNodeTransformer

from sbx.tools.builtin.calc_guards import CalcError, Guards

_MATH_FUNCTIONS = (
    "sqrt isqrt exp log log2 log10 sin cos tan asin acos atan atan2 sinh cosh tanh "
    "hypot floor ceil trunc fabs gcd lcm factorial comb perm degrees radians copysign fmod"
).split()
_CONSTANTS: dict[str, Any] = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}
_BUILTINS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "min": min, "max": max, "int": int, "float": float,
    "sum": sum, "divmod": divmod,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    **_BUILTINS, **{name: getattr(math, name) for name in _MATH_FUNCTIONS}
}
_BINOPS = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mult", ast.Div: "div", ast.FloorDiv: "floordiv",
    ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift", ast.RShift: "rshift",
    ast.BitAnd: "bitand", ast.BitOr: "bitor", ast.BitXor: "bitxor",
}
_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Call,
    ast.Name, ast.Load, ast.Constant, ast.Attribute, ast.Tuple, ast.List, ast.keyword,
    ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
)


class _CalcPolicy(RestrictingNodeTransformer):
    """RestrictedPython's policy, narrowed to arithmetic and rewritten to call the guards."""

    def visit(self, node: ast.AST) -> Any:
        if not isinstance(node, _ALLOWED_NODES):
            self.error(node, f"{type(node).__name__} is not allowed in an arithmetic expression")
            return node
        return super().visit(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        value = node.value
        if isinstance(value, bool | int):
            return node
        if isinstance(value, float) and math.isfinite(value):
            exact = Fraction(repr(value))
            parts = (ast.Constant(exact.numerator), ast.Constant(exact.denominator))
            return _call("_sbx_fraction_", *parts, like=node)
        self.error(node, f"the literal {value!r} is not a number calculate accepts")
        return node

    def visit_Name(self, node: ast.Name) -> Any:
        known = node.id in _FUNCTIONS or node.id in _CONSTANTS or node.id == "math"
        if not known and not node.id.startswith("_"):
            self.error(node, f"unknown name {node.id!r}; {_known()}")
        return super().visit_Name(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        is_math = isinstance(node.value, ast.Name) and node.value.id == "math"
        if not node.attr.startswith("_") and not (is_math and _math_attr_allowed(node.attr)):
            self.error(node, f"attribute {node.attr!r} is not allowed; {_known()}")
        return super().visit_Attribute(node)

    def visit_Call(self, node: ast.Call) -> Any:
        if any(kw.arg is None for kw in node.keywords):
            self.error(node, "** arguments are not allowed")
        return super().visit_Call(node)

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        node = self.node_contents_visit(node)
        name = _BINOPS.get(type(node.op))
        if name is None:
            self.error(node, f"operator {type(node.op).__name__} is not allowed")
            return node
        return _call("_sbx_binop_", ast.Constant(name), node.left, node.right, like=node)


def _call(func: str, *args: ast.expr, like: ast.AST) -> ast.Call:
    """A call node to one of our guard functions (names RestrictedPython never re-checks)."""
    node = ast.copy_location(ast.Call(ast.Name(func, ast.Load()), list(args), []), like)
    return ast.fix_missing_locations(node)


def _math_attr_allowed(attr: str) -> bool:
    return attr in _MATH_FUNCTIONS or attr in _CONSTANTS


def _known() -> str:
    names = ", ".join([*sorted(_FUNCTIONS), *_CONSTANTS])
    return f"available: {names} (math functions also as math.NAME)"


def compile_expression(expression: str, *, max_length: int) -> Any:
    """Compile after every static check; raise `CalcError` with the first problem found.

    Python's parser and RestrictedPython's compiler recurse once per level of
    nesting, so 200 unary minuses would exhaust the interpreter's stack; the
    tree's depth is measured without recursion and bounded first.
    """
    if len(expression) > max_length:
        raise CalcError(f"the expression is longer than {max_length} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        if "too many nested" in str(exc.msg):
            raise CalcError(_TOO_DEEP) from None
        raise CalcError(_syntax_message(expression, exc)) from None
    except (RecursionError, MemoryError):
        raise CalcError(_TOO_DEEP) from None
    if _depth(tree) > MAX_DEPTH:
        raise CalcError(_TOO_DEEP)
    result = compile_restricted_eval(tree, "<calculate>", policy=_CalcPolicy)
    if result.errors:
        first = result.errors[0]
        raise CalcError(first.split(": ", 1)[1] if first.startswith("Line ") else first)
    return result.code


MAX_DEPTH = 100
"""Deepest nesting of the expression's tree (about 100 nested operators or calls)."""
_TOO_DEEP = (
    f"the expression is nested too deeply (more than {MAX_DEPTH} levels); "
    "use sum() for long sums, or execute_python"
)


def _depth(tree: ast.AST) -> int:
    """The depth of a syntax tree, measured with an explicit stack (no recursion)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _syntax_message(expression: str, exc: SyntaxError) -> str:
    """Imports get a message of their own; other syntax errors say where."""
    try:
        statements = ast.parse(expression.strip(), mode="exec").body
    except SyntaxError:
        statements = []
    if any(isinstance(s, ast.Import | ast.ImportFrom) for s in statements):
        return "imports are not allowed: calculate evaluates one arithmetic expression"
    if statements:
        return "only a single expression is allowed (no statements or assignments)"
    return f"syntax error at column {exc.offset}: {exc.msg}"


def evaluate(expression: str, *, max_length: int, max_digits: int, timeout_s: float) -> Any:
    """Evaluate an expression; the value is an int, Fraction, float, bool or a tuple of them."""
    code = compile_expression(expression, max_length=max_length)
    guards = Guards(max_digits=max_digits, timeout_s=timeout_s)
    namespace = _namespace(guards)
    try:
        value = eval(code, namespace)  # RestrictedPython bytecode; only guarded globals
    except CalcError:
        raise
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise CalcError(f"{type(exc).__name__}: {exc}") from None
    return guards.check(only_numbers(tuple(value) if isinstance(value, list) else value))


_NOT_A_NUMBER = "the result is not a number: calculate returns numbers and tuples of numbers"


def only_numbers(value: Any) -> Any:
    """The value if it is a number or a tuple of them; anything else is refused.

    `max((), default=abs)` evaluates to one of our guard functions, whose text
    would show a host memory address: only numbers may leave the evaluator.
    """
    if isinstance(value, tuple):
        for item in value:
            only_numbers(item)
    elif not isinstance(value, bool | int | Fraction | float):
        raise CalcError(_NOT_A_NUMBER)
    return value


def _namespace(guards: Guards) -> dict[str, Any]:
    """The only names the compiled expression can reach."""
    functions = {name: _guarded(guards, name, fn) for name, fn in _FUNCTIONS.items()}
    math_members = {**{n: functions[n] for n in _MATH_FUNCTIONS}, **_CONSTANTS}

    def getattr_(obj: Any, name: str) -> Any:
        if obj is _MATH and name in math_members:
            return math_members[name]
        raise CalcError(f"attribute {name!r} is not allowed")

    return {
        "__builtins__": {},
        "_getattr_": getattr_,
        "_sbx_binop_": guards.binop,
        "_sbx_fraction_": Fraction,
        "math": _MATH,
        **functions,
        **_CONSTANTS,
    }


_MATH = object()


def _guarded(guards: Guards, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kw: Any) -> Any:
        return guards.call(name, fn, args, kw)

    return call


def render(value: Any) -> str:
    """Exact results as integers, terminating decimals or fractions (with an approximation)."""
    if isinstance(value, tuple):
        return "(" + ", ".join(render(item) for item in value) + ")"
    if isinstance(value, bool | int):
        return str(value)
    if isinstance(value, Fraction):
        return _render_fraction(value)
    if isinstance(value, float):
        return f"{value!r} (floating point)"
    raise CalcError(_NOT_A_NUMBER)


def _render_fraction(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    with localcontext() as ctx:
        ctx.prec = 30
        if den == 1 and max(twos, fives) <= 60:
            ctx.prec = 200
            return format(Decimal(value.numerator) / Decimal(value.denominator), "f")
        approx = Decimal(value.numerator) / Decimal(value.denominator)
        return f"{value.numerator}/{value.denominator} (≈ {approx:.15g})"
