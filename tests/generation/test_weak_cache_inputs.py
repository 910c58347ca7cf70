"""Issue 36 item 6, `cache import`: a row whose key is no cache key (a path such as
"../../evil") ended in a traceback after the rows before it were imported. Now every row is
checked first: one line naming the file, the row and the field, rc 1, nothing imported (the
cache folder is not even created)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from cqabench.cli import main
from cqabench.generation.llm.base import Completion


def _old_cache(path: Path, keys: list[str]) -> Path:
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE items (key TEXT PRIMARY KEY, completion TEXT NOT NULL, created REAL NOT NULL,"
        " label TEXT NOT NULL DEFAULT '')"
    )
    comp = json.dumps(Completion("Final Answer: 4", 3, 2, 0.1).to_dict())
    db.executemany("INSERT INTO items VALUES (?, ?, 0, 'cell q')", [(k, comp) for k in keys])
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize("bad", ["../../evil", "a/b", "", "k" * 129])
def test_a_key_that_is_no_cache_key_imports_nothing(bad: str, tmp_path: Path, capsys) -> None:
    old = _old_cache(tmp_path / "old.sqlite", ["k1", "k2", bad, "k4"])
    cache = tmp_path / "cache"
    assert main(["cache", "import", "--from", str(old), "--cache", str(cache)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"cqabench cache: error: {old}: row 3, field 'key': {bad!r} is not an item cache key "
        "([A-Za-z0-9_-], 1 to 128 characters); nothing was imported"
    )
    assert not cache.exists() and not (tmp_path / "evil").exists()


def test_good_keys_still_import(tmp_path: Path, capsys) -> None:
    old = _old_cache(tmp_path / "old.sqlite", ["k1", "k_2-x"])
    assert main(["cache", "import", "--from", str(old), "--cache", str(tmp_path / "cache")]) == 0
    assert "imported 2 item(s)" in capsys.readouterr().out
