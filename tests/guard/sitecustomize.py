"""Loaded by every Python child a test starts (tests/guard is first on its PYTHONPATH): watch what
the child starts and append it to the pytest process's report file (guard_starts.LOG_ENV), which
tests/conftest.py reads after each test. Does nothing where that variable is not set.

Python imports only the first `sitecustomize` on its path; this one then runs the next one found
after this folder, so a venv's or a distribution's own is not lost."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _install() -> None:
    log = os.environ.get("CQABENCH_STARTS_LOG")
    if not log:
        return
    import guard_starts

    guard_starts.install(guard_starts.log_report(log), log)


def _chain() -> None:
    """Run the next sitecustomize on sys.path, as Python would have without this folder."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_install()
_chain()
