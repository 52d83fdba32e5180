"""Run-time guards for `calculate`: bounded numbers, bounded time, exact where possible.

Every binary operator and every function call of an expression is routed
through these guards (the compiler in `calc_engine` rewrites the tree). They
refuse *before* computing anything whose size could explode (`10**10**10`,
`1 << 10**9`, a product of two huge integers, `factorial(10**6)`), check the
size of every result, and check a deadline between operations. The
expression has no loops and a length cap, so the number of operations is
bounded too. This is arithmetic hygiene for an in-process tool, not an
isolation boundary: model-written programs go to the sandbox.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any, TypeGuard

Number = int | Fraction | float
_BITS_PER_DIGIT = math.log2(10)


class CalcError(Exception):
    """A refusal or an arithmetic error, worded for the model."""


class Guards:
    """Size and time limits for one evaluation."""

    def __init__(self, *, max_digits: int, timeout_s: float) -> None:
        self.max_digits = max_digits
        self.max_bits = int(max_digits * _BITS_PER_DIGIT) + 1
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s

    def tick(self) -> None:
        """Refuse to go on once the evaluation's time is up."""
        if time.monotonic() > self.deadline:
            raise CalcError(f"the evaluation took longer than {self.timeout_s:g} s and was stopped")

    def check(self, value: Any) -> Any:
        """Refuse integers and fractions with more digits than allowed."""
        if isinstance(value, tuple | list):
            for item in value:
                self.check(item)
        elif isinstance(value, int | Fraction) and bits(value) > self.max_bits:
            raise CalcError(f"a number in this calculation has more than {self.max_digits} digits")
        return value

    def binop(self, name: str, left: Any, right: Any) -> Any:
        """`left <op> right` with the size checks that op needs."""
        self.tick()
        if not (is_number(left) and is_number(right)):
            raise CalcError(f"operator {_SYMBOLS[name]!r} works on numbers only")
        if name == "pow":
            return self.check(self.power(left, right))
        if name == "mult" and _exact(left) and _exact(right):
            self._limit(bits(left) + bits(right), f"{_short(left)} * {_short(right)}")
        if name == "lshift" and isinstance(right, int) and right > 0:
            self._limit(bits(left) + right, f"{_short(left)} << {_short(right)}")
        if name == "div" and _exact(left) and _exact(right):
            return self.check(_arith(lambda: Fraction(left) / Fraction(right)))
        return self.check(_arith(lambda: _OPERATORS[name](left, right)))

    def power(self, base: Number, exponent: Number) -> Any:
        """Exact powers when both sides are exact and the result fits; floats otherwise."""
        if _exact(exponent) and Fraction(exponent).denominator == 1:
            exp = int(exponent)
            if _exact(base):
                if bits(base) > 1:
                    estimate = math.ceil(_log2(base) * abs(exp))
                    self._limit(estimate, f"{_short(base)} ** {_short(exp)}")
                return _arith(lambda: Fraction(base) ** exp if exp < 0 else base**exp)
        result = _arith(lambda: float(base) ** float(exponent))
        if isinstance(result, complex):
            raise CalcError("the result is not a real number (negative base, fractional power)")
        return result

    def _limit(self, estimated_bits: int, what: str) -> None:
        if estimated_bits > self.max_bits:
            digits = int(estimated_bits / _BITS_PER_DIGIT)
            raise CalcError(
                f"{what} would have about {digits} digits; the limit is {self.max_digits} digits"
            )

    def call(
        self, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kw: dict[str, Any]
    ) -> Any:
        """Call an allowed function with bounded arguments and a checked result."""
        self.tick()
        for key, value in (*enumerate(args), *kw.items()):
            if key != "key" and not _numbers(value):
                raise CalcError(f"{name}() takes numbers (or tuples of numbers) only")
            self.check(value)
        pre = _PRECHECKS.get(name)
        if pre is not None:
            pre(args, kw)
        return self.check(_arith(lambda: fn(*args, **kw)))


def bits(value: Any) -> int:
    """Size of an exact number in bits (numerator or denominator, whichever is larger)."""
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return abs(value).bit_length()
    if isinstance(value, Fraction):
        return max(abs(value.numerator).bit_length(), value.denominator.bit_length())
    return 1


def _log2(value: int | Fraction) -> float:
    """log2 of the larger of numerator and denominator (exact ints of any size are fine)."""
    fraction = Fraction(value)
    return max(math.log2(abs(fraction.numerator) or 1), math.log2(fraction.denominator))


def is_number(value: Any) -> bool:
    """Numbers only: no strings, lists or other objects reach an operator."""
    return isinstance(value, int | float | Fraction)


def _numbers(value: Any) -> bool:
    """A number, or a tuple or list of them (at any depth): never a function or other object."""
    if isinstance(value, tuple | list):
        return all(_numbers(item) for item in value)
    return is_number(value)


def _exact(value: Any) -> TypeGuard[int | Fraction]:
    return isinstance(value, int | Fraction)


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"{text[:8]}...({len(text)} chars)"


def _arith(compute: Callable[[], Any]) -> Any:
    """Run one computation, turning Python's arithmetic errors into model-readable refusals."""
    try:
        return compute()
    except ZeroDivisionError:
        raise CalcError("division by zero") from None
    except OverflowError:
        raise CalcError("the result is too large for floating point") from None
    except (TypeError, ValueError) as exc:
        raise CalcError(f"{type(exc).__name__}: {exc}") from None


def _at_most(limit: int, *positions: int) -> Callable[[tuple[Any, ...], dict[str, Any]], None]:
    """A precheck: the integer arguments at these positions must be at most `limit`."""

    def check(args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        for index in positions:
            value = args[index] if index < len(args) else None
            if isinstance(value, int) and abs(value) > limit:
                raise CalcError(f"argument {index + 1} is larger than {limit}, the most allowed")
        for value in kw.values():
            if isinstance(value, int) and abs(value) > limit:
                raise CalcError(f"an argument is larger than {limit}, the most allowed")

    return check


_PRECHECKS: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], None]] = {
    "factorial": _at_most(10_000, 0),
    "comb": _at_most(10_000, 0, 1),
    "perm": _at_most(10_000, 0, 1),
    "round": _at_most(1_000, 1),
}

_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mult": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
    "bitand": operator.and_,
    "bitor": operator.or_,
    "bitxor": operator.xor,
    "div": operator.truediv,
}
_SYMBOLS = {
    "add": "+", "sub": "-", "mult": "*", "div": "/", "floordiv": "//", "mod": "%", "pow": "**",
    "lshift": "<<", "rshift": ">>", "bitand": "&", "bitor": "|", "bitxor": "^",
}
