"""The `Python(...)` tool: arithmetic, comparisons, rounding and date differences, never `eval`.

The model's text is data: it is parsed with the standard library's `ast` (mode "eval": one
expression, so statements such as `import` cannot even parse) and walked by our own interpreter,
which knows a whitelist of node types and functions and nothing else. There are no names besides
the whitelisted functions, no attribute access (so no `str.format`), no subscripts or slices, no
comprehensions, no lambdas, no f-strings, no bytes and no complex literals.

The calculator is bounded by construction, because a model's turn is cached and a turn that
once crashed the job would crash every rerun. Every operation that can allocate is checked
*before* it runs, from the sizes of its operands: source length, node count and nesting depth
of the expression; the size of every number (a power's result size is estimated from
exponent x log2(base) before it is computed, so `9**9**9` is refused, not computed); the number
of elements of a list or tuple, nested ones counted (so `[0] * 10**8` and `[[0] * 10**4] * 10**4`
are refused before the repetition); strings are short date arguments that no operator may
build on (so `'%099999999999d' % 1` is refused before the formatting). With every value that
small, no single operation can run long, and the wall-clock budget checked at every node holds.
Complex and non-finite results are refused. Any violation, and any other failure of the
evaluation (`MemoryError`, `RecursionError`, ...), is a `CalcError` whose message the agent
sees as the tool's observation.

Dates: `date(2020, 5, 17)` or `date("2020-05-17")`; subtracting two dates gives days;
`days_between(a, b)` and `years_between(a, b)` (whole years, as an age is counted).
"""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
import reprlib
import time
from collections.abc import Callable
from typing import Any

MAX_SOURCE_CHARS = 400
MAX_NODES = 200
MAX_DEPTH = 50  # nesting of the expression tree: bounds the interpreter's recursion
MAX_ABS = 10**30  # every intermediate number must stay within this magnitude
MAX_EXPONENT = 64
MAX_ELEMENTS = 1000  # items of one list or tuple value, the items of nested ones counted
MAX_STRING_CHARS = 40  # strings are date arguments only
MAX_MESSAGE_CHARS = 200  # an unexpected exception's text, as the agent sees it
TIME_LIMIT_S = 0.05
_LIMIT = f"1e{int(math.log10(MAX_ABS))}"
_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = 6
_SHORT.maxlevel = 3


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


def _short(value: Any) -> str:
    """A bounded repr for messages: an operand may be a list of a thousand items."""
    return _SHORT.repr(value)


def _size(value: Any, limit: int = MAX_ELEMENTS) -> int:
    """Items of a list or tuple, the items of nested ones counted (0 for a scalar).

    Counting stops once past `limit`, so the count costs at most `limit` steps whatever the
    value: repetition shares items (`[[0] * 10] * 10` holds one inner list ten times), and
    each occurrence counts, as the formatted observation would show each.
    """
    if not isinstance(value, (list, tuple)):
        return 0
    count = 0
    for item in value:
        count += 1 + _size(item, limit - count)
        if count > limit:
            break
    return count


def _check_value(value: Any) -> Any:
    """Every node's value: a bool, a bounded finite number, a short string, a date or a small sequence."""
    if isinstance(value, (bool, dt.date)):
        return value
    if isinstance(value, complex):
        raise CalcError("complex numbers are not allowed (a negative number to a fractional power is one)")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalcError("the result is not a finite number")
    if isinstance(value, (int, float)):
        if abs(value) > MAX_ABS:
            raise CalcError(f"a number exceeds the limit of {_LIMIT}")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING_CHARS:
            raise CalcError(f"strings are for dates only (at most {MAX_STRING_CHARS} characters)")
        return value
    if isinstance(value, (list, tuple)):
        if _size(value) > MAX_ELEMENTS:
            raise CalcError(f"a list or tuple has more than {MAX_ELEMENTS} elements")
        return value
    raise CalcError(f"a {type(value).__name__} is not a value the calculator computes")


def _count(n: Any) -> int | None:
    """`n` as a repetition count, None when it is not an integer (then Python's TypeError says so)."""
    return int(n) if isinstance(n, int) else None


def _check_binop(op: ast.operator, left: Any, right: Any) -> None:
    """Refuse, before it runs, an operation whose result could be large or complex."""
    if isinstance(left, str) or isinstance(right, str):
        if isinstance(op, ast.Mult):
            raise CalcError("strings cannot be multiplied")
        if isinstance(op, ast.Mod):
            raise CalcError("string formatting with % is not allowed")
        raise CalcError("strings can only be date arguments")
    if isinstance(op, ast.Mult):
        for seq, n in ((left, _count(right)), (right, _count(left))):
            if isinstance(seq, (list, tuple)) and n is not None and n > 0:
                if n > MAX_ELEMENTS or _size(seq) * n > MAX_ELEMENTS:
                    raise CalcError(
                        f"repeating a sequence of {_size(seq)} element(s) {n} times would make "
                        f"more than {MAX_ELEMENTS} elements"
                    )
    if isinstance(op, ast.Add) and isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        if _size(left) + _size(right) > MAX_ELEMENTS:
            raise CalcError(f"joining these sequences would make more than {MAX_ELEMENTS} elements")
    if isinstance(op, ast.Pow):
        _check_power(left, right)


def _check_power(base: Any, exponent: Any) -> None:
    """A power's exponent and the size of its result (exponent x log2(base) bits), before computing it."""
    if not isinstance(exponent, (int, float)) or abs(exponent) > MAX_EXPONENT:
        raise CalcError(f"exponents are limited to {MAX_EXPONENT} in absolute value")
    if not isinstance(base, (int, float)):
        return  # Python's TypeError says what is wrong
    if base < 0 and isinstance(exponent, float) and not exponent.is_integer():
        raise CalcError("complex numbers are not allowed (a negative number to a fractional power is one)")
    if abs(base) > 1 and exponent > 0 and exponent * math.log2(abs(base)) > math.log2(MAX_ABS):
        raise CalcError(f"a number exceeds the limit of {_LIMIT}")


class _Evaluator:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def eval(self, node: ast.AST) -> Any:
        if time.monotonic() > self.deadline:
            raise CalcError(f"the calculation took longer than {TIME_LIMIT_S} s")
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise CalcError(
                f"{type(node).__name__} is not allowed (only arithmetic, comparisons and "
                f"the functions {', '.join(FUNCTIONS)})"
            )
        return _check_value(method(node))

    def _Expression(self, node: ast.Expression) -> Any:
        return self.eval(node.body)

    def _Constant(self, node: ast.Constant) -> Any:
        value = node.value
        if isinstance(value, str) and len(value) > MAX_STRING_CHARS:
            raise CalcError(f"string constants are for dates only (at most {MAX_STRING_CHARS} characters)")
        if isinstance(value, complex):
            raise CalcError(f"complex numbers are not allowed ({value!r})")
        if isinstance(value, (bool, int, float, str)):
            return value
        raise CalcError(f"constant {_short(value)} is not allowed (numbers, and strings for dates)")

    def _Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.eval(e) for e in node.elts)

    def _List(self, node: ast.List) -> Any:
        return [self.eval(e) for e in node.elts]

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            return not value
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise CalcError(f"operator {type(node.op).__name__} is not allowed")
        if not isinstance(value, (int, float)):
            raise CalcError(f"only a number has a sign, not {_short(value)}")
        return -value if isinstance(node.op, ast.USub) else +value

    def _BinOp(self, node: ast.BinOp) -> Any:
        fn = _BINOPS.get(type(node.op))
        if fn is None:
            raise CalcError(f"operator {type(node.op).__name__} is not allowed")
        left, right = self.eval(node.left), self.eval(node.right)
        _check_binop(node.op, left, right)
        try:
            result = fn(left, right)
        except ZeroDivisionError:
            raise CalcError("division by zero") from None
        except (TypeError, OverflowError, ValueError) as exc:
            raise CalcError(
                f"cannot compute {type(node.op).__name__} of {_short(left)} and {_short(right)}: {exc}"
            ) from None
        if isinstance(result, dt.timedelta):
            return result.days  # date - date: days
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
                raise CalcError(f"cannot compare {_short(left)} and {_short(right)}: {exc}") from None
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
            raise CalcError(f"{node.func.id}{_short(tuple(args))}: {exc}") from None

    def _Name(self, node: ast.Name) -> Any:
        raise CalcError(f"unknown name {node.id!r}: only numbers, dates and the functions {', '.join(FUNCTIONS)}")


def _depth(tree: ast.AST) -> int:
    """The nesting depth of a parsed expression, counted without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _parse(text: str) -> ast.Expression:
    """The checked tree of one expression: parsed, at most MAX_NODES parts, MAX_DEPTH deep."""
    if not text:
        raise CalcError("empty calculation")
    if len(text) > MAX_SOURCE_CHARS:
        raise CalcError(f"the calculation is longer than {MAX_SOURCE_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalcError(f"not a single expression ({exc.msg})") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; the parser's own limits
        raise CalcError(f"not a single expression ({type(exc).__name__})") from None
    n_nodes = sum(1 for _ in ast.walk(tree))
    if n_nodes > MAX_NODES:
        raise CalcError(f"the calculation has {n_nodes} parts, more than {MAX_NODES}")
    depth = _depth(tree)
    if depth > MAX_DEPTH:
        raise CalcError(f"the calculation is nested {depth} deep, more than {MAX_DEPTH}")
    return tree


def evaluate(source: str) -> Any:
    """The value of one whitelisted expression; `CalcError` for anything else, whatever failed.

    The checks above make the other failures unreachable as far as we know; the catch-all is the
    guarantee that model text can only ever produce an observation (a cached turn is replayed on
    every rerun). KeyboardInterrupt and SystemExit are not `Exception`s and pass through.
    """
    tree = _parse(source.strip())
    try:
        return _Evaluator(time.monotonic() + TIME_LIMIT_S).eval(tree)
    except CalcError:
        raise
    except RecursionError:
        raise CalcError("the calculation is nested too deeply") from None
    except MemoryError:
        raise CalcError("the calculation needs more memory than allowed") from None
    except Exception as exc:  # noqa: BLE001 - see the docstring
        raise CalcError(f"the calculation failed ({type(exc).__name__}: {str(exc)[:MAX_MESSAGE_CHARS]})") from None


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
