"""The retrieval pipelines table: fused and reranked runs vs BM25, each metric its own Holm family."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cqabench.report.retrieval_pipelines import describe, pipeline_runs, render, retrieval_pipelines

FUSION = {"type": "fusion", "fuse": ["bm25", "minilm"], "method": "rrf", "rrf_k": 60, "depth": 100}
RERANK = {
    "type": "rerank",
    "of": "bm25",
    "model": "cross-encoder/ms-marco-MiniLM-L-6-v2",
    "revision": "c5ee24cb16019beea0893ab7796b1df96625c6b8",
    "depth": 100,
    "max_length": 512,
}


def _rows(dataset: str, run: str, scores: list[float], metric: str) -> list[dict]:
    return [
        {
            "cell_id": f"retrieval/{dataset}/dev/pipe/{run}",
            "stage": "retrieval",
            "dataset": dataset,
            "split": "dev",
            "serialization": "pipe",
            "retriever": run,
            "qid": f"q{i}",
            "metric": metric,
            "variant": "trec_eval",
            "value": v,
        }
        for i, v in enumerate(scores)
    ]


def _fact(dataset: str, run: str, kind: str, settings: dict | None) -> dict:
    return {
        "cell_id": f"retrieval/{dataset}/dev/pipe/{run}",
        "stage": "retrieval",
        "dataset": dataset,
        "split": "dev",
        "serialization": "pipe",
        "retriever": run,
        "retriever_type": kind,
        "retriever_settings": json.dumps(settings) if settings else None,
    }


@pytest.fixture
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    per_question = pd.DataFrame(
        _rows("musique", "bm25", [0.0] * 6, "ndcg_cut_10")
        + _rows("musique", "hybrid", [1.0] * 6, "ndcg_cut_10")
        + _rows("musique", "minilm", [1.0] * 6, "ndcg_cut_10")  # a first-stage run: not in this table
        + _rows("ottqa", "bm25", [0.5, 0.2, 0.9], "ndcg_cut_10")
        + _rows("ottqa", "hybrid", [0.5, 0.4, 0.6], "ndcg_cut_10")
        + _rows("musique", "bm25", [0.5, 0.5], "recall_100")
        + _rows("musique", "hybrid", [1.0, 0.5], "recall_100")
    )
    metrics = pd.DataFrame(
        [
            _fact(d, r, k, s)
            for d in ("musique", "ottqa")
            for r, k, s in (("bm25", "bm25", None), ("minilm", "dense", None), ("hybrid", "fusion", FUSION))
        ]
    )
    return per_question, metrics


def test_definitions_read_back_from_the_rows() -> None:
    assert describe(FUSION) == "RRF(bm25, minilm); rrf_k 60; depth 100"
    assert (
        describe({"type": "fusion", "fuse": ["a", "b"], "method": "combsum", "norm": "zmuv"})
        == "combsum(a, b); norm zmuv"
    )
    assert describe(RERANK) == "cross-encoder/ms-marco-MiniLM-L-6-v2@c5ee24cb1601 reranks bm25 top 100 (max_length 512)"


def test_only_pipeline_runs_each_metric_its_own_family(frames) -> None:
    per_question, metrics = frames
    assert pipeline_runs(metrics) == {"hybrid": "RRF(bm25, minilm); rrf_k 60; depth 100"}
    doc = retrieval_pipelines(per_question, metrics)
    assert [(r["dataset"], r["run"]) for r in doc["rows"]] == [("musique", "hybrid"), ("ottqa", "hybrid")]
    mus, ott = doc["rows"]
    # nDCG@10: musique d = 1 on 6 queries, exact p = 2/64; ottqa d = (0, .2, -.3), p = 1 (as in the
    # significance table's test). Holm over m = 2: 0.0625 and 1. minilm is not in the family.
    assert mus["ndcg_cut_10"]["p_value"] == pytest.approx(2 / 64) and mus["ndcg_cut_10"]["p_adjusted"] == pytest.approx(
        0.0625
    )
    assert ott["ndcg_cut_10"]["p_adjusted"] == pytest.approx(1.0)
    assert doc["method"]["correction"]["ndcg_cut_10"]["family_size"] == 2
    assert doc["method"]["correction"]["ndcg_cut_10"]["family"].startswith("every pipeline run vs bm25")
    # Recall@100: musique d = (0.5, 0): both sign patterns of 0.5 give |mean| 0.25, p = 1, m = 1;
    # ottqa has no recall rows: n/a with its reason, outside the family.
    assert mus["recall_100"]["diff"] == pytest.approx(0.25) and mus["recall_100"]["p_value"] == pytest.approx(1.0)
    assert doc["method"]["correction"]["recall_100"]["family_size"] == 1
    assert ott["recall_100"]["p_value"] is None and "no per-query recall_100 scores" in ott["recall_100"]["reason"]


def test_written_as_md_html_json(frames, tmp_path) -> None:
    per_question, metrics = frames
    render(per_question, metrics, tmp_path)
    md = (tmp_path / "retrieval_pipelines.md").read_text()
    assert (
        "| musique | dev | pipe | hybrid | RRF(bm25, minilm); rrf_k 60; depth 100 | 6 | 1.000 | +1.000 | 0.031 / 0.062 "
        "| 0.750 | +0.250 | 1.000 / 1.000 |"
    ) in md
    assert (
        "| ottqa | dev | pipe | hybrid | RRF(bm25, minilm); rrf_k 60; depth 100 | 3 | 0.500 | -0.033 | 1.000 / 1.000 | n/a [1] |  |  |"
        in md
    )
    assert "nDCG@10 m = 2, R@100 m = 1" in md and "fraction (0–1)" in md
    html = (tmp_path / "retrieval_pipelines.html").read_text()
    assert html.count("<tr>") == 3
    assert json.loads((tmp_path / "retrieval_pipelines.json").read_text())["runs"] == {
        "hybrid": "RRF(bm25, minilm); rrf_k 60; depth 100"
    }


def test_no_pipeline_says_so(frames, tmp_path) -> None:
    per_question, metrics = frames
    doc = render(per_question, metrics[metrics["retriever"] != "hybrid"], tmp_path)
    assert doc["rows"] == [] and "no retrieval pipeline" in doc["reason"]
    assert "declare one under retrieval.pipelines" in (tmp_path / "retrieval_pipelines.html").read_text()
