"""Retrieval metrics against values worked out by hand from the trec_eval definitions."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import RAW
from cqabench.data.schema import QREL_SCHEMA, QUERY_SCHEMA, Query
from cqabench.evaluation.metrics.retrieval import (
    best_annotator_recall,
    evaluate,
    evaluate_files,
    qrels_from_rows,
    strategyqa_recall,
)
from cqabench.retrieval.base import rank


def test_graded_ndcg_precision_recall_map_by_hand():
    qrels = {"q1": {"d1": 2, "d2": 1, "d3": 0}}
    run = {"q1": {"d2": 3.0, "d1": 2.0, "d4": 1.0}}
    m = evaluate(run, qrels).per_query["q1"]
    # trec_eval nDCG: gain = grade, discount log2(rank + 1).
    # DCG@3 = 1/log2(2) + 2/log2(3) + 0 = 1 + 1.261860 = 2.261860
    # IDCG@3 = 2/log2(2) + 1/log2(3) = 2 + 0.630930 = 2.630930  -> 0.859719
    assert m["ndcg_cut_3"] == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert m["ndcg_cut_3"] == pytest.approx(0.859719, abs=1e-6)
    assert m["ndcg_cut_1"] == pytest.approx(0.5)  # 1 / 2
    assert m["ndcg_cut_100"] == pytest.approx(m["ndcg_cut_3"])  # nothing relevant below rank 3
    assert m["P_1"] == 1.0 and m["P_10"] == pytest.approx(0.2)  # 2 relevant / 10
    assert m["recall_10"] == 1.0 and m["recall_20"] == 1.0
    assert m["map_cut_100"] == pytest.approx(1.0)  # (1/1 + 2/2) / 2


def test_empty_result_counts_zero_and_no_qrels_is_excluded():
    qrels = {"q1": {"d1": 1}, "q2": {"d5": 1}, "q3": {"d6": 0}}
    run = {"q1": {"d1": 1.0}, "q4": {"d9": 1.0}}  # q2 missing from the run, q4 has no qrels
    result = evaluate(run, qrels)
    assert sorted(result.per_query) == ["q1", "q2"]  # q3 (no relevant qrel) excluded
    assert result.per_query["q2"]["ndcg_cut_10"] == 0.0 and result.per_query["q2"]["recall_100"] == 0.0
    assert result.counts == {
        "identical_ids_dropped": 0,
        "queries_evaluated": 2,
        "queries_without_relevant_qrels": 1,
        "run_queries_without_qrels": 1,
        "queries_with_empty_result": 1,
    }
    # An empty dict (not a missing key) is scored too.
    assert evaluate({"q2": {}}, {"q2": {"d5": 1}}).per_query["q2"]["P_1"] == 0.0


def test_ties_follow_trec_eval_docid_descending():
    qrels = {"q": {"a": 1}}
    # Equal scores: trec_eval puts "b" before "a" (reverse docid order), so P@1 = 0, nDCG@10 = 1/log2(3).
    m = evaluate({"q": {"a": 1.0, "b": 1.0}}, qrels).per_query["q"]
    assert m["P_1"] == 0.0
    assert m["ndcg_cut_10"] == pytest.approx(1 / math.log2(3))
    assert rank([("a", 1.0), ("b", 1.0), ("c", 2.0)], 3) == [("c", 2.0), ("b", 1.0), ("a", 1.0)]


def test_identical_ids_dropped_or_kept():
    qrels = {"x": {"y": 1}}
    run = {"x": {"x": 5.0, "y": 1.0}}
    dropped = evaluate(run, qrels, drop_identical_ids=True)
    assert dropped.per_query["x"]["P_1"] == 1.0 and dropped.counts["identical_ids_dropped"] == 1
    kept = evaluate(run, qrels, drop_identical_ids=False).per_query["x"]
    assert kept["P_1"] == 0.0 and kept["ndcg_cut_10"] == pytest.approx(1 / math.log2(3))


def test_qrels_merge_annotators_keeping_highest_grade():
    rows = [
        {"qid": "q", "docid": "a", "relevance": 1, "annotator": "0"},
        {"qid": "q", "docid": "a", "relevance": 2, "annotator": "1"},
        {"qid": "q", "docid": "b", "relevance": 1, "annotator": "1"},
    ]
    assert qrels_from_rows(rows) == {"q": {"a": 2, "b": 1}}


def test_best_annotator_recall_definition():
    evidence = [[["a"], ["b", "c"], []], [["d"]], [[], []]]  # third annotator: operations only
    assert best_annotator_recall(["a", "c", "x"], evidence) == pytest.approx(2 / 3)
    assert best_annotator_recall(["d"], evidence) == 1.0
    # Only the first k count.
    assert best_annotator_recall(["x"] * 10 + ["d"], evidence) == 0.0
    assert best_annotator_recall(["a"], [[[], []]]) == 0.0  # no evidence at all -> 0


@pytest.fixture(scope="module")
def strategyqa_dev() -> list[Query]:
    from cqabench.data.datasets import strategyqa

    return strategyqa.load({"questions": RAW / "strategyqa" / "dev.json"}, "dev").queries


def test_strategyqa_recall_on_real_dev_evidence(strategyqa_dev: list[Query]):
    by_qid = {q.qid: q for q in strategyqa_dev}
    q = by_qid["be5c9933987f046b476e"]  # "Is greed the most prevalent of the Seven Deadly Sins?"
    # Annotators' gold sets: {Seven deadly sins-1, Theft-52, Overweight-18},
    # {Greed-10, Gluttony-2, Theft-1, Obesity-4}, {Seven deadly sins-1, White-collar crime-3,
    # Obesity in the United States-41}.
    ranked = ["Greed-10", "Gluttony-2", "Theft-1", "Seven deadly sins-1"] + [f"Filler-{i}" for i in range(6)]
    ranked.append("Obesity-4")  # rank 11: outside the top 10
    run = {q.qid: {docid: float(100 - i) for i, docid in enumerate(ranked)}}
    evidence = {q.qid: q.evidence, "e0044a7b4d146d611e73": by_qid["e0044a7b4d146d611e73"].evidence}
    recall = strategyqa_recall(run, evidence)
    # Annotator 2 finds 3 of 4 (0.75); annotators 1 and 3 find 1 of 3. Best: 0.75.
    assert recall[q.qid] == pytest.approx(0.75)
    assert recall["e0044a7b4d146d611e73"] == 0.0  # not retrieved -> 0, kept
    # Moving Obesity-4 into the top 10 completes annotator 2.
    run[q.qid]["Obesity-4"] = 95.5
    assert strategyqa_recall(run, evidence)[q.qid] == 1.0


def test_strategyqa_recall_first_annotator_gold_on_all_dev(strategyqa_dev: list[Query]):
    """Retrieving exactly annotator 1's paragraphs scores 1 wherever that set fits in 10."""
    run = {}
    expected = {}
    for q in strategyqa_dev:
        gold = list(dict.fromkeys(p for step in q.evidence[0] for p in step))
        run[q.qid] = {p: 1.0 for p in gold}
        if gold and len(gold) <= 10:
            expected[q.qid] = 1.0
    recall = strategyqa_recall(run, {q.qid: q.evidence for q in strategyqa_dev})
    assert len(recall) == len(strategyqa_dev) == 229
    assert expected and all(recall[qid] == 1.0 for qid in expected)


def _write(rows: list[dict], schema: pa.Schema, path: Path) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def test_evaluate_files_writes_contract(tmp_path: Path):
    queries = _write(
        [asdict(Query("q1", "first?", evidence=[[["d1"]]])), asdict(Query("q2", "second?"))],
        QUERY_SCHEMA,
        tmp_path / "queries.parquet",
    )
    qrels = _write(
        [{"qid": "q1", "docid": "d1", "relevance": 1, "annotator": ""},
         {"qid": "q2", "docid": "d2", "relevance": 1, "annotator": ""}],
        QREL_SCHEMA, tmp_path / "qrels.parquet",
    )  # fmt: skip
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.5 bm25\nq1 Q0 q1 2 9.0 bm25\n")
    doc = evaluate_files(
        run, qrels, queries, {"dataset": "toy", "retriever": "bm25"}, tmp_path / "m.json", tmp_path / "pq.parquet",
        with_strategyqa_recall=True,
    )  # fmt: skip
    written = json.loads((tmp_path / "m.json").read_text())
    assert written == json.loads(json.dumps(doc))
    assert written["cell"]["stage"] == "retrieval" and written["cell"]["identical_id_policy"] == "drop"
    by_metric = {(m["metric"], m["variant"]): m for m in written["metrics"]}
    # q1 finds d1 at rank 1 (q1 itself dropped), q2 retrieved nothing: mean P@1 = 0.5 over n = 2.
    assert by_metric[("P_1", "trec_eval")]["value"] == 0.5 and by_metric[("P_1", "trec_eval")]["n"] == 2
    # StrategyQA recall: q1 1.0, q2 has no evidence -> 0.
    assert by_metric[("recall_10", "strategyqa_best_annotator")]["value"] == 0.5
    per_query = pq.read_table(tmp_path / "pq.parquet")
    assert per_query.column_names == ["qid", "metric", "variant", "value"]
    assert per_query.num_rows == 2 * 11 + 2


def _split(tmp_path: Path, queries: list[Query], qrels: list[dict], run_text: str) -> tuple[Path, Path, Path]:
    q = _write([asdict(x) for x in queries], QUERY_SCHEMA, tmp_path / "queries.parquet")
    r = _write(qrels, QREL_SCHEMA, tmp_path / "qrels.parquet")
    run = tmp_path / "run.trec"
    run.write_text(run_text)
    return run, r, q


def test_every_entry_is_a_fraction_with_its_unit(tmp_path: Path):
    run, qrels, queries = _split(
        tmp_path,
        [Query("q1", "?")],
        [{"qid": "q1", "docid": "d1", "relevance": 1, "annotator": ""}],
        "q1 Q0 d1 1 2.5 bm25\n",
    )
    doc = evaluate_files(run, qrels, queries, {}, tmp_path / "m.json", tmp_path / "pq.parquet")
    assert {m["unit"] for m in doc["metrics"]} == {"fraction"}
    assert all(0.0 <= m["value"] <= 1.0 for m in doc["metrics"])
    assert [m["metric"] for m in doc["metrics"]][:3] == ["ndcg_cut_1", "ndcg_cut_3", "ndcg_cut_5"]


def test_empty_qrels_make_every_measure_null_with_reason(tmp_path: Path):
    """AmbigQA light sample / StrategyQA without paragraphs: nothing to evaluate is n/a, not 0."""
    evidence = [[["Greed-10"], ["Theft-1"]], [["Obesity-4"]]]
    run, qrels, queries = _split(
        tmp_path,
        [Query("q1", "?", evidence=evidence), Query("q2", "?")],
        [],
        "q1 Q0 Greed-10 1 2.5 bm25\nq2 Q0 x 1 1.0 bm25\n",
    )
    doc = evaluate_files(
        run,
        qrels,
        queries,
        {"dataset": "strategyqa"},
        tmp_path / "m.json",
        tmp_path / "pq.parquet",
        with_strategyqa_recall=True,
    )
    trec = [m for m in doc["metrics"] if m["variant"] == "trec_eval"]
    assert len(trec) == 11 and all(m["value"] is None and m["n"] == 0 for m in trec)
    assert all("qrels empty" in m["reason"] for m in trec)
    [recall] = [m for m in doc["metrics"] if m["variant"] == "strategyqa_best_annotator"]
    # Greed-10 was even retrieved, but no gold id is a document of the split: not evaluable.
    assert recall["metric"] == "recall_10" and recall["value"] is None and recall["n"] == 0
    assert recall["reason"].startswith("no gold evidence paragraph of the split is in the searched corpus")
    assert doc["provenance"]["queries_evaluated"] == 0
    assert doc["provenance"]["strategyqa_questions_gold_not_in_corpus"] == 1  # q1; q2 names no id
    assert doc["provenance"]["strategyqa_questions_without_evidence"] == 1
    assert pq.read_table(tmp_path / "pq.parquet").num_rows == 0
    assert json.loads((tmp_path / "m.json").read_text())["metrics"][0]["value"] is None  # JSON null


def test_gold_outside_the_searched_corpus_is_not_evaluable(tmp_path: Path):
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"docid": ["a", "b"], "text": ["", ""]}), corpus)
    evidence = [[["g1"]]]
    run, qrels, queries = _split(
        tmp_path,
        [Query("q1", "?", evidence=evidence)],
        [{"qid": "q1", "docid": "g1", "relevance": 1, "annotator": "0"}],
        "q1 Q0 a 1 2.5 bm25\n",
    )
    # Without the corpus the qrels decide: q1 is evaluable and scores 0.
    doc = evaluate_files(
        run, qrels, queries, {}, tmp_path / "m.json", tmp_path / "pq.parquet", with_strategyqa_recall=True
    )
    by = {(m["metric"], m["variant"]): m for m in doc["metrics"]}
    assert by[("ndcg_cut_10", "trec_eval")]["value"] == 0.0 and by[("recall_10", "strategyqa_best_annotator")]["n"] == 1
    # With it, g1 is not in the corpus that was searched: every measure n/a.
    doc = evaluate_files(
        run,
        qrels,
        queries,
        {},
        tmp_path / "m.json",
        tmp_path / "pq.parquet",
        with_strategyqa_recall=True,
        corpus_path=corpus,
    )
    by = {(m["metric"], m["variant"]): m for m in doc["metrics"]}
    assert by[("ndcg_cut_10", "trec_eval")]["value"] is None
    assert "searched corpus" in by[("ndcg_cut_10", "trec_eval")]["reason"]
    assert by[("recall_10", "strategyqa_best_annotator")]["value"] is None


def test_best_annotator_recall_with_known_ids():
    evidence = [[["a", "b"]], [["x"]]]
    # Annotator 2's only id is unknown: skipped; annotator 1 finds a of {a, b}.
    assert best_annotator_recall(["a"], evidence, 10, known={"a", "b"}) == 0.5
    # No annotator keeps a known id although ids were named: not evaluable.
    assert best_annotator_recall(["a"], evidence, 10, known=set()) is None
    # A question naming no id at all still scores 0 (kept in the mean, as without `known`).
    assert best_annotator_recall(["a"], [[[]]], 10, known={"a"}) == 0.0
    assert strategyqa_recall({"q": {"a": 1.0}}, {"q": evidence, "r": [[["x"]]]}, known={"a", "b"}) == {"q": 0.5}


def test_cli_evaluate_retrieval_takes_the_corpus(tmp_path: Path):
    from cqabench.cli import main

    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"docid": ["d1"]}), corpus)
    run, qrels, queries = _split(
        tmp_path,
        [Query("q1", "?")],
        [{"qid": "q1", "docid": "d1", "relevance": 1, "annotator": ""}],
        "q1 Q0 d1 1 2.5 bm25\n",
    )
    out = tmp_path / "m.json"
    assert (
        main(
            [
                "evaluate-retrieval",
                "--run",
                str(run),
                "--qrels",
                str(qrels),
                "--queries",
                str(queries),
                "--cell",
                "{}",
                "--corpus",
                str(corpus),
                "--out-json",
                str(out),
                "--out-per-query",
                str(tmp_path / "pq.parquet"),
            ]
        )
        == 0
    )
    by = {m["metric"]: m for m in json.loads(out.read_text())["metrics"]}
    assert by["P_1"]["value"] == 1.0 and by["P_1"]["unit"] == "fraction"
