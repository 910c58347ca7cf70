"""Atomic writers: a result file appears whole or not at all, and readable like any other file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cqabench.io import atomic_path, write_json


def test_atomic_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_json({"a": 1}, tmp_path / "x.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == 0o644


def test_a_failed_block_leaves_neither_the_file_nor_its_temporary(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "y.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
