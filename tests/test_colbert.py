"""ColBERTv2 via colbert-ai: PLAID index and search on CPU in a guarded worker process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402

from cqabench import retrievers  # noqa: E402
from cqabench.errors import ConfigError  # noqa: E402
from cqabench.retrievers import colbert  # noqa: E402

WORDS = "apple volcano chess jupiter violin bread glacier harbor tiger copper lantern meadow".split()
# 36 short documents; each holds two of the words, so every word is in six documents and only
# one document holds a given pair.
DOCS = [(f"d{i}", "", f"{WORDS[i % 12]} {WORDS[(i // 12 + 1 + i) % 12]}") for i in range(36)]


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mf.tiny_colbert(tmp_path_factory.mktemp("colbert") / "model")


@pytest.mark.slow
def test_plaid_index_ranks_the_document_holding_both_query_terms_first(model: Path, tmp_path: Path) -> None:
    """First run on a machine also compiles colbert-ai's C++ helpers (~2 min, then cached)."""
    settings = {"type": "colbert", "model": str(model), "nbits": 2, "doc_maxlen": 16, "query_maxlen": 8,
                "kmeans_niters": 2, "timeout_s": 900}
    try:
        retrievers.build_index(iter(DOCS), tmp_path / "idx", settings)
    except colbert.ColbertError as exc:
        pytest.skip(f"colbert-ai cannot index on this machine: {exc}")
    assert (tmp_path / "idx" / "plaid" / "metadata.json").is_file()
    queries = [(docid, text) for docid, _, text in DOCS[:6]]
    res = retrievers.search(tmp_path / "idx", queries, 5, settings)
    for docid, _ in queries:
        assert res[docid][0][0] == docid, (docid, res[docid])
        scores = [s for _, s in res[docid]]
        assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]
    with pytest.raises(ConfigError, match="nbits"):
        retrievers.search(tmp_path / "idx", queries, 5, {**settings, "nbits": 4})


def test_worker_failure_becomes_an_error_with_the_log(tmp_path: Path) -> None:
    """A checkpoint that is not one: colbert-ai raises in the child; we get its message, no hang."""
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    with pytest.raises(colbert.ColbertError, match=r"colbert index failed \(exit 1\)") as err:
        colbert.build_index(iter(DOCS[:3]), tmp_path, {"type": "colbert", "model": str(bad), "timeout_s": 120})
    assert "offline mode" in str(err.value)  # the exception colbert-ai raised, in the log tail


def test_worker_timeout_is_reported(model: Path, tmp_path: Path) -> None:
    with pytest.raises(colbert.ColbertError, match="timeout_s=0.5"):
        colbert.build_index(iter(DOCS), tmp_path, {"type": "colbert", "model": str(model), "timeout_s": 0.5})


def test_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model"):
        colbert.resolve({"type": "colbert"})
    with pytest.raises(ConfigError, match="nbits"):
        colbert.resolve({"type": "colbert", "model": "x", "nbits": 3})
    with pytest.raises(ConfigError, match="PLAID"):
        colbert.search(tmp_path, [("q", "x")], 3, {"type": "colbert", "model": "x"})
