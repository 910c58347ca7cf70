"""Retrieval runs vs BM25 across the matrix: one family of paired tests, corrected, marked in the table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cqabench.cli import main
from cqabench.report.retrieval_significance import (
    render,
    retrieval_vs_baseline,
    to_markdown,
)

EXPECTED = str(Path(__file__).resolve().parents[2] / "config" / "expected" / "dexter.yaml")


def _rows(dataset: str, retriever: str, scores: list[float], metric: str = "ndcg_cut_10") -> list[dict]:
    return [
        {
            "cell_id": f"retrieval/{dataset}/dev/pipe/{retriever}",
            "stage": "retrieval",
            "dataset": dataset,
            "split": "dev",
            "serialization": "pipe",
            "retriever": retriever,
            "qid": f"q{i}",
            "metric": metric,
            "variant": "trec_eval",
            "value": v,
            "unit": "fraction",
        }
        for i, v in enumerate(scores)
    ]


@pytest.fixture
def frame() -> pd.DataFrame:
    rows = (
        _rows("musique", "bm25", [0.0] * 6)
        + _rows("musique", "minilm", [1.0] * 6)  # d all 1: p = 2/64
        + _rows("ottqa", "bm25", [0.5, 0.2, 0.9])
        + _rows("ottqa", "minilm", [0.5, 0.4, 0.6])  # d 0, .2, -.3
        + _rows("tatqa", "minilm", [0.1, 0.2])  # no bm25 run of tatqa
        + _rows("musique", "bm25", [1.0], metric="recall_100")
    )
    return pd.DataFrame(rows)


def test_family_of_paired_tests_with_holm_by_hand(frame: pd.DataFrame) -> None:
    doc = retrieval_vs_baseline(frame)
    by = {c["dataset"]: c for c in doc["comparisons"]}
    assert set(by) == {"musique", "ottqa", "tatqa"}
    mus, ott, tat = by["musique"], by["ottqa"], by["tatqa"]
    assert mus["n_common"] == 6 and mus["diff"] == pytest.approx(1.0) and mus["exact"]
    assert mus["p_value"] == pytest.approx(2 / 64)  # only all + and all − reach |mean| 1
    # ottqa d = (0, 0.2, -0.3), |sum| 0.1: the signs of 0.2 and -0.3 give sums ±0.1 and ±0.5 (the 0 doubles
    # each), so all 8 patterns reach 0.1 and p = 1.
    assert ott["p_value"] == pytest.approx(1.0) and ott["diff"] == pytest.approx(-0.1 / 3)
    assert tat["p_value"] is None and "no bm25 run" in tat["reason"]
    # Holm over the m = 2 tested: 2/64 × 2 = 0.0625; then max(0.0625, 1.0) = 1.
    assert doc["method"]["correction"] == {
        "method": "holm",
        "description": "Holm step-down (family-wise error rate)",
        "family": "every run vs bm25 on every (dataset, split, serialization)",
        "family_size": 2,
        "alpha": 0.05,
    }
    assert mus["p_adjusted"] == pytest.approx(0.0625) and ott["p_adjusted"] == pytest.approx(1.0)
    assert mus["significant"] is False and tat["significant"] is None
    # At alpha 0.1 the MuSiQue difference is marked; BH gives 2/64 × 2 / 1 = 0.0625 too, and 1.0.
    loose = retrieval_vs_baseline(frame, alpha=0.1, correction="bh")
    m2 = next(c for c in loose["comparisons"] if c["dataset"] == "musique")
    assert m2["p_adjusted"] == pytest.approx(0.0625) and m2["significant"] is True
    md = to_markdown(loose)
    assert "| musique | dev | pipe | minilm | 6 | 1.000 | 0.000 | +1.000 | 0.031 / 0.062 * |" in md
    assert "p BH" in md and "fraction (0–1)" in md and "not the paper's data" in md
    assert "n/a [1]" in md and "[1] no bm25 run of this dataset split" in md


def test_runs_without_per_query_scores_come_from_the_fact_table(frame: pd.DataFrame) -> None:
    metrics = pd.DataFrame(
        [
            {
                "cell_id": "retrieval/ambigqa/dev/pipe/minilm",
                "stage": "retrieval",
                "dataset": "ambigqa",
                "split": "dev",
                "serialization": "pipe",
                "retriever": "minilm",
            },
            {
                "cell_id": "retrieval/ambigqa/dev/pipe/bm25",
                "stage": "retrieval",
                "dataset": "ambigqa",
                "split": "dev",
                "serialization": "pipe",
                "retriever": "bm25",
            },
        ]
    )
    doc = retrieval_vs_baseline(frame, metrics=metrics)
    amb = next(c for c in doc["comparisons"] if c["dataset"] == "ambigqa")
    assert amb["p_value"] is None and amb["reason"].startswith("no per-query ndcg_cut_10 scores for this run")
    assert doc["method"]["correction"]["family_size"] == 2  # n/a rows are not in the family


def test_report_tables_writes_it_with_the_configured_correction(frame: pd.DataFrame, tmp_path) -> None:
    render(frame, tmp_path, correction="bh")
    doc = json.loads((tmp_path / "retrieval_vs_baseline.json").read_text())
    assert doc["method"]["correction"]["method"] == "bh"
    assert (tmp_path / "retrieval_vs_baseline.html").read_text().count("<tr>") == 4  # header + 3 rows
    pq, m = tmp_path / "pq.parquet", tmp_path / "m.parquet"
    frame.to_parquet(pq)
    frame.drop(columns=["qid"]).drop_duplicates("cell_id").to_parquet(m)
    out = tmp_path / "tables"
    assert (
        main(
            [
                "report-tables",
                "--metrics",
                str(m),
                "--per-question",
                str(pq),
                "--expected",
                EXPECTED,
                "--out-dir",
                str(out),
                "--correction",
                "bh",
                "--test-resamples",
                "1000",
            ]
        )
        == 0
    )
    written = json.loads((out / "retrieval_vs_baseline.json").read_text())
    assert written["method"]["correction"]["method"] == "bh" and written["method"]["test"]["resamples"] == 1000
    answers = json.loads((out / "answers_by_setting.json").read_text())
    assert answers["method"]["correction"]["method"] == "bh"
