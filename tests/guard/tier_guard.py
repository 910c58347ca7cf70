"""The pytest side of the start guard: a test that starts a kind it is not marked with fails.

tests/conftest.py registers this plugin in every run, `make test` as well as `make test-fast`, so
a missing marker fails CI rather than slipping a Snakemake run or an LLM into the fast tier
(issue 35: markers mean what they say). It installs guard_starts' hooks in the pytest process,
points the children at a report file, and after each phase of a test (setup, call, teardown)
compares what was started with the test's markers. A module- or class-scoped fixture's start
falls in the setup of the first test that uses it: mark the module (`pytestmark`) or class.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

import guard_starts

_seen: list[tuple[str, str]] = []
_unmarked: dict[tuple[str, str], list[tuple[str, str]]] = {}
_log: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    fd, path = tempfile.mkstemp(prefix="cqabench-starts-", suffix=".log")
    os.close(fd)
    _log.append(path)
    guard_starts.install(lambda kind, what: _seen.append((kind, what)), path)


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _log:
        try:
            os.unlink(path)
        except OSError:
            pass


def _children_since(offset: int) -> list[tuple[str, str]]:
    with open(_log[0], "rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    return [tuple(line.split("\t", 1)) for line in lines if "\t" in line]  # type: ignore[misc]


def _watch(item: pytest.Item, when: str) -> Iterator[None]:
    offset = os.path.getsize(_log[0])
    _seen.clear()
    guard_starts.allow({kind for kind in guard_starts.KINDS if item.get_closest_marker(kind)})
    yield
    started = [*_seen, *_children_since(offset)]
    _seen.clear()
    guard_starts.allow(frozenset())
    missing = [(kind, what) for kind, what in dict.fromkeys(started) if item.get_closest_marker(kind) is None]
    if missing:
        _unmarked[(item.nodeid, when)] = missing


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _watch(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _watch(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _watch(item, "teardown")


def message(missing: list[tuple[str, str]]) -> str:
    """What the failure says: each kind started without its marker, with what started it."""
    kinds = sorted({kind for kind, _ in missing})
    lines = [
        f"started {', '.join(kinds)} without the marker{'s' if len(kinds) > 1 else ''} "
        f"{', '.join('@pytest.mark.' + k for k in kinds)} (pyproject.toml's markers say what each means; "
        "`make test-fast` deselects them):"
    ]
    lines += [f"  {kind}: {what[:300]}" for kind, what in missing[:8]]
    if len(missing) > 8:
        lines.append(f"  ... and {len(missing) - 8} more")
    return "\n".join(lines)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A phase that started an unmarked kind fails, whatever its own outcome was."""
    outcome = yield
    missing = _unmarked.pop((item.nodeid, call.when), None)
    if not missing:
        return
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("start guard", message(missing)))
        return
    report.outcome = "failed"
    report.longrepr = message(missing)
