"""IR-Q / IR-D on real StrategyQA questions and decompositions, with real BM25 over real paragraphs.

The StrategyQA paragraph file is not in the shared slice, so the index holds real MuSiQue
Wikipedia paragraphs: the mechanics under test (per-step queries, merging, deduplication,
order, cut, the step log) do not depend on which paragraphs are relevant.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import RAW
from cqabench import retrieval as retrievers
from cqabench.cli import main
from cqabench.common.errors import DataError
from cqabench.common.io import write_parquet
from cqabench.data.schema import QUERY_SCHEMA, Query
from cqabench.retrieval.decomposition import decomposed_search, steps_of, strip_stop_words

SETTINGS = {"type": "bm25", "threads": 1}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from cqabench.data.datasets import musique, strategyqa

    tmp = tmp_path_factory.mktemp("decomp")
    corpus = musique.load({"questions": RAW / "musique" / "musique_train_100.jsonl"}, "train", limit=20)
    write_parquet(corpus.tables()["corpus"], tmp / "corpus.parquet")
    assert main(["index", "--corpus", str(tmp / "corpus.parquet"), "--serialization", "pipe",
                 "--retriever-settings", json.dumps(SETTINGS), "--out", str(tmp / "index")]) == 0  # fmt: skip
    sqa = strategyqa.load(
        {"questions": RAW / "strategyqa" / "dev.json",
         "decompositions": RAW / "strategyqa" / "bart_decomp_dev_predictions.jsonl"},
        "dev", limit=8,
    )  # fmt: skip
    rows = [asdict(q) for q in sqa.queries]
    write_parquet(pa.Table.from_pylist(rows, schema=QUERY_SCHEMA), tmp / "queries.parquet")
    return {"tmp": tmp, "index": tmp / "index", "rows": rows}


def _search(index: Path):
    return lambda queries, k: retrievers.search(index, queries, k, SETTINGS)


def test_stop_words_and_references_removed():
    assert strip_stop_words("What is the population of Albany, Georgia?") == "population Albany Georgia"
    assert strip_stop_words("Is #3 smaller than #4?") == "smaller"
    assert strip_stop_words("Is it the same as #1?") == ""


@pytest.mark.parametrize("kind", ["gold", "predicted"])
@pytest.mark.jvm
def test_ird_merges_steps_into_ten_unique_paragraphs_by_score(setup: dict, kind: str):
    search = _search(setup["index"])
    results, log = decomposed_search(setup["rows"], kind, search, k=10)
    assert set(results) == {r["qid"] for r in setup["rows"]}
    for row in setup["rows"]:
        merged = results[row["qid"]]
        docids = [d for d, _ in merged]
        scores = [s for _, s in merged]
        assert len(merged) <= 10 and len(set(docids)) == len(docids)
        assert scores == sorted(scores, reverse=True)
        # Reference: each step searched on its own; a paragraph's merged score is its best step score.
        sent = [(f"s{e['step']}", e["query"]) for e in log if e["qid"] == row["qid"] and e["status"] == "sent"]
        assert len(sent) == sum(1 for e in log if e["qid"] == row["qid"] and e["step"] >= 0 and e["query"])
        best: dict[str, float] = {}
        for pairs in search(sent, 10).values():
            for d, s in pairs:
                best[d] = max(s, best.get(d, s))
        expected = sorted(best.items(), key=lambda p: p[0], reverse=True)
        expected.sort(key=lambda p: p[1], reverse=True)
        assert merged == expected[:10]
    steps = sum(len(steps_of(r, kind)) for r in setup["rows"])
    assert sum(1 for e in log if e["step"] >= 0) == steps  # every step logged, sent or not


@pytest.mark.jvm
def test_question_kind_is_one_query_cut_to_ten(setup: dict):
    results, log = decomposed_search(setup["rows"], "question", _search(setup["index"]), k=10)
    assert all(len(v) <= 10 for v in results.values())
    assert [e["step"] for e in log] == [0] * len(setup["rows"])


@pytest.mark.jvm
def test_empty_steps_recorded_never_crash(setup: dict):
    rows = [
        asdict(Query("only-refs", "Is it?", decomposition=["Is it the same as #1?", "Was it #2?"])),
        asdict(Query("mixed", "Is greed a deadly sin?", decomposition=["Is it #1?", "Is greed a deadly sin?"])),
        asdict(Query("none", "Why?", decomposition=[])),
    ]
    results, log = decomposed_search(rows, "gold", _search(setup["index"]), k=10)
    assert results["only-refs"] == [] and results["none"] == []
    statuses = {(e["qid"], e["step"]): e["status"] for e in log}
    assert statuses[("only-refs", 0)] == statuses[("only-refs", 1)] == "empty_after_stop_words"
    assert statuses[("only-refs", -1)] == "all_steps_empty"
    assert statuses[("none", -1)] == "no_steps"
    assert statuses[("mixed", 0)] == "empty_after_stop_words" and statuses[("mixed", 1)] == "sent"


@pytest.mark.jvm
def test_predicted_without_meta_is_named(setup: dict):
    row = asdict(Query("q", "Is it?", meta="{}"))
    with pytest.raises(DataError, match="predicted_decomposition"):
        decomposed_search([row], "predicted", _search(setup["index"]))


@pytest.mark.jvm
def test_cli_writes_run_and_step_log(setup: dict):
    tmp = setup["tmp"]
    assert main(["decompose-search", "--index", str(setup["index"]), "--queries", str(tmp / "queries.parquet"),
                 "--retriever-settings", json.dumps(SETTINGS), "--kind", "gold", "--tag", "bm25-ird-gold",
                 "--out-trec", str(tmp / "ird.trec"), "--out-parquet", str(tmp / "ird.parquet"),
                 "--out-log", str(tmp / "ird.json")]) == 0  # fmt: skip
    run = pq.read_table(tmp / "ird.parquet").to_pylist()
    per_q: dict[str, list[int]] = {}
    for r in run:
        per_q.setdefault(r["qid"], []).append(r["rank"])
    assert per_q and all(ranks == list(range(1, len(ranks) + 1)) and len(ranks) <= 10 for ranks in per_q.values())
    log = json.loads((tmp / "ird.json").read_text())
    assert log["stop_words"] == "sklearn.ENGLISH_STOP_WORDS" and log["k"] == 10
