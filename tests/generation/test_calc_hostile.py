"""The open-book calculator against model text written to break it (issue 21).

A model's turn is cached, so a calculation that once crashed the job would crash every rerun.
Every hostile expression here must end, through the real tool box (`Toolbox.run_many`, as the
agent loop calls it), in an error observation that says what was refused, within a second, in a
child process whose address space is limited to 512 MB (`resource.setrlimit(RLIMIT_AS)`, set in
the child so the test runner itself is not limited). The child runs every case and prints JSON.

Before the fix, `[0] * 10**8` reached 6 GB and raised MemoryError out of the tool box,
`[[0] * 10**4] * 10**4` ran 24.5 s against a 0.05 s limit, `'%099999999999d' % 1` raised
MemoryError and `(-8)**0.5` returned a complex number.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cqabench.generation.agent import tools
from cqabench.generation.agent.calc import MAX_ELEMENTS
from cqabench.generation.agent.tools import ArticleStore, Toolbox, ToolCall

REPO = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 512 * 2**20
SECOND = 10.0  # a bound on a refusal (milliseconds), loose enough for a machine at load 10: not a benchmark

# (case, model text, what the observation must say)
HOSTILE: list[tuple[str, str, str]] = [
    # the four cases of the issue
    ("list_repetition_10e8", "[0] * 10**8", "repeating a sequence of 1 element(s) 100000000 times"),
    ("nested_repetition", "[[0] * 10**4] * 10**4", "repeating a sequence of 1 element(s) 10000 times"),
    ("percent_format_width", "'%099999999999d' % 1", "string formatting with % is not allowed"),
    ("negative_fractional_power", "(-8)**0.5", "complex numbers are not allowed"),
    # nesting depth
    ("parens_10000_deep", "(" * 10000 + "1" + ")" * 10000, "longer than 400 characters"),
    ("minus_100000", "-" * 100000 + "1", "longer than 400 characters"),
    ("minus_399", "-" * 399 + "1", "800 parts, more than 200"),
    ("not_60", "not " * 60 + "1", "nested 62 deep, more than 50"),  # Expression, 60 UnaryOp, the last Not
    ("lists_10000_deep", "[" * 10000 + "]" * 10000, "longer than 400 characters"),
    ("lists_60_deep", "[" * 60 + "]" * 60, "nested 62 deep, more than 50"),  # 60 lists, Expression, the last ctx
    # huge literals
    ("digits_100000", "9" * 100000, "longer than 400 characters"),
    ("digits_399", "9" * 399, "exceeds the limit of 1e30"),
    ("float_1e309", "1e309", "not a finite number"),
    ("float_inf", "float('inf')", "not a finite number"),
    ("float_nan", "float('nan')", "not a finite number"),
    ("float_from_huge_string", "float('1e400')", "not a finite number"),
    ("complex_literal", "1j", "complex numbers are not allowed"),
    ("complex_cube_root", "(-8) ** (1/3)", "complex numbers are not allowed"),
    ("sqrt_negative", "sqrt(-1)", "math domain error"),
    ("bytes_literal", "b'x' * 10**9", "constant b'x' is not allowed"),
    # exponent towers, shifts and overflow
    ("tower_9_9_9", "9**9**9", "exponents are limited to 64"),
    ("tower_2_2_2_2_2", "2**2**2**2**2", "exponents are limited to 64"),
    ("power_over_bound", "3 ** 63", "exceeds the limit of 1e30"),  # 63 x log2(3) = 99.85 bits > log2(1e30) = 99.66
    ("float_power_over_bound", "10.0 ** 64", "exceeds the limit of 1e30"),
    ("shift_10e9", "1<<10**9", "operator LShift is not allowed"),
    ("product_over_bound", "10**30 * 10**30 * 10**30", "exceeds the limit of 1e30"),
    ("zero_negative_power", "0 ** -1", "division by zero"),
    ("division_by_zero", "1 / 0", "division by zero"),
    ("floor_division_by_zero", "1 // 0.0", "division by zero"),
    ("modulo_by_zero", "7 % 0", "division by zero"),
    # int <-> str: no int beyond 31 digits ever exists, so sys.set_int_max_str_digits is never reached
    ("int_from_4301_digits", "int('9' * 4301)", "strings cannot be multiplied"),
    ("int_from_40_digits", "int('9999999999999999999999999999999999999999')", "exceeds the limit of 1e30"),
    ("power_4300", "10 ** 4300", "exponents are limited to 64"),
    ("str_of_int", "str(10**30)", "calling str is not allowed"),
    # unicode digits are not Python digits in source (they are, inside int("..."), see below)
    ("arabic_indic_digits", "١٢٣ + 1", "not a single expression (invalid character"),
    ("fullwidth_digit", "１ * 10**8", "not a single expression (invalid character"),
    ("null_byte", "1\x00", "not a single expression"),
    # string formatting in every spelling
    ("percent_s", "'%s' % (1,)", "string formatting with % is not allowed"),
    ("str_format_width", "'{:>999999999}'.format(1)", "Attribute is not allowed"),
    ("fstring_width", "f'{1:>999999999}'", "JoinedStr is not allowed"),
    ("string_repetition", "'ab' * 10**8", "strings cannot be multiplied"),
    ("string_concatenation", "'2020-01-01' + '2020-01-01'", "strings can only be date arguments"),
    # sequences: repetition, concatenation, nesting, slicing, unpacking, comprehensions
    ("tuple_of_repetitions", "((0,) * 1000, (0,) * 1000)", f"more than {MAX_ELEMENTS} elements"),
    ("repeated_concatenation", "(0,) * 1000 + (0,) * 1000", "joining these sequences"),
    ("repetition_in_a_tuple", "((0,) * 30,) * 40", "repeating a sequence of 31 element(s) 40 times"),
    ("nested_count_1001", "[[0] * 10] * 91", "repeating a sequence of 11 element(s) 91 times"),  # 91 x 11
    ("repeat_count_from_power", "2 ** 64 * [0]", "repeating a sequence of 1 element(s) 18446744073709551616"),
    ("empty_list_huge_count", "[] * 10**30", "repeating a sequence of 0 element(s)"),
    ("slice_huge_step", "(1, 2, 3)[::10**18]", "Subscript is not allowed"),
    ("slice_of_repetition", "([0] * 10**8)[10**7:]", "Subscript is not allowed"),
    ("starred_unpacking", "max(*[[0] * 10**8])", "Starred is not allowed"),
    ("list_comprehension", "[0 for _ in (1, 2)]", "ListComp is not allowed"),
    ("generator", "max(0 for _ in (1, 2))", "GeneratorExp is not allowed"),
    ("dict_literal", "{0: [0] * 10**8}", "Dict is not allowed"),
    ("set_literal", "{1, 2}", "Set is not allowed"),
    ("walrus", "(x := [0] * 10)", "NamedExpr is not allowed"),
    ("lambda", "(lambda: 0)()", "calling Lambda is not allowed"),
    # names, attributes, calls
    ("bare_function_name", "max", "unknown name 'max'"),
    ("dunder_escape", "().__class__.__bases__[0].__subclasses__()", "Attribute is not allowed"),
    ("import_call", "__import__('os').system('true')", "Attribute is not allowed"),
    ("sign_of_a_list", "-[0]", "only a number has a sign"),
    ("round_digits_huge", "round(1.5, 10**9)", "round's digits must be an integer 0-15"),
    ("date_year_huge", "date(10**30, 1, 1)", "date"),
    ("compare_unorderable", "date(2000, 1, 1) < 5", "cannot compare"),
    ("keyword_argument", "round(2.5, ndigits=10**9)", "keyword arguments are not allowed"),
]

# legitimate uses: they must still work under the same memory limit (results checked by hand)
LEGITIMATE: list[tuple[str, str, str]] = [
    ("percentage", "12.5 * 3 / 100", "0.375"),
    ("rounding", "round(2/3, 2)", "0.67"),
    ("max", "max(3, 7)", "7"),
    ("min_of_list", "min([3, 1, 2])", "1"),
    ("years", "2002 - 1995", "7"),
    ("square_root", "sqrt(2)", "1.414213562"),
    ("power_at_bound", "3 ** 62", "381520424476945831628649898809"),  # 98.27 bits < 99.66; (3**31 = 617673396283947)**2
    ("ten_to_30", "10 ** 30", "1" + "0" * 30),  # MAX_ABS itself is allowed
    ("age", "years_between(date(1940, 10, 9), date(1980, 12, 8))", "40"),
    ("arabic_indic_in_int", "int('١٢٣') + 1", "124"),  # int() reads any Unicode decimal digits: bounded
    ("parens_199_deep", "(" * 199 + "1" + ")" * 199, "1"),  # parentheses make no nodes
    ("nested_count_1000", "max([[0] * 9] * 100) == [0] * 9", "True"),  # 100 x (1 + 9) = 1000: the limit
    ("negative_count", "[0] * -10**8", ""),  # Python's empty list
    # the largest list: 1000 zeros format as "0, 0, ..." (2998 characters); the tool box cuts them
    # to 600 at the last space (index 599), so 199 "0, " and "0," are kept, then " …"
    ("largest_list", "[0] * 1000", "0, " * 199 + "0, …"),
]

CHILD = r"""
import json, resource, sys, time
from cqabench.generation.agent.tools import ArticleStore, Toolbox, ToolCall

class NoSearch:  # TEST DOUBLE of the BM25 searcher: the Python tool never searches
    def search(self, queries, k):
        return [[] for _ in queries]
    def close(self):
        pass

limit = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (limit, hard if hard != resource.RLIM_INFINITY and hard < limit else hard))
try:
    bytearray(limit)  # the limit bites: a single allocation of the whole limit fails
    limit_bites = False
except MemoryError:
    limit_bites = True
box = Toolbox(ArticleStore([]), NoSearch(), max_tool_chars=600)
results = {}
for name, source in json.load(sys.stdin):
    start = time.perf_counter()
    try:
        [obs] = box.run_many([ToolCall("Python", source)])
        row = {"text": obs.text, "error": obs.error}
    except Exception as exc:  # what the tool box must never do: recorded, so the case is named
        row = {"escaped": f"{type(exc).__name__}: {exc}"[:300]}
    row["elapsed_s"] = time.perf_counter() - start
    results[name] = row
print(json.dumps({"limit_bites": limit_bites, "results": results}))
"""


@pytest.fixture(scope="module")
def child_results() -> dict[str, Any]:
    """Every case run once through the tool box in a child limited to 512 MB of address space."""
    cases = [(name, source) for name, source, _ in HOSTILE + LEGITIMATE]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "workflow"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(MEMORY_LIMIT)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["limit_bites"], "the 512 MB address-space limit was not in force in the child"
    return out["results"]


def test_names_are_unique() -> None:
    names = [name for name, _, _ in HOSTILE + LEGITIMATE]
    assert len(names) == len(set(names)) and len(HOSTILE) >= 24


@pytest.mark.parametrize("name, source, refused", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_expression_is_an_error_observation(
    child_results: dict[str, Any], name: str, source: str, refused: str
) -> None:
    row = child_results[name]
    assert "escaped" not in row, f"{source[:60]!r} escaped the tool box: {row['escaped']}"
    assert row["error"] is True, row
    assert row["text"].startswith("Error: ") and refused in row["text"], row["text"]
    assert row["elapsed_s"] < SECOND, row


@pytest.mark.parametrize("name, source, value", LEGITIMATE, ids=[c[0] for c in LEGITIMATE])
def test_legitimate_expression_still_works(child_results: dict[str, Any], name: str, source: str, value: str) -> None:
    row = child_results[name]
    assert "escaped" not in row, row
    assert (row["text"], row["error"]) == (value, False)
    assert row["elapsed_s"] < SECOND, row


# ---- the tool box: any failure of a tool is an observation ------------------------------------


class NoSearch:
    """TEST DOUBLE of the BM25 searcher (the tools under test never search)."""

    def search(self, queries: list[str], k: int) -> list[list[str]]:
        return [[] for _ in queries]

    def close(self) -> None:
        pass


def _raise(exc: BaseException) -> Any:
    def fail(*_: Any, **__: Any) -> Any:
        raise exc

    return fail


@pytest.mark.parametrize(
    "exc",
    [
        MemoryError(),
        RecursionError("maximum recursion depth exceeded"),
        OverflowError("int too large"),
        KeyError("docid"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_toolbox_turns_any_tool_failure_into_an_observation(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """A calculator (or article lookup) that raises gives the agent an error observation."""
    box = Toolbox(ArticleStore([]), NoSearch())
    monkeypatch.setattr(tools, "evaluate", _raise(exc))
    monkeypatch.setattr(ArticleStore, "find", _raise(exc))
    calc, intro, after = box.run_many(
        [ToolCall("Python", "1 + 1"), ToolCall("GetIntro", "Anything"), ToolCall("Unknown", "x")]
    )
    name = type(exc).__name__
    assert calc.error and calc.text.startswith(f"Error: the Python tool failed on this input ({name}"), calc
    assert intro.error and intro.text.startswith(f"Error: the GetIntro tool failed on this input ({name}"), intro
    assert after.error and "unknown tool 'Unknown'" in after.text  # the batch went on after the failures


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)], ids=lambda e: type(e).__name__)
def test_toolbox_lets_interrupts_through(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """Ctrl-C and exit stop the job: they are not a tool's failure."""
    monkeypatch.setattr(tools, "evaluate", _raise(exc))
    with pytest.raises(type(exc)):
        Toolbox(ArticleStore([]), NoSearch()).run_many([ToolCall("Python", "1 + 1")])
