"""Atomic writers: a result file appears whole or not at all, readable like any other file, and a
killed writer's temporary is swept by the next write of that output."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cqabench.common.io import (
    STALE_AFTER_S,
    atomic_dir,
    atomic_files,
    atomic_path,
    sweep_stale_siblings,
    write_json,
    write_text,
)


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


# --- temporaries of killed jobs, several outputs as one ----------------------------------------

_KILLED_WRITER = """
import os, signal, sys
from cqabench.common.io import atomic_path, atomic_dir
target = sys.argv[1]
ctx = atomic_dir(target) if sys.argv[2] == "dir" else atomic_path(target)
with ctx as tmp:
    if sys.argv[2] == "dir":
        (tmp / "part").write_text("half")
    else:
        tmp.write_text("half")
    print(tmp, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_writer(target: Path, kind: str) -> Path:
    """Run a real writer in a child process and SIGKILL it mid-write; return its temporary."""
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(target), kind],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL
    return Path(proc.stdout.strip())


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_killed_writers_temporary_is_swept_by_the_next_write(tmp_path: Path, kind: str) -> None:
    target = tmp_path / ("out.txt" if kind == "file" else "index")
    left = _killed_writer(target, kind)
    assert left.exists() and left.parent == tmp_path and not target.exists()
    assert f".{os.getpid()}@" not in left.name and "@" in left.name  # the dead writer's pid@host is in the name
    if kind == "file":
        write_text("whole", target)
        assert target.read_text() == "whole"
    else:
        with atomic_dir(target) as tmp:
            (tmp / "part").write_text("whole")
        assert (target / "part").read_text() == "whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_a_live_writers_temporary_is_kept_and_only_this_outputs_are_looked_at(tmp_path: Path) -> None:
    target = tmp_path / "x"
    host = socket.gethostname()
    live = tmp_path / f".x.{os.getpid()}@{host}.abcd1234.tmp"  # this very process: alive
    other_output = tmp_path / ".x.y.999999@host.abcd1234.tmp"  # a temporary of output "x.y", not of "x"
    fresh_foreign = tmp_path / ".x.123@elsewhere.abcd1234.tmp"  # another node's, changed just now
    old_foreign = tmp_path / ".x.123@elsewhere.zzzz9999.tmp"  # another node's, untouched for longer than STALE_AFTER_S
    old_legacy = tmp_path / ".x.k2j4h5g6.tmp"  # mkstemp's name before pid@host, old
    for p in (live, other_output, fresh_foreign, old_foreign, old_legacy):
        p.write_text("t")
    past = time.time() - STALE_AFTER_S - 60
    for p in (old_foreign, old_legacy):
        os.utime(p, (past, past))
    removed = sweep_stale_siblings(target)
    assert sorted(p.name for p in removed) == sorted([old_foreign.name, old_legacy.name])
    assert live.exists() and other_output.exists() and fresh_foreign.exists()


def test_atomic_files_publishes_all_or_none_and_never_an_old_beside_a_new(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    with pytest.raises(RuntimeError), atomic_files({"a": a, "b": b}) as tmp:
        tmp["a"].write_text("new a")
        raise RuntimeError("died before b")
    # the old pair is gone (it would be inconsistent with half of a new one), nothing else is left
    assert list(tmp_path.iterdir()) == []
    with atomic_files({"a": a, "b": b}) as tmp:
        assert not a.exists() and not b.exists()  # nothing visible while the block runs
        tmp["a"].write_text("new a")
        tmp["b"].write_text("new b")
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_atomic_dir_gets_the_umask_mode_not_mkdtemps_0700(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "idx") as tmp:
            (tmp / "f").write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "idx").stat().st_mode) == 0o755


def test_atomic_dir_publishes_every_file_inside_with_the_umask_mode(tmp_path: Path) -> None:
    """Issue 21 (WEAK): safetensors writes model.safetensors 0600 inside the converter's atomic_dir
    (seen on a real conversion: -rw------- while config.json was -rw-r--r--). Under umask 022 every
    published file is 0644 (0666 & ~022), a folder or an executable 0755 (0777 & ~022)."""
    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "model") as tmp:
            weights = tmp / "model.safetensors"
            weights.write_bytes(b"w")
            os.chmod(weights, 0o600)  # what safetensors' save_file leaves
            (tmp / "sub").mkdir(mode=0o700)
            (tmp / "sub" / "part.bin").write_bytes(b"p")
            os.chmod(tmp / "sub" / "part.bin", 0o600)
            (tmp / "run.sh").write_text("#!/bin/sh\n")
            os.chmod(tmp / "run.sh", 0o700)
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in tmp_path.rglob("*")}
    assert modes == {
        "model": 0o755,
        "model/model.safetensors": 0o644,
        "model/sub": 0o755,
        "model/sub/part.bin": 0o644,
        "model/run.sh": 0o755,
    }
