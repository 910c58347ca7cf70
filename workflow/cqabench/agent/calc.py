"""The `Python(...)` tool: arithmetic, comparisons, rounding and date differences, never `eval`.

The model's text is parsed with the standard library's `ast` (mode "eval": one expression,
so statements such as `import` cannot even parse) and walked by our own interpreter, which
knows a whitelist of node types and functions and nothing else. There are no names besides
the whitelisted functions, no attribute access, no subscripts, no comprehensions, no lambdas.
Limits keep one call small: source length, node count, the size of every number (an
exponent is checked before it is computed, so `9**9**9` is refused, not computed), and a
wall-clock budget checked at every node. Any violation is a `CalcError` whose message the
agent sees as the tool's observation.

Dates: `date(2020, 5, 17)` or `date("2020-05-17")`; subtracting two dates gives days;
`days_between(a, b)` and `years_between(a, b)` (whole years, as an age is counted).
"""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
import time
from collections.abc import Callable
from typing import Any

MAX_SOURCE_CHARS = 400
MAX_NODES = 200
MAX_ABS = 10**30  # every intermediate number must stay within this magnitude
MAX_EXPONENT = 64
TIME_LIMIT_S = 0.05


class CalcError(ValueError):
    """The expression is not allowed or cannot be evaluated; the message says why."""


def _years_between(a: dt.date, b: dt.date) -> int:
    """Whole years from a to b (negative when b is earlier), counted as ages are."""
    if not isinstance(a, dt.date) or not isinstance(b, dt.date):
        raise CalcError("years_between takes two dates, e.g. years_between(date(1950, 1, 2), date(2000, 1, 1))")
    sign = 1
    if b < a:
        a, b, sign = b, a, -1
    years = b.year - a.year - ((b.month, b.day) < (a.month, a.day))
    return sign * years


def _days_between(a: dt.date, b: dt.date) -> int:
    if not isinstance(a, dt.date) or not isinstance(b, dt.date):
        raise CalcError("days_between takes two dates")
    return (b - a).days


def _date(*args: Any) -> dt.date:
    try:
        if len(args) == 1 and isinstance(args[0], str):
            return dt.date.fromisoformat(args[0].strip())
        if len(args) == 3 and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return dt.date(*args)
    except ValueError as exc:
        raise CalcError(f"bad date {args!r}: {exc}") from None
    raise CalcError('date takes (year, month, day) or one "YYYY-MM-DD" string')


def _round(x: Any, ndigits: Any = None) -> Any:
    if ndigits is not None and (not isinstance(ndigits, int) or not 0 <= ndigits <= 15):
        raise CalcError("round's digits must be an integer 0-15")
    return round(x) if ndigits is None else round(x, ndigits)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "int": int,
    "float": float,
    "sqrt": math.sqrt,
    "date": _date,
    "days_between": _days_between,
    "years_between": _years_between,
}

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _check_number(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise CalcError("the result is not a finite number")
        if abs(value) > MAX_ABS:
            raise CalcError(f"a number exceeds the limit of 1e{int(math.log10(MAX_ABS))}")
    return value


class _Evaluator:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def eval(self, node: ast.AST) -> Any:
        if time.monotonic() > self.deadline:
            raise CalcError(f"the calculation took longer than {TIME_LIMIT_S} s")
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise CalcError(f"{type(node).__name__} is not allowed (only arithmetic, comparisons and "
                            f"the functions {', '.join(FUNCTIONS)})")
        return _check_number(method(node))

    def _Expression(self, node: ast.Expression) -> Any:
        return self.eval(node.body)

    def _Constant(self, node: ast.Constant) -> Any:
        if isinstance(node.value, (bool, int, float, str)):
            if isinstance(node.value, str) and len(node.value) > 40:
                raise CalcError("string constants are for dates only (at most 40 characters)")
            return node.value
        raise CalcError(f"constant {node.value!r} is not allowed")

    def _Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.eval(e) for e in node.elts)

    def _List(self, node: ast.List) -> Any:
        return [self.eval(e) for e in node.elts]

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.eval(node.operand)
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        if isinstance(node.op, ast.Not):
            return not value
        raise CalcError(f"operator {type(node.op).__name__} is not allowed")

    def _BinOp(self, node: ast.BinOp) -> Any:
        fn = _BINOPS.get(type(node.op))
        if fn is None:
            raise CalcError(f"operator {type(node.op).__name__} is not allowed")
        left, right = self.eval(node.left), self.eval(node.right)
        if isinstance(node.op, ast.Pow):
            if not isinstance(right, (int, float)) or abs(right) > MAX_EXPONENT:
                raise CalcError(f"exponents are limited to {MAX_EXPONENT} in absolute value")
            if isinstance(left, (int, float)) and abs(left) > 1 and right > 0 \
                    and right * math.log10(abs(left)) > math.log10(MAX_ABS):
                raise CalcError(f"a number exceeds the limit of 1e{int(math.log10(MAX_ABS))}")
        if isinstance(node.op, ast.Mult) and (isinstance(left, str) or isinstance(right, str)):
            raise CalcError("strings cannot be multiplied")
        try:
            result = fn(left, right)
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        except (TypeError, OverflowError, ValueError) as exc:
            raise CalcError(f"cannot compute {type(node.op).__name__} of {left!r} and {right!r}: {exc}") from None
        if isinstance(result, dt.timedelta):
            return result.days  # date - date: days
        if isinstance(result, str):
            raise CalcError("strings can only be date arguments")
        return result

    def _Compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        for op, comp in zip(node.ops, node.comparators):
            fn = _CMPOPS.get(type(op))
            if fn is None:
                raise CalcError(f"comparison {type(op).__name__} is not allowed")
            right = self.eval(comp)
            try:
                if not fn(left, right):
                    return False
            except TypeError as exc:
                raise CalcError(f"cannot compare {left!r} and {right!r}: {exc}") from None
            left = right
        return True

    def _BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.eval(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)

    def _IfExp(self, node: ast.IfExp) -> Any:
        return self.eval(node.body) if self.eval(node.test) else self.eval(node.orelse)

    def _Call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            what = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
            raise CalcError(f"calling {what} is not allowed; functions: {', '.join(FUNCTIONS)}")
        if node.keywords:
            raise CalcError("keyword arguments are not allowed")
        args = [self.eval(a) for a in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except CalcError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise CalcError(f"{node.func.id}{tuple(args)!r}: {exc}") from None

    def _Name(self, node: ast.Name) -> Any:
        raise CalcError(f"unknown name {node.id!r}: only numbers, dates and the functions {', '.join(FUNCTIONS)}")


def evaluate(source: str) -> Any:
    """The value of one whitelisted expression; `CalcError` for anything else."""
    text = source.strip()
    if not text:
        raise CalcError("empty calculation")
    if len(text) > MAX_SOURCE_CHARS:
        raise CalcError(f"the calculation is longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalcError(f"not a single expression ({exc.msg})") from None
    n_nodes = sum(1 for _ in ast.walk(tree))
    if n_nodes > MAX_NODES:
        raise CalcError(f"the calculation has {n_nodes} parts, more than {MAX_NODES}")
    return _Evaluator(time.monotonic() + TIME_LIMIT_S).eval(tree)


def format_value(value: Any) -> str:
    """How the agent sees a result: integers as integers, floats without float noise, dates ISO."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (tuple, list)):
        return ", ".join(format_value(v) for v in value)
    return str(value)
