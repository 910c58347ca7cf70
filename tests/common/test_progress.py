"""Progress lines: formatting and the steady interval, driven by a fake clock (no sleeping)."""

from __future__ import annotations

import logging

import pytest

from cqabench.common.progress import Progress, format_duration, format_rate


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (42.4, "42s"), (59.6, "1m00s"), (185, "3m05s"), (3600, "1h00m"), (3725, "1h02m"), (-3, "0s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_rate_switches_to_per_minute_when_slow() -> None:
    assert format_rate(12.34, "docs") == "12.3 docs/s"
    assert format_rate(0.5, "items") == "30.0 items/min"
    assert format_rate(0.0, "items") == "0.0 items/s"


def test_logs_once_per_interval_with_rate_and_eta(caplog) -> None:
    clock = FakeClock()
    p = Progress("encode corpus", 1000, unit="docs", interval_s=30, clock=clock)
    caplog.set_level(logging.INFO, logger="cqabench.common.progress")
    clock.now += 10
    assert p.update(100) is None  # 10 s < 30 s: nothing yet
    clock.now += 20
    # 30 s in, 200 done: 6.7 docs/s, 800 left -> 120 s.
    assert p.update(100) == "encode corpus: 200/1000 (20%), 6.7 docs/s, elapsed 30s, ETA 2m00s"
    clock.now += 29
    assert p.update(100) is None  # 29 s since the last line
    clock.now += 1
    # 60 s, 400 done: 6.7/s, 600 left -> 90 s.
    assert p.update(100) == "encode corpus: 400/1000 (40%), 6.7 docs/s, elapsed 1m00s, ETA 1m30s"
    clock.now += 5
    p.done = 1000
    assert p.finish() == "encode corpus: 1000/1000 (100%), 15.4 docs/s, elapsed 1m05s"
    assert [r.getMessage() for r in caplog.records] == [
        "encode corpus: 200/1000 (20%), 6.7 docs/s, elapsed 30s, ETA 2m00s",
        "encode corpus: 400/1000 (40%), 6.7 docs/s, elapsed 1m00s, ETA 1m30s",
        "encode corpus: 1000/1000 (100%), 15.4 docs/s, elapsed 1m05s (done)",
    ]


def test_unknown_total_and_no_progress_yet() -> None:
    clock = FakeClock()
    p = Progress("index", None, interval_s=0, clock=clock)
    clock.now += 120
    assert p.update(3) == "index: 3, 1.5 items/min, elapsed 2m00s"
    q = Progress("generate", 10, interval_s=0, clock=clock)
    clock.now += 1
    assert q.update(0) == "generate: 0/10 (0%), 0.0 items/s, elapsed 1s, ETA unknown"


def test_generation_logs_progress_and_its_end(tmp_path, caplog) -> None:
    """generate_missing reports through Progress: the final line counts every generated item."""
    from cqabench.generation.completions import generate_missing
    from cqabench.generation.items import Item
    from cqabench.generation.llm.base import Completion, Sampling
    from cqabench.generation.llm.cache import ItemCache

    class Backend:
        retries = 0

        def generate(self, chats, sampling, labels=None):
            for start in range(0, len(chats), 2):  # batches of two
                yield [(i, Completion(f"a{i}", 5, 1, 0.01)) for i in range(start, min(start + 2, len(chats)))]

        def close(self) -> None:
            pass

    items = [Item(f"q{i}", [{"role": "user", "content": f"question {i}"}], f"key{i}", []) for i in range(5)]
    caplog.set_level(logging.INFO, logger="cqabench.common.progress")
    with ItemCache(tmp_path / "cache.sqlite") as cache:
        cached, generated, _ = generate_missing(Backend, [(Sampling(), items)], cache, "musique/dev/cell")
    assert not cached and len(generated) == 5
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().endswith("(done)")]
    assert line.startswith("musique/dev/cell generation: 5/5 (100%), ")
