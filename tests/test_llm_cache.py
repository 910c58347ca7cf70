"""The item cache: keys that change exactly when the answer may change, durability, sharing."""

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

from cqabench.errors import ConfigError
from cqabench.llm.base import Completion, Sampling
from cqabench.llm.cache import ItemCache, item_key

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
        "temperature": 0.3, "top_p": 1.0, "max_new_tokens": 512, "frequency_penalty": 0.0,
        "presence_penalty": 0.0, "seed": 0, "stop": ["\nQ:"],
    }
    for bad, msg in [({"temp": 1}, "unknown parameter"), ({"temperature": -1}, "temperature"),
                     ({"top_p": 0}, "top_p"), ({"max_new_tokens": 0}, "max_new_tokens"), ({"stop": "x"}, "stop")]:
        with pytest.raises(ConfigError, match=msg):
            Sampling.from_config(bad)


def test_put_get_round_trip_and_first_answer_wins(tmp_path: Path) -> None:
    a = Completion("Final Answer: 4", prompt_tokens=12, output_tokens=5, latency_s=0.25, finish_reason="stop")
    b = Completion("Final Answer: 5", prompt_tokens=12, output_tokens=5, latency_s=0.3)
    with ItemCache(tmp_path / "c.sqlite") as cache:
        assert cache.get_many(["k1"]) == {}
        assert cache.put_many([("k1", a, "cell q1")]) == 1
        assert cache.put_many([("k1", b, "cell q1"), ("k2", b, "cell q2")]) == 1  # k1 kept as it was
        assert len(cache) == 2
    with ItemCache(tmp_path / "c.sqlite") as cache:  # reopened: persisted
        got = cache.get_many(["k1", "k2", "k3", "k1"])
    assert got == {"k1": a, "k2": b}


def test_many_keys_are_looked_up_past_sqlite_parameter_limits(tmp_path: Path) -> None:
    comp = Completion("x", 1, 1, 0.0)
    with ItemCache(tmp_path / "c.sqlite") as cache:
        cache.put_many([(f"k{i}", comp, "") for i in range(1200)])
        assert len(cache.get_many([f"k{i}" for i in range(0, 1300)])) == 1200


_WRITER = textwrap.dedent(
    """
    import sys, time
    from cqabench.llm.base import Completion
    from cqabench.llm.cache import ItemCache
    cache = ItemCache(sys.argv[1])
    tag, n = sys.argv[2], int(sys.argv[3])
    for i in range(0, n, 5):
        cache.put_many([(f"{tag}{j}", Completion(f"{tag}{j}", 1, 1, 0.0), "") for j in range(i, i + 5)])
    print("committed", flush=True)
    time.sleep(60)
    """
)


def test_committed_batches_survive_sigkill_and_parallel_writers_share_the_file(tmp_path: Path) -> None:
    """Two processes write 50 items each; both are SIGKILLed after their last commit: all 100 are there."""
    db = tmp_path / "c.sqlite"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(db), tag, "50"], stdout=subprocess.PIPE, text=True)
        for tag in ("a", "b")
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "committed"
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    with ItemCache(db) as cache:
        got = cache.get_many([f"{t}{j}" for t in "ab" for j in range(50)])
    assert len(got) == 100 and got["b49"].text == "b49"


_OPENER = textwrap.dedent(
    """
    import sys, time
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    from cqabench.llm.base import Completion
    from cqabench.llm.cache import ItemCache
    cache = ItemCache(sys.argv[1])
    tag = sys.argv[3]
    for i in range(0, 20, 5):
        cache.put_many([(f"{tag}{j}", Completion(f"{tag}{j}", 1, 1, 0.0), "") for j in range(i, i + 5)])
    print("done", flush=True)
    """
)


def test_processes_opening_a_fresh_file_at_the_same_instant_all_get_in(tmp_path: Path) -> None:
    """Switching a new file to WAL answers 'database is locked' without the busy timeout (seen in CI)."""
    for round_ in range(3):
        db = tmp_path / f"fresh{round_}.sqlite"
        start = time.time() + 1.0
        procs = [
            subprocess.Popen([sys.executable, "-c", _OPENER, str(db), str(start), tag],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for tag in "abcd"
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [o.strip() for o, _ in outs] == ["done"] * 4, [e for _, e in outs]
        with ItemCache(db) as cache:
            assert len(cache) == 80
