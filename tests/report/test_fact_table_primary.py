"""The fact table's `primary` column (one headline value per cell and dataset, which a naive
pivot over AmbigQA's and FinQA's two variants cannot pick) and the wall time of generation
rows (the generate job's, with a note saying what it covers; never a bare null)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from cqabench.evaluation.cell_provenance import generation_wall_time
from cqabench.report.aggregate import aggregate, find_metric_files


def _cell(root: Path, rel: str, cell: dict, metrics: list[dict], provenance: dict | None = None) -> None:
    folder = root / rel
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps({"cell": cell, "metrics": metrics, "provenance": provenance or {}}))


def _gen(dataset: str, split: str = "dev") -> dict:
    return {
        "stage": "generation",
        "dataset": dataset,
        "split": split,
        "serialization": "pipe",
        "retriever": "none",
        "llm": "m",
        "prompt": "few-shot",
        "setting": "closed",
        "k": 0,
    }


def _m(metric: str, variant: str, value: float, n: int = 4) -> dict:
    return {"metric": metric, "variant": variant, "value": value, "n": n, "unit": "fraction"}


@pytest.fixture
def table(tmp_path: Path) -> pd.DataFrame:
    root = tmp_path / "results"
    gen = "metrics/{}/dev/pipe/none/m/few-shot/closed-k0"
    # AmbigQA and FinQA: the same metric in two variants, DEXTER's listed first on purpose
    _cell(
        root,
        gen.format("ambigqa"),
        _gen("ambigqa"),
        [_m("f1_ans", "dexter", 0.6), _m("f1_ans", "official", 0.5), _m("cover_em", "default", 0.25)],
    )
    _cell(root, gen.format("finqa"), _gen("finqa"), [_m("em_tol", "dexter", 0.75), _m("em_tol", "default", 0.5)])
    _cell(
        root,
        gen.format("strategyqa"),
        _gen("strategyqa"),
        [_m("cover_em", "default", 0.5), _m("accuracy", "default", 0.75)],
    )
    # TANQ: breakdown rows of the primary metric and a second variant are never primary
    _cell(
        root,
        "metrics/tanq/test/pipe/none/m/few-shot/closed-k0",
        _gen("tanq", "test"),
        [
            _m("rms_f1/tanq_type=simple", "official", 0.2),
            _m("rms_f1", "official", 0.3),
            _m("rms_f1", "cqabench_parse", 0.4),
        ],
    )
    _cell(
        root,
        "retrieval/finqa/dev/pipe/bm25",
        {"stage": "retrieval", "dataset": "finqa", "split": "dev", "serialization": "pipe", "retriever": "bm25"},
        [_m("recall_100", "trec_eval", 0.9), _m("ndcg_cut_10", "trec_eval", 0.4)],
        {"wall_time_s": 2.5},
    )
    # generation summaries: AmbigQA's items all from the cache, FinQA's partly; StrategyQA has
    # none (predictions scored by `cqabench evaluate`) but a benchmark file; TANQ has neither
    summaries = {
        "ambigqa": {"wall_time_s": 0.8, "n_items": 4, "n_cached": 4, "latency_s": 12.25, "generated_latency_s": 0.0},
        "finqa": {"wall_time_s": 31.5, "n_items": 4, "n_cached": 1, "latency_s": 20.0, "generated_latency_s": 15.5},
    }
    for dataset, doc in summaries.items():
        path = root / "generation" / dataset / "dev/pipe/none/m/few-shot/closed-k0/summary.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(doc))
    bench = root / "benchmarks/generate/strategyqa/dev/pipe/none/m/few-shot/closed-k0.tsv"
    bench.parent.mkdir(parents=True)
    bench.write_text("s\th:m:s\tmax_rss\n7.125\t0:00:07\t300.0\n")
    aggregate(find_metric_files(root), root / "metrics.parquet", root / "per_question.parquet", results_dir=root)
    return pd.read_parquet(root / "metrics.parquet")


def test_primary_marks_one_value_per_cell_and_dataset(table: pd.DataFrame) -> None:
    assert table["primary"].dtype == bool
    chosen = duckdb.sql(
        "SELECT dataset, metric, variant, value, count(*) OVER (PARTITION BY cell_id, dataset) AS k "
        'FROM "table" WHERE "primary" ORDER BY dataset, metric'
    ).fetchall()
    assert chosen == [
        ("ambigqa", "f1_ans", "official", 0.5, 1),
        ("finqa", "em_tol", "default", 0.5, 1),
        ("finqa", "ndcg_cut_10", "trec_eval", 0.4, 1),
        ("strategyqa", "accuracy", "default", 0.75, 1),
        ("tanq", "rms_f1", "official", 0.3, 1),
    ]
    cells = duckdb.sql('SELECT count(DISTINCT cell_id) FROM "table"').fetchall()[0][0]
    assert cells == 5 == int(table["primary"].sum())


def test_generation_rows_carry_wall_time_and_say_what_it_covers(table: pd.DataFrame) -> None:
    rows = table[table["stage"] == "generation"].drop_duplicates("dataset").set_index("dataset")
    assert rows.loc["ambigqa", "wall_time_s"] == 0.8
    assert "all 4 items came from the item cache" in rows.loc["ambigqa", "wall_time_note"]
    assert "model latency of these items when generated: 12.250 s" in rows.loc["ambigqa", "wall_time_note"]
    assert rows.loc["finqa", "wall_time_s"] == 31.5
    assert (
        "1 of 4 items came from the item cache, the model's latency for the 3 generated ones: 15.500 s"
        in rows.loc["finqa", "wall_time_note"]
    )
    assert rows.loc["strategyqa", "wall_time_s"] == 7.125
    assert "benchmark file" in rows.loc["strategyqa", "wall_time_note"]
    assert pd.isna(rows.loc["tanq", "wall_time_s"])
    assert rows.loc["tanq", "wall_time_note"].startswith("not recorded: no generation summary.json")
    assert table["wall_time_note"][table["stage"] == "generation"].notna().all()
    retrieval = table[table["stage"] == "retrieval"].iloc[0]
    assert retrieval["wall_time_s"] == 2.5 and "evaluate-retrieval" in retrieval["wall_time_note"]


def test_generation_wall_time_by_hand() -> None:
    assert generation_wall_time({"n_items": 3, "n_cached": 0, "wall_time_s": 9.0}) == {
        "wall_time_s": 9.0,
        "wall_time_note": "the generate job (summary.json wall_time_s); every item generated by this job",
    }
    assert generation_wall_time({"n_items": 3}) == {}  # no wall time: the caller looks elsewhere
