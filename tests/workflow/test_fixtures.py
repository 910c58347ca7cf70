"""The suite's own data and its no-skip rule (issue 21): every vendored fixture is attributed in
tests/fixtures/README.md and matches its recorded sha256, the fixtures stay small, no test reads
../shared, and under CI=true a skip fails the run unless tests/conftest.py allow-lists it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import CI_SKIP_ALLOWED, FIXTURES, REPO

README = FIXTURES / "README.md"
MAX_FIXTURE_BYTES = 3 * 1024 * 1024  # "a few MB at most"


def _readme_rows() -> dict[str, str]:
    """{relative path: sha256 or '—'} from the README's table (first and last column)."""
    rows = {}
    for line in README.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `([^`]+)` \|.*\| (`[0-9a-f]{64}`|—) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2).strip("`")
    return rows


def test_every_fixture_is_attributed_and_unchanged() -> None:
    rows = _readme_rows()
    files = {p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*") if p.is_file() and p != README}
    assert files == set(rows), "fixtures without a README row, or rows without a file"
    for rel, digest in rows.items():
        if digest != "—":
            assert hashlib.sha256((FIXTURES / rel).read_bytes()).hexdigest() == digest, rel


def test_fixtures_stay_small() -> None:
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert total < MAX_FIXTURE_BYTES, f"tests/fixtures holds {total} bytes"


def test_no_test_reads_the_workplace_shared_folder() -> None:
    """A clone has no ../shared: a test that reads it would skip or fail for every user."""
    pattern = re.compile(r'parent\s*/\s*"shared"|\.\./shared/(data|paper)/[\w./]+\.(json|yaml|jsonl)"')
    offenders = [p.name for p in (REPO / "tests").glob("*.py") if pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def _run_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_skip_fails_under_ci_unless_allow_listed(tmp_path: Path) -> None:
    """The hook on a tiny suite with this conftest: one plain skip, one skip in a fixture."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\n"
        "@pytest.fixture\ndef needs():\n    pytest.skip('fixture cannot run here')\n\n"
        "def test_plain():\n    pytest.skip('cannot run here')\n\n"
        "def test_in_fixture(needs):\n    pass\n\n"
        "def test_ok():\n    assert True\n"
    )
    local = _run_pytest(tmp_path, None)
    assert local.returncode == 0 and "1 passed, 2 skipped" in local.stdout, local.stdout[-2000:]
    ci = _run_pytest(tmp_path, "true")
    assert ci.returncode == 1, ci.stdout[-2000:]
    assert "1 failed, 1 passed, 1 error" in ci.stdout, ci.stdout[-2000:]
    assert ci.stdout.count("not on tests/conftest.py's CI_SKIP_ALLOWED") >= 2  # report + summary
    assert "cannot run here" in ci.stdout and "fixture cannot run here" in ci.stdout


def test_the_allow_list_is_short_and_names_existing_tests() -> None:
    assert len(CI_SKIP_ALLOWED) <= 5
    for nodeid, why in CI_SKIP_ALLOWED.items():
        path, _, name = nodeid.partition("::")
        assert why and f"def {name}(" in (REPO / path).read_text(encoding="utf-8"), nodeid
