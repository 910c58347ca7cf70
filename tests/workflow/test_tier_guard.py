"""The tier markers cannot lie (issue 35): the start guard recognises what a test starts, and a
test that starts a kind without its marker fails, in the test's own process or in a grandchild.

The starts here are stand-ins with the real names (a `snakemake` or `java` that only exits, a
`jnius` module that only defines `autoclass`): the guard goes by name and import, and the test
must not itself start what it is about."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

import guard_starts

REPO = Path(__file__).resolve().parents[2]
GUARD = REPO / "tests" / "guard"


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        ([sys.executable, "-m", "snakemake", "-n"], "snakemake"),
        (["/usr/bin/python3.11", "-m", "snakemake.cli"], "snakemake"),
        (["/work/.venv/bin/snakemake", "--cores", "1"], "snakemake"),
        ([sys.executable, "-m", "cqabench.cli", "estimate"], None),  # its own child is watched instead
        ([sys.executable, "-c", "import snakemake"], None),
        (["/opt/jdk/bin/java", "-jar", "x.jar"], "jvm"),
        (["chromium", "--headless", "--dump-dom", "file:///x"], "browser"),
        (["bash", "/repo/scripts/slurm_local.sh"], "daemon"),
        (["bash", "/repo/scripts/slurm_local.sh", "--stop"], None),
        (["vllm", "serve", "model"], "daemon"),
        ([sys.executable, "-m", "vllm.entrypoints.openai.api_server"], "daemon"),
        ([sys.executable, "-m", "cqabench.retrieval.colbert", "index", "req.json"], "colbert"),
        (["git", "rev-parse", "HEAD"], None),
        (["make", "-n", "-s", "run"], None),
        (["/bin/sh", "-c", "cd work && PYTHONPATH=x exec snakemake -n | tail -1"], "snakemake"),
        (["/bin/sh", "-c", "echo snakemake java && grep chromium notes.txt"], None),
        (["bash", "-o", "pipefail", "-c", "cqabench estimate; timeout 60 java -version"], "jvm"),
        ("python -m snakemake --lint", "snakemake"),  # os.system's one string
        (["bash", "-c", "cd work\nsnakemake -n"], "snakemake"),
        (["bash", "-c", "make -n \\\n  setup-gpu\nif true; then java -version; fi"], "jvm"),
        (["sh", "-c", "echo '' && git status"], None),
    ],
)
def test_classify_names_the_kind_a_command_starts(argv: list[str] | str, kind: str | None) -> None:
    assert guard_starts.classify(argv) == kind


def test_executable_overrides_the_argv0() -> None:
    assert guard_starts.classify(["anything", "-n"], executable="/usr/local/bin/snakemake") == "snakemake"


def test_child_env_puts_the_guard_first_once_and_passes_on_the_test_s_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(guard_starts.REFUSE_ENV, raising=False)
    monkeypatch.setitem(guard_starts._state, "allowed", frozenset({"jvm", "engine"}))
    env = guard_starts.child_env({"PYTHONPATH": "/a:/b", "X": "1", guard_starts.REFUSE_ENV: "1"})
    assert env["PYTHONPATH"] == f"{GUARD}:/a:/b" and env["X"] == "1"
    assert env[guard_starts.LOG_ENV] == guard_starts._state["log"] and env[guard_starts.ALLOWED_ENV] == "engine,jvm"
    assert guard_starts.REFUSE_ENV not in env and guard_starts.UNDER_ENV not in env  # this process's, not env's
    assert guard_starts.child_env(env)["PYTHONPATH"] == env["PYTHONPATH"]
    assert guard_starts.child_env(None, under_snakemake=True)[guard_starts.UNDER_ENV] == "1"


def test_markers_declared_are_the_kinds_and_the_fast_tier_deselects_them_all() -> None:
    ini = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in ini["addopts"].split()
    assert [m.split(":", 1)[0] for m in ini["markers"]] == list(guard_starts.KINDS)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    expression = re.search(r'^FAST_TIER := "(.+)"$', makefile, re.M)
    assert expression is not None, "Makefile: no FAST_TIER expression"
    assert expression.group(1) == f"not ({' or '.join(guard_starts.KINDS)})"


_STAND_INS = """
import os, stat, subprocess, sys
from pathlib import Path

import pytest

BIN = Path(__file__).parent / "bin"


def _exe(name):
    BIN.mkdir(exist_ok=True)
    path = BIN / name
    path.write_text("#!/bin/sh\\nexit 0\\n")
    path.chmod(0o755)
    return str(path)


def test_unmarked_snakemake():
    subprocess.run([_exe("snakemake"), "-n"], check=True)


@pytest.mark.snakemake
def test_marked_snakemake():
    subprocess.run([_exe("snakemake"), "-n"], check=True)


def test_unmarked_java_in_a_grandchild():
    java = _exe("java")
    subprocess.run([sys.executable, "-c", f"import subprocess; subprocess.run([{java!r}], check=True)"], check=True)


def test_unmarked_jvm_in_process():
    import jnius  # the stand-in in this folder
    assert jnius.autoclass("java.lang.String") == "java.lang.String"


@pytest.mark.jvm
def test_marked_jvm_in_a_child():
    subprocess.run([sys.executable, "-c", "import jnius"], check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)})


@pytest.mark.snakemake
def test_marked_snakemake_whose_job_starts_java():
    java = _exe("java")
    job = BIN / "snakemake"
    job.write_text(f"#!{sys.executable}\\nimport subprocess\\nsubprocess.run([{java!r}], check=True)\\n")
    job.chmod(0o755)
    subprocess.run([str(job)], check=True)


def test_starts_nothing():
    subprocess.run(["true"], check=True)


def test_unmarked_and_failing_keeps_its_failure():
    subprocess.run([_exe("snakemake")], check=True)
    assert 1 == 2
"""


@pytest.mark.parametrize("refuse", ["0", "1"])
def test_a_test_that_starts_a_kind_without_its_marker_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, refuse: str
) -> None:
    """The same verdicts where starts are only reported (`make test`) and where they are refused
    as well (`make test-fast`); a marked test is never refused."""
    monkeypatch.setenv(guard_starts.REFUSE_ENV, refuse)
    pytester.makepyfile(test_starts=_STAND_INS)
    pytester.makepyfile(jnius="def autoclass(name):\n    return name\n")
    pytester.makeconftest(f"import sys\nsys.path.insert(0, {str(GUARD)!r})\npytest_plugins = ['tier_guard']\n")
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {k}: x\n" for k in guard_starts.KINDS))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    out = result.stdout.str()
    for name in (
        "test_marked_snakemake",
        "test_marked_jvm_in_a_child",
        "test_marked_snakemake_whose_job_starts_java",
        "test_starts_nothing",
    ):
        assert f"PASSED test_starts.py::{name}" in out, out
    for name in (
        "test_unmarked_snakemake",
        "test_unmarked_java_in_a_grandchild",
        "test_unmarked_jvm_in_process",
        "test_unmarked_and_failing_keeps_its_failure",
    ):
        assert f"FAILED test_starts.py::{name}" in out, out
    result.assert_outcomes(passed=4, failed=4)
    assert "started snakemake without the marker @pytest.mark.snakemake" in out
    assert "started jvm without the marker @pytest.mark.jvm" in out
    assert "jvm: import jnius (starts the JVM)" in out
    assert re.search(r"jvm: \S*/bin/java", out), "the grandchild's java was not reported"
    if refuse == "1":
        assert "refused to start snakemake" in out
    else:
        assert "jvm: jnius.autoclass" in out
        assert "assert 1 == 2" in out  # its own failure is kept, the guard's finding added
