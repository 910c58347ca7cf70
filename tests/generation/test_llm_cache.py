"""The item cache: keys that change exactly when the answer may change, durability, sharing between
processes (claims, stale claims of killed jobs), refusal of empty answers, and recovery from bad files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.generation.llm.base import Completion, Sampling
from cqabench.generation.llm.cache import CacheError, ItemCache, completion_problem, item_key

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}

MODEL = {"source": "gguf-package:x/y.gguf", "gguf_sha256": "ab" * 32}
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Question: 2+2?"}]


def _key(**change) -> str:
    args = {"model": MODEL, "backend": "hf", "dtype": "float32", "sampling": Sampling(), "chat": CHAT, **change}
    return item_key(args["model"], args["backend"], args["dtype"], args["sampling"], args["chat"])


def test_key_is_stable_and_changes_with_every_input_that_changes_the_answer() -> None:
    base = _key()
    assert base == _key(model=dict(reversed(list(MODEL.items()))))  # dict order is irrelevant
    assert len(base) == 64
    variants = [
        _key(model={**MODEL, "gguf_sha256": "cd" * 32}),
        _key(backend="vllm"),
        _key(dtype="bfloat16"),
        _key(sampling=Sampling(temperature=0.3)),
        _key(sampling=Sampling(max_new_tokens=129)),
        _key(sampling=Sampling(stop=("\nQuestion:",))),
        _key(sampling=Sampling(frequency_penalty=0.8)),
        _key(chat=[CHAT[0], {"role": "user", "content": "Question: 2+3?"}]),
        _key(chat=CHAT[1:]),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_sampling_from_config_validates_and_serializes_canonically() -> None:
    s = Sampling.from_config({"temperature": 0.3, "max_new_tokens": 512, "stop": ["\nQ:"]})
    assert s.stop == ("\nQ:",) and not s.greedy
    assert json.loads(s.to_json()) == {
        "temperature": 0.3,
        "top_p": 1.0,
        "max_new_tokens": 512,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "seed": 0,
        "stop": ["\nQ:"],
    }
    for bad, msg in [
        ({"temp": 1}, "unknown parameter"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"stop": "x"}, "stop"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            Sampling.from_config(bad)


def test_put_get_round_trip_and_first_answer_wins(tmp_path: Path) -> None:
    a = Completion("Final Answer: 4", prompt_tokens=12, output_tokens=5, latency_s=0.25, finish_reason="stop")
    b = Completion("Final Answer: 5", prompt_tokens=12, output_tokens=5, latency_s=0.3)
    with ItemCache(tmp_path / "c") as cache:
        assert cache.get_many(["k1"]) == {}
        assert cache.put_many([("k1", a, "cell q1")]) == {"k1": a}
        # k1 keeps its first completion, and put_many says so: the caller uses the stored one
        assert cache.put_many([("k1", b, "cell q1"), ("k2", b, "cell q2")]) == {"k1": a, "k2": b}
        assert len(cache) == 2
    with ItemCache(tmp_path / "c") as cache:  # reopened: persisted
        got = cache.get_many(["k1", "k2", "k3", "k1"])
    assert got == {"k1": a, "k2": b}
    stored = json.loads((tmp_path / "c" / "items" / "k1" / "k1.json").read_text())
    assert stored["key"] == "k1" and stored["label"] == "cell q1" and stored["completion"]["text"] == "Final Answer: 4"
    assert not list((tmp_path / "c").rglob("*.tmp"))  # nothing half-written is left behind


def test_empty_failed_and_oversized_completions_are_never_stored(tmp_path: Path) -> None:
    assert completion_problem(Completion("", 3, 0, 0.1)) == "empty completion"
    assert completion_problem(Completion(" \n", 3, 1, 0.1)) == "empty completion"
    assert (
        completion_problem(Completion("x", 3, 1, 0.1, error="empty reply (no choices) after 7 attempt(s)"))
        == "empty reply (no choices) after 7 attempt(s)"
    )
    assert (
        completion_problem(Completion("abcdef", 3, 1, 0.1), max_chars=5)
        == "completion of 6 characters exceeds max_completion_chars=5"
    )
    assert completion_problem(Completion("abcde", 3, 1, 0.1), max_chars=5) == ""
    with ItemCache(tmp_path / "c", max_chars=5) as cache:
        for bad in (Completion("", 1, 0, 0.0), Completion("abcdef", 1, 1, 0.0), Completion("ok", 1, 1, 0.0, error="x")):
            with pytest.raises(ValueError, match="refusing to cache item k1"):
                cache.put_many([("k1", bad, "")])
        assert len(cache) == 0 and cache.get_many(["k1"]) == {}


def test_claims_are_exclusive_released_on_publication_and_on_close(tmp_path: Path) -> None:
    a, b = ItemCache(tmp_path / "c"), ItemCache(tmp_path / "c")
    try:
        keys = [f"k{i}" for i in range(10)]
        assert a.claim_many(keys, 4) == ["k0", "k1", "k2", "k3"]  # bulk, in order, up to the limit
        assert b.claim_many(keys, 100) == keys[4:]  # a's claims are live: b skips them
        assert a.claim_many(keys, 100) == ["k0", "k1", "k2", "k3"]
        a.put_many([("k0", Completion("zero", 1, 1, 0.0), "")])
        assert not (tmp_path / "c" / "claims" / "k0" / "k0").exists()
        a.close()  # k1..k3 are released: the next job may claim them
        assert b.claim_many(["k1", "k2", "k3"], 100) == ["k1", "k2", "k3"]
        assert b.claim_holders(["k1"]) == [b.job]
    finally:
        b.close()
    assert not list((tmp_path / "c" / "claims").glob("*/*")) and not list((tmp_path / "c" / "jobs").iterdir())


_CLAIMER = textwrap.dedent(
    """
    import sys, time
    from cqabench.generation.llm.cache import ItemCache
    cache = ItemCache(sys.argv[1])
    print(",".join(cache.claim_many(sys.argv[2].split(","), 100)), flush=True)
    time.sleep(120)
    """
)


def test_the_claims_of_a_killed_job_are_taken_over_and_a_live_jobs_are_not(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLAIMER, str(tmp_path / "c"), "k1,k2"], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert proc.stdout.readline().strip() == "k1,k2"
        with ItemCache(tmp_path / "c") as cache:
            assert cache.claim_many(["k1", "k2", "k3"], 10) == ["k3"]  # the other job is alive
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert cache.claim_many(["k1", "k2", "k3"], 10) == ["k1", "k2", "k3"]  # dead pid on this host: stale
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_claim_from_another_host_is_stale_only_after_its_lease(tmp_path: Path) -> None:
    """Other hosts' pids cannot be checked: their heartbeat (the job file's mtime) decides."""
    other = ItemCache(tmp_path / "c", lease_s=600)
    try:
        other._stop.set()  # its heartbeat stops, as on a node that died
        other.claim_many(["k1"], 1)
        job_file = tmp_path / "c" / "jobs" / f"{other.job}.json"
        info = json.loads(job_file.read_text())
        with open(job_file, "r+") as fh:  # rewritten in place: every claim is a hard link to this inode
            fh.write(json.dumps({**info, "host": "node-elsewhere"}).ljust(len(job_file.read_text())))
        with ItemCache(tmp_path / "c", lease_s=30) as cache:
            assert cache.claim_many(["k1"], 1) == []  # heartbeat fresh: live
            past = time.time() - 31
            os.utime(job_file, (past, past))
            assert cache.claim_many(["k1"], 1) == ["k1"]  # heartbeat older than the lease: taken over
    finally:
        other.close()


_WRITER = textwrap.dedent(
    """
    import sys, time
    from cqabench.generation.llm.base import Completion
    from cqabench.generation.llm.cache import ItemCache
    cache = ItemCache(sys.argv[1])
    tag, n = sys.argv[2], int(sys.argv[3])
    for i in range(0, n, 5):
        cache.put_many([(f"{tag}{j}", Completion(f"{tag}{j}", 1, 1, 0.0), "") for j in range(i, i + 5)])
    print("committed", flush=True)
    while True:  # keeps publishing until killed: the kill lands in the middle of a write
        i += 1
        cache.put_many([(f"{tag}x{i}", Completion("y" * 5000, 1, 1, 0.0), "")])
    """
)


def test_published_items_survive_sigkill_and_parallel_writers_share_the_folder(tmp_path: Path) -> None:
    """Two processes publish 50 items each and are SIGKILLed mid-write: all 100 are there, nothing is torn."""
    db = tmp_path / "c"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(db), tag, "50"], stdout=subprocess.PIPE, text=True, env=ENV
        )
        for tag in ("a", "b")
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "committed"
        time.sleep(0.3)
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    with ItemCache(db) as cache:
        got = cache.get_many([f"{t}{j}" for t in "ab" for j in range(50)])
        records = list(cache.iter_records())
    assert len(got) == 100 and got["b49"].text == "b49"
    assert records and all(not r.problem for r in records)  # every file is whole: published or absent


def test_a_corrupt_item_names_its_file_and_the_recovery_commands(tmp_path: Path, capsys) -> None:
    root = tmp_path / "c"
    with ItemCache(root) as cache:
        cache.put_many(
            [
                ("k1", Completion("one", 1, 1, 0.0), "musique/dev/pipe/none/m/few-shot/closed-k0 q1"),
                ("k2", Completion("two", 1, 1, 0.0), "musique/dev/pipe/none/m/few-shot/closed-k0 q2"),
            ]
        )
    bad = root / "items" / "k1" / "k1.json"
    bad.write_bytes(bad.read_bytes()[:20])  # truncated, as by a full disk or a bad copy
    with ItemCache(root) as cache, pytest.raises(CacheError) as err:
        cache.get_many(["k2", "k1"])
    assert str(bad) in str(err.value) and "not a valid item file" in str(err.value)
    assert f"cqabench cache verify --cache {root}" in str(err.value)
    assert f"cqabench cache drop --cache {root} --bad" in str(err.value)

    assert main(["cache", "verify", "--cache", str(root)]) == 1
    out = capsys.readouterr()
    assert f"bad item {bad}: not a valid item file" in out.out and "2 item(s), 1 bad" in out.out
    assert main(["cache", "drop", "--cache", str(root), "--bad"]) == 0
    assert f"dropped {bad}" in capsys.readouterr().out and not bad.exists()
    assert main(["cache", "verify", "--cache", str(root)]) == 0
    with ItemCache(root) as cache:
        assert set(cache.get_many(["k1", "k2"])) == {"k2"}  # k1 is missing again: the next run regenerates it


def test_drop_selects_items_by_key_and_label_and_sweeps_leftovers_of_dead_jobs(tmp_path: Path, capsys) -> None:
    root = tmp_path / "c"
    with ItemCache(root) as cache:
        cache.put_many(
            [(f"k{i}", Completion(f"a{i}" * (i + 1), 1, 1, 0.0), f"musique/dev/cell{i % 2} q{i}") for i in range(6)]
        )
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLAIMER, str(root), "k9"], stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert proc.stdout.readline().strip() == "k9"
    finally:  # the claimer sleeps 120 s: never left behind, pass or fail
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (
        main(["cache", "drop", "--cache", str(root), "--label", "musique/dev/cell1 *", "--key", "k0", "--dry-run"]) == 0
    )
    assert "would drop 4 file(s)" in capsys.readouterr().out  # k0 and cell1's k1, k3, k5
    assert (
        main(["cache", "drop", "--cache", str(root), "--label", "musique/dev/cell1 *", "--key", "k0", "--stale"]) == 0
    )
    out = capsys.readouterr().out
    assert "dropped 6 file(s)" in out  # the same four, and the killed job's claim on k9 and its job file
    with ItemCache(root) as cache:
        assert sorted(cache.get_many([f"k{i}" for i in range(6)])) == ["k2", "k4"]
        assert not list((root / "claims").glob("*/*")) and [p.name for p in (root / "jobs").iterdir()] == [
            f"{cache.job}.json"
        ]
    # --max-chars flags long completions as bad: k4 is "a4" * 5 = 10 characters
    assert main(["cache", "verify", "--cache", str(root), "--max-chars", "8"]) == 1
    assert "exceeds max_completion_chars=8" in capsys.readouterr().out
    with (
        ItemCache(root, max_chars=8) as cache,
        pytest.raises(CacheError, match=r"drop --cache .* --bad --max-chars 8`"),
    ):
        cache.get_many(["k4"])  # a job with a lower cap than the stored item says how to drop it
    assert main(["cache", "drop", "--cache", str(root)]) == 1
    assert "say what to drop" in capsys.readouterr().err


def test_an_old_sqlite_cache_is_refused_with_a_hint_and_can_be_imported(tmp_path: Path, capsys) -> None:
    import sqlite3

    old = tmp_path / "m.sqlite"
    db = sqlite3.connect(old)
    db.execute(
        "CREATE TABLE items (key TEXT PRIMARY KEY, completion TEXT NOT NULL, created REAL NOT NULL,"
        " label TEXT NOT NULL DEFAULT '')"
    )
    rows = [("k1", Completion("Final Answer: 4", 3, 2, 0.1)), ("k2", Completion("", 3, 0, 0.1))]  # k2: cause 4
    db.executemany("INSERT INTO items VALUES (?, ?, 0, 'cell q')", [(k, json.dumps(c.to_dict())) for k, c in rows])
    db.commit()
    db.close()
    with pytest.raises(CacheError, match=r"is a file, not an item cache folder .*cqabench cache import --from"):
        ItemCache(old)
    assert main(["cache", "import", "--from", str(old), "--cache", str(tmp_path / "m")]) == 0
    assert "imported 1 item(s)" in (out := capsys.readouterr().out) and "skipped 1 empty or unreadable" in out
    with ItemCache(tmp_path / "m") as cache:
        assert cache.get_many(["k1", "k2"]) == {"k1": rows[0][1]}  # the empty answer is asked again
    (tmp_path / "junk.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 30)  # truncated database
    assert main(["cache", "import", "--from", str(tmp_path / "junk.sqlite"), "--cache", str(tmp_path / "m")]) == 1
    assert "junk.sqlite: not a readable SQLite item cache" in capsys.readouterr().err


class ScriptedBackend:
    """TEST DOUBLE at the backend boundary: answers per prompt text from a list of successive replies."""

    retries = 0

    def __init__(self, replies: dict[str, list[str]]) -> None:
        self.replies = replies
        self.calls: list[str] = []

    def generate(self, chats, sampling, labels=None):
        for i, chat in enumerate(chats):
            text = chat[-1]["content"]
            self.calls.append(text)
            queue = self.replies[text]
            yield [(i, Completion(queue.pop(0) if len(queue) > 1 else queue[0], 5, 2, 0.01, "stop"))]

    def close(self) -> None:
        pass


def test_an_empty_or_oversized_completion_is_asked_again_then_recorded_as_failed_not_cached(tmp_path: Path) -> None:
    from cqabench.generation.completions import generate_missing
    from cqabench.generation.items import Item

    replies = {"p-ok": ["Final Answer: a"], "p-once": ["", "Final Answer: b"], "p-empty": [""], "p-long": ["x" * 50]}
    items = [Item(f"q-{p}", [{"role": "user", "content": p}], f"key-{p[2:]}", []) for p in replies]
    backend = ScriptedBackend(replies)
    with ItemCache(tmp_path / "c", max_chars=40) as cache:
        cached, generated, _ = generate_missing(lambda: backend, [(Sampling(), items)], cache, "cell")
        assert cached == {}
        assert generated["key-ok"].text == "Final Answer: a" and generated["key-once"].text == "Final Answer: b"
        assert generated["key-empty"].error == "empty completion" and generated["key-empty"].finish_reason == "failed"
        assert generated["key-long"].error == "completion of 50 characters exceeds max_completion_chars=40"
        assert generated["key-long"].text == ""
        assert sorted(backend.calls) == sorted(["p-ok", "p-once", "p-empty", "p-long", "p-once", "p-empty", "p-long"])
        assert set(cache.get_many([it.key for it in items])) == {"key-ok", "key-once"}  # failures are not stored
        assert not list((tmp_path / "c" / "claims").glob("*/*"))  # ... and not left claimed


def test_an_api_that_answers_nothing_gives_a_failed_row_and_a_rerun_asks_again(
    tmp_path: Path, monkeypatch, request
) -> None:
    """Issue 11, cause 4: an empty `choices` or `content: null` was stored as an empty answer for good."""
    import pyarrow.parquet as pq

    from cqabench.common.io import write_parquet
    from cqabench.data.schema import CanonicalData, Query
    from test_openai_backend import ENV, KEY, OpenAITestDouble, api_llm_config

    monkeypatch.setenv(ENV, KEY)
    queries = tmp_path / "queries.parquet"
    write_parquet(
        CanonicalData(
            queries=[
                Query("q1", "Which city hosts alpha?"),
                Query("q2", "Which city hosts bravo?"),
                Query("q3", "Which city hosts charlie?"),
            ]
        ).tables()["queries"],
        queries,
    )

    def generate(base_url: str, status: int = 0) -> dict[str, dict]:
        """Run the cell; `status` 3: items failed, outputs written, the job fails (issue 21)."""
        settings = {"llm": api_llm_config(base_url, max_retries=2), "sampling": {"max_new_tokens": 16}}
        out = tmp_path / "p.parquet"
        assert (
            main(
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
                    str(REPO / "resources/prompts/few-shot/multihop.txt"),
                    "--settings",
                    json.dumps(settings),
                    "--cache",
                    str(tmp_path / "cache"),
                    "--out",
                    str(out),
                    "--summary",
                    str(tmp_path / "s.json"),
                ]
            )
            == status
        )
        return {r["qid"]: r for r in pq.read_table(out).to_pylist()}

    # one server throughout: an API model's items are keyed by its endpoint (its port included)
    api = OpenAITestDouble({"alpha?": ["null"] * 3, "bravo?": ["nochoices"] * 3}).__enter__()
    request.addfinalizer(lambda: api.__exit__(None, None, None))
    rows = generate(api.base_url, status=3)
    for qid, what in (("q1", "message content is null"), ("q2", "no choices")):
        assert (rows[qid]["raw_output"], rows[qid]["prediction"], rows[qid]["parse_ok"]) == ("", "", False)
        assert rows[qid]["parse_reason"] == f"generation failed: empty reply ({what}) after 3 attempt(s)"
        assert rows[qid]["finish_reason"] == "failed" and not rows[qid]["cached"]
    assert rows["q3"]["raw_output"] == "Final Answer: charlie" and rows["q3"]["parse_ok"]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert (summary["n_generated"], summary["n_failed"], summary["n_cached"]) == (1, 2, 0)
    before = sum(api.attempts.values())
    rows = generate(api.base_url)  # its script is spent, the API answers now: only the two failed items are asked again
    assert sum(api.attempts.values()) - before == 2
    assert rows["q1"]["raw_output"] == "Final Answer: alpha" and rows["q2"]["raw_output"] == "Final Answer: bravo"
    assert rows["q3"]["cached"] and not rows["q1"]["cached"]


def test_a_reply_that_stays_malformed_fails_the_job_keeping_what_was_answered(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A 200 HTML page (a proxy) was a traceback with no retry; now: retried, then exit 1 naming it, no output."""
    from cqabench.common.io import write_parquet
    from cqabench.data.schema import CanonicalData, Query
    from test_openai_backend import ENV, KEY, OpenAITestDouble, api_llm_config

    monkeypatch.setenv(ENV, KEY)
    queries = tmp_path / "queries.parquet"
    write_parquet(
        CanonicalData(
            queries=[Query("q1", "Which city hosts alpha?"), Query("q2", "Which city hosts bravo?")]
        ).tables()["queries"],
        queries,
    )
    with OpenAITestDouble({"bravo?": ["html"] * 10}) as api:
        settings = {"llm": api_llm_config(api.base_url, max_retries=1, max_concurrency=1)}
        rc = main(
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
                str(REPO / "resources/prompts/few-shot/multihop.txt"),
                "--settings",
                json.dumps(settings),
                "--cache",
                str(tmp_path / "cache"),
                "--out",
                str(tmp_path / "p.parquet"),
            ]
        )
    err = capsys.readouterr().err
    assert rc == 1 and "failed (malformed reply (an HTML page, not a chat completion: '<html><head><title>502" in err
    assert "after 2 attempt(s)" in err and "Traceback" not in err
    assert not (tmp_path / "p.parquet").exists()
    with ItemCache(tmp_path / "cache") as cache:
        assert len(cache) == 1 and not list((tmp_path / "cache" / "claims").glob("*/*"))  # q1 kept, q2 released


def test_an_api_model_on_another_endpoint_is_another_model(monkeypatch, tmp_path: Path) -> None:
    """The item cache is shared by every config (cache/llm): one model name served by two
    endpoints must not share items, and OpenAI's own endpoint keeps the keys of before."""
    from cqabench.generation.llm import llm_spec, model_identity

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    def identity(**cfg):
        return model_identity(llm_spec("api", {"backend": "openai", "source": "gpt-4", **cfg}))

    default = identity()
    assert default == {"source": "gpt-4", "revision": "unpinned"}
    assert identity(base_url="https://api.openai.com/v1/") == default
    local = identity(base_url="http://user:pw@127.0.0.1:8000/v1/?token=x")
    assert local == {"source": "gpt-4", "revision": "unpinned", "base_url": "http://127.0.0.1:8000/v1"}
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")  # what the client reads when unset
    assert identity() == local
    assert identity(base_url="https://example.org/v1")["base_url"] == "https://example.org/v1"  # config first
    assert _key(model=default) != _key(model=local)
    hf = model_identity(llm_spec("m", {"backend": "hf", "source": str(tmp_path), "base_url": "x"}))
    assert "base_url" not in hf  # a local engine has no endpoint
