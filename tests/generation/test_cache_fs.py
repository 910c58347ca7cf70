"""The item cache on a hostile filesystem and under hostile jobs (issue 21, the cache's WEAK cases).

* read-only / full cache: one line naming the path and the fix, exit 1; a fully cached cell runs
  from a read-only (and from a full) cache. Checked twice: on a REAL tmpfs (64 KiB, filled for
  ENOSPC, remounted read-only for EROFS; skipped only where `mount` is not permitted, with the
  reason), and by a SIMULATION that patches `os.open` / `os.write` inside cqabench.generation.llm.cache to
  raise OSError(EROFS | ENOSPC) at the write points, which runs everywhere.
* an edited item that is still valid JSON fails its sha256: `cache verify` names file and key,
  a job sets it aside and asks again; an old item without a checksum is "unverifiable".
* a SIGSTOPped job's claim expires by its lease on the same host; the resumed job does not
  overwrite the newer answer.
* `generation.cache_dir` inside a folder a rule outputs whole is refused at planning.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import cqabench.generation.llm.cache as cache_mod
from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.common.io import write_parquet
from cqabench.data.schema import CanonicalData, Query
from cqabench.generation.llm.base import Completion
from cqabench.generation.llm.cache import EDITED, UNVERIFIABLE, CacheError, ItemCache
from cqabench.planner import Environment, Plan

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
TEMPLATE = REPO / "resources/prompts/few-shot/multihop.txt"


def _queries(path: Path, words: list[str]) -> Path:
    data = CanonicalData(queries=[Query(f"q{i}", f"Which city hosts {w}?") for i, w in enumerate(words)])
    write_parquet(data.tables()["queries"], path)
    return path


def _generate(tmp_path: Path, queries: Path, cache: Path, base_url: str) -> int:
    """One closed-book cell through the real CLI against the loopback API double."""
    from test_openai_backend import api_llm_config

    settings = {"llm": api_llm_config(base_url, max_retries=1), "sampling": {"max_new_tokens": 16}}
    return main(
        [
            "generate",
            "--dataset",
            "musique",
            "--split",
            "dev",
            "--serialization",
            "pipe",
            "--llm",
            "api",
            "--prompt",
            "few-shot",
            "--setting",
            "closed",
            "--queries",
            str(queries),
            "--template",
            str(TEMPLATE),
            "--settings",
            json.dumps(settings),
            "--cache",
            str(cache),
            "--out",
            str(tmp_path / "p.parquet"),
            "--summary",
            str(tmp_path / "s.json"),
        ]
    )


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---- a real tmpfs ----


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted for the test and always unmounted; skipped only if mounting is refused."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here ({done.stderr.strip()}); the simulated tests below cover it")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path: Path) -> None:
    """Write to `path` until the filesystem is full."""
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"f" * 1024)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _remount(mnt: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], check=True)


def test_a_fully_cached_cell_runs_from_a_read_only_mount_and_a_missing_item_names_the_path(
    tmp_path: Path, tmpfs: Path, monkeypatch, capsys
) -> None:
    from test_openai_backend import ENV as KEY_ENV
    from test_openai_backend import KEY, OpenAITestDouble

    monkeypatch.setenv(KEY_ENV, KEY)
    cache = tmpfs / "llm"
    three = _queries(tmp_path / "q3.parquet", ["alpha", "bravo", "charlie"])
    # one server throughout: an API model's items are keyed by its endpoint (its port included)
    with OpenAITestDouble() as api:
        assert _generate(tmp_path, three, cache, api.base_url) == 0
        asked = sum(api.attempts.values())
        _remount(tmpfs, "ro")
        assert _generate(tmp_path, three, cache, api.base_url) == 0  # every item cached: no write needed
        assert sum(api.attempts.values()) == asked
        rows = pq.read_table(tmp_path / "p.parquet").to_pylist()
        assert [r["cached"] for r in rows] == [True] * 3 and rows[0]["raw_output"] == "Final Answer: alpha"
        assert main(["cache", "verify", "--cache", str(cache)]) == 0  # verify reads only
        capsys.readouterr()

        four = _queries(tmp_path / "q4.parquet", ["alpha", "bravo", "charlie", "delta"])
        assert _generate(tmp_path, four, cache, api.base_url) == 1
        assert sum(api.attempts.values()) == asked  # refused before any request: no answer is thrown away
    line = _one_error_line(capsys.readouterr().err)
    assert f"cannot write to the item cache {cache} (Read-only file system)" in line
    assert "generation.cache_dir" in line and "1 item(s) are not cached" in line


def test_a_full_cache_filesystem_names_the_path_keeps_what_was_published_and_still_serves_it(
    tmp_path: Path, tmpfs: Path
) -> None:
    root = tmpfs / "llm"
    published: list[str] = []
    with ItemCache(root) as cache, pytest.raises(CacheError) as err:
        for i in range(100):  # 64 KiB hold at most 16 pages: one 4 KiB page per item file
            cache.put_many([(f"k{i:02d}", Completion("x" * 3000, 1, 1, 0.0), f"cell q{i}")])
            published.append(f"k{i:02d}")
    assert "no space left for the item cache" in str(err.value) and str(root) in str(err.value)
    assert "(No space left on device)" in str(err.value) and "generation.cache_dir" in str(err.value)
    assert 3 <= len(published) < 16
    assert not list(root.glob("items/*/.*.tmp"))  # the torn temporary file is removed, nothing is half-published
    _fill(tmpfs / "filler")  # the closed job's file freed a page: take it (and anything left) again
    with ItemCache(root) as again:  # no room even for a job file: opens read-only and serves every item
        assert not again.writable
        got = again.get_many(published)
        assert sorted(got) == published and got[published[-1]].text == "x" * 3000
        assert all(not r.problem for r in again.iter_records())
        with pytest.raises(CacheError, match="no space left"):
            again.claim_many(["new"], 1)


# ---- the same cases simulated (runs where mounting is not permitted) ----


def _refuse(monkeypatch, root: Path, code: int, after: int = 0) -> None:
    """SIMULATION: os.open under `root` (as cqabench.generation.llm.cache calls it) raises OSError(code) after `after` opens."""
    real = os.open
    seen = {"n": 0}

    def fake_open(path, flags, mode=0o777, **kw):
        if str(path).startswith(str(root)) and flags & os.O_CREAT:
            seen["n"] += 1
            if seen["n"] > after:
                raise OSError(code, os.strerror(code), str(path))
        return real(path, flags, mode, **kw)

    monkeypatch.setattr(cache_mod.os, "open", fake_open)


def test_simulated_read_only_cache_serves_cached_items_and_names_the_path_on_the_first_write(
    tmp_path: Path, monkeypatch
) -> None:
    root = tmp_path / "c"
    with ItemCache(root) as cache:
        cache.put_many([("k1", Completion("one", 1, 1, 0.0), "cell q1")])
    _refuse(monkeypatch, root, errno.EROFS)
    with ItemCache(root) as cache:
        assert not cache.writable and cache.get_many(["k1", "k2"])["k1"].text == "one"
        assert cache.claim_many([], 5) == []  # nothing missing: nothing to write, no error
        with pytest.raises(CacheError) as err:
            cache.claim_many(["k2"], 5)
        assert str(err.value).startswith(f"{root / 'jobs'}/")  # the write that failed: this job's file
        assert f"cannot write to the item cache {root} (Read-only file system)" in str(err.value)
        with pytest.raises(CacheError, match="1 new item"):
            cache.put_many([("k2", Completion("two", 1, 1, 0.0), "cell q2")])
    assert sorted(p.name for p in (root / "jobs").iterdir()) == []  # close() wrote nothing


def test_simulated_full_disk_mid_run_is_one_error_and_a_short_write_is_completed(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "c"
    cache = ItemCache(root)
    try:
        cache.claim_many(["k1", "k2"], 5)
        _refuse(monkeypatch, root, errno.ENOSPC, after=1)  # k1's temporary file opens, k2's does not
        stored = cache.put_many([("k1", Completion("one", 1, 1, 0.0), "cell q1")])
        with pytest.raises(CacheError) as err:
            cache.put_many([("k2", Completion("two", 1, 1, 0.0), "cell q2")])
        assert "no space left for the item cache" in str(err.value) and "the items published so far are kept" in str(
            err.value
        )
        assert stored["k1"].text == "one" and cache.get_many(["k1", "k2"]).keys() == {"k1"}
    finally:
        cache.close()
    monkeypatch.undo()
    # SIMULATION of a short write (a nearly full disk): os.write takes 7 bytes a call; the item is still whole
    real_write = os.write
    monkeypatch.setattr(cache_mod.os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    with ItemCache(root) as cache:
        cache.put_many([("k3", Completion("three" * 20, 1, 1, 0.0), "cell q3")])
        assert cache.get_many(["k3"])["k3"].text == "three" * 20


# ---- checksums ----


def _item(root: Path, key: str) -> Path:
    return root / "items" / key[:2] / f"{key}.json"


def test_each_item_stores_the_sha256_of_its_canonical_json(tmp_path: Path) -> None:
    root = tmp_path / "c"
    with ItemCache(root) as cache:
        cache.put_many([("k1", Completion("Final Answer: Paris", 3, 4, 0.5, "stop"), "cell q1")])
    body = json.loads(_item(root, "k1").read_text())
    rest = {k: v for k, v in body.items() if k != "sha256"}
    # hand check: sha256 over json.dumps(sort_keys, compact separators) of every other field
    want = hashlib.sha256(
        json.dumps(rest, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    ).hexdigest()
    assert body["sha256"] == want and len(want) == 64


def test_an_edited_item_fails_verify_by_file_and_key_and_a_job_asks_again(tmp_path: Path, capsys, caplog) -> None:
    from cqabench.generation.completions import generate_missing
    from cqabench.generation.items import Item
    from cqabench.generation.llm.base import Sampling
    from test_llm_cache import ScriptedBackend

    root = tmp_path / "c"
    with ItemCache(root) as cache:
        cache.put_many(
            [
                ("k1", Completion("Final Answer: Paris", 1, 1, 0.0), "cell q1"),
                ("k2", Completion("Final Answer: Rome", 1, 1, 0.0), "cell q2"),
            ]
        )
    path = _item(root, "k1")
    body = json.loads(path.read_text())
    body["completion"]["text"] = "Final Answer: Lyon"  # still valid JSON, still a plausible answer
    path.write_text(json.dumps(body))

    assert main(["cache", "verify", "--cache", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"bad item {path}: {EDITED} (key k1)" in out and "2 item(s), 1 bad" in out

    backend = ScriptedBackend({"p1": ["Final Answer: Paris"], "p2": ["Final Answer: Rome"]})
    items = [
        Item("q1", [{"role": "user", "content": "p1"}], "k1", []),
        Item("q2", [{"role": "user", "content": "p2"}], "k2", []),
    ]
    with ItemCache(root) as cache:
        cached, generated, _ = generate_missing(lambda: backend, [(Sampling(), items)], cache, "cell")
    assert (
        backend.calls == ["p1"]
        and generated["k1"].text == "Final Answer: Paris"
        and cached["k2"].text == "Final Answer: Rome"
    )
    assert f"{path} {EDITED}; not used, asked again" in caplog.text
    assert json.loads(path.read_text())["completion"]["text"] == "Final Answer: Paris"  # republished, checksummed
    aside = list(path.parent.glob(".k1.json.*.edited"))
    assert len(aside) == 1 and json.loads(aside[0].read_text())["completion"]["text"] == "Final Answer: Lyon"
    assert main(["cache", "verify", "--cache", str(root)]) == 0
    assert main(["cache", "drop", "--cache", str(root), "--stale"]) == 0  # the set-aside copy is housekeeping
    assert not aside[0].exists()


def test_an_item_written_before_checksums_is_reported_unverifiable_not_ok(tmp_path: Path, capsys) -> None:
    root = tmp_path / "c"
    with ItemCache(root) as cache:
        cache.put_many(
            [("k1", Completion("one", 1, 1, 0.0), "cell q1"), ("k2", Completion("two", 1, 1, 0.0), "cell q2")]
        )
    old = _item(root, "k2")
    body = json.loads(old.read_text())
    del body["sha256"]  # as the previous version wrote it
    old.write_text(json.dumps(body))
    with ItemCache(root) as cache:
        assert cache.get_many(["k2"])["k2"].text == "two"  # still served: it was valid when written
    assert main(["cache", "verify", "--cache", str(root)]) == 0
    cap = capsys.readouterr()
    assert f"item {old}: {UNVERIFIABLE} (key k2)" in cap.out and "0 bad, 1 unverifiable" in cap.out
    assert "--unverifiable" in cap.err
    assert main(["cache", "drop", "--cache", str(root), "--unverifiable"]) == 0
    assert not old.exists() and _item(root, "k1").exists()


# ---- a stopped job's claims ----

_HOLDER = textwrap.dedent(
    """
    import sys
    from cqabench.generation.llm.base import Completion
    from cqabench.generation.llm.cache import ItemCache
    cache = ItemCache(sys.argv[1], lease_s=float(sys.argv[2]))
    print(",".join(cache.claim_many(["k1"], 1)), flush=True)
    sys.stdin.readline()  # stopped here; resumed, it publishes its own answer
    stored = cache.put_many([("k1", Completion("answer of the stopped job", 1, 1, 0.0), "cell q1")])
    print(stored["k1"].text, flush=True)
    cache.close()
    """
)


def test_a_stopped_jobs_claim_expires_by_its_lease_and_its_late_answer_does_not_win(tmp_path: Path) -> None:
    lease = 2.0
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(tmp_path / "c"), str(lease)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert proc.stdout.readline().strip() == "k1"
        os.kill(proc.pid, signal.SIGSTOP)  # alive (same host, pid checks out), but its heartbeat stops
        stopped = time.monotonic()
        with ItemCache(tmp_path / "c", lease_s=lease) as cache:
            assert cache.claim_many(["k1"], 1) == []  # heartbeat fresh: the holder is live
            while not cache.claim_many(["k1"], 1):
                assert time.monotonic() - stopped < 30, "the stopped job's claim never expired"
                time.sleep(0.1)
            waited = time.monotonic() - stopped
            # its last beat was at most lease/10 = 0.5 s (the minimum period) before the stop
            assert lease - 0.6 <= waited < lease + 10
            cache.put_many([("k1", Completion("answer of the waiting job", 1, 1, 0.0), "cell q1")])
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate("go\n", timeout=30)
        assert proc.returncode == 0
        assert out.strip() == "answer of the waiting job"  # the resumed job uses the stored answer: no disagreement
        with ItemCache(tmp_path / "c") as cache:
            assert cache.get_many(["k1"])["k1"].text == "answer of the waiting job"
        assert not list((tmp_path / "c" / "claims").glob("*/*"))
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# ---- planning ----


@pytest.mark.parametrize(
    ("cache_dir", "folder"),
    [
        ("results/sample/index/musique/pipe/bm25/llm", "results/sample/index"),
        ("results/sample/cache/../index_parts/x", "results/sample/index_parts"),  # normalised before the check
        ("{root}/results/sample/models/llm-cache", "results/sample/models"),  # absolute
    ],
)
def test_a_cache_dir_inside_a_rebuilt_output_folder_is_refused_naming_the_key_and_both_paths(
    cache_dir: str, folder: str
) -> None:
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["generation"]["cache_dir"] = cache_dir.format(root=REPO)
    env = Environment(root=REPO, python="python", vllm_python=sys.executable)
    with pytest.raises(ConfigError) as err:
        Plan(config, env)
    assert f"generation.cache_dir: {cache_dir.format(root=REPO)!r} lies inside {folder!r}" in str(err.value)
    config["generation"]["cache_dir"] = "cache/llm-elsewhere"  # outside every results tree: fine
    assert Plan(config, env).llm_cache_dir == "cache/llm-elsewhere"
