"""The fact tables: one row per (cell, metric), plain columns, nulls for missing keys."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.common.errors import DataError
from cqabench.report.aggregate import aggregate, build_metrics_table, find_metric_files


def _write_cell(
    root: Path, rel: str, doc: dict, per_question: list[dict] | None = None, name: str = "per_question.parquet"
) -> Path:
    folder = root / rel
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(doc))
    if per_question is not None:
        pq.write_table(pa.Table.from_pylist(per_question), folder / name)
    return folder / "metrics.json"


RETRIEVAL = {
    "cell": {
        "stage": "retrieval",
        "dataset": "musique",
        "split": "dev",
        "corpus": "wiki-multihop",
        "serialization": "pipe",
        "retriever": "bm25",
        "retriever_settings": {"k1": 0.9, "b": 0.4},
        "identical_id_policy": "drop",
    },
    "metrics": [
        {"metric": "ndcg_cut_10", "variant": "trec_eval", "value": 0.41, "n": 3, "unit": "fraction"},
        {"metric": "recall_100", "variant": "trec_eval", "value": 0.8, "n": 3, "unit": "fraction"},
    ],
    "provenance": {"wall_time_s": 1.5, "git_commit": "abc", "package_versions": {"pyserini": "1.6.0"}},
}
GENERATION = {
    "cell": {
        "stage": "generation",
        "dataset": "musique",
        "split": "dev",
        "retriever": "bm25",
        "llm": "smollm2",
        "backend": "hf",
        "dtype": "float32",
        "prompt": "cot",
        "template_hash": "h1",
        "setting": "rag",
        "k": 5,
        "temperature": 0.0,
        "stop": ["\n\n"],
    },
    "metrics": [{"metric": "cover_em", "variant": "dexter", "value": 0.5, "n": 2, "unit": "fraction"}],
    "provenance": {"prompt_tokens": 120, "output_tokens": 30, "model_hash": "deadbeef", "seed": 7},
}


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    _write_cell(
        root,
        "retrieval/musique/dev/pipe/bm25",
        RETRIEVAL,
        [
            {"qid": "q1", "metric": "ndcg_cut_10", "variant": "trec_eval", "value": 1.0},
            {"qid": "q2", "metric": "ndcg_cut_10", "variant": "trec_eval", "value": 0.23},
        ],
        name="per_query.parquet",
    )
    _write_cell(
        root,
        "metrics/musique/dev/pipe/bm25/smollm2/cot/rag-k5",
        GENERATION,
        [
            {"qid": "q1", "metric": "cover_em", "variant": "dexter", "value": 1.0},
            {"qid": "q2", "metric": "cover_em", "variant": "dexter", "value": 0.0},
        ],
    )
    data = root / "data" / "musique" / "dev"
    data.mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"qid": "q1", "question_type": "2hop", "skills": ["a", "b"]},
                {"qid": "q2", "question_type": "3hop", "skills": []},
            ]
        ),
        data / "queries.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist(
            [  # q1's gold answer is a 3-column, 2-row table; q2's a span
                {
                    "qid": "q1",
                    "table_header": ["entity", "born", "club"],
                    "table_rows": [["A", "1990", "X"], ["B", "1991", "Y"]],
                },
                {"qid": "q2", "table_header": [], "table_rows": []},
            ]
        ),
        data / "answers.parquet",
    )
    return root


def test_one_row_per_cell_metric_with_switches_and_provenance(results: Path) -> None:
    files = find_metric_files(results)
    assert [f.parent.name for f in files] == ["rag-k5", "bm25"]  # sorted by path
    out_m, out_q = results / "metrics.parquet", results / "per_question.parquet"
    assert aggregate(files, out_m, out_q, results_dir=results, data_dir=results / "data") == (3, 4)
    frame = pd.read_parquet(out_m)
    ret = frame[frame["metric"] == "ndcg_cut_10"].iloc[0]
    assert ret["cell_id"] == "retrieval/musique/dev/pipe/bm25"
    assert ret["value"] == pytest.approx(0.41) and ret["n"] == 3
    assert json.loads(ret["retriever_settings"]) == {"b": 0.4, "k1": 0.9}
    assert json.loads(ret["package_versions"]) == {"pyserini": "1.6.0"}
    assert ret["git_commit"] == "abc" and ret["wall_time_s"] == 1.5
    # Keys a retrieval cell lacks are null, not a crash or a zero.
    assert pd.isna(ret["k"]) and pd.isna(ret["llm"]) and pd.isna(ret["prompt_tokens"])
    gen = frame[frame["metric"] == "cover_em"].iloc[0]
    assert gen["k"] == 5 and gen["template_hash"] == "h1" and gen["prompt_tokens"] == 120
    # Unknown switches / provenance keys become columns of their own plain type.
    assert gen["temperature"] == 0.0 and json.loads(gen["stop"]) == ["\n\n"] and gen["seed"] == 7
    assert pd.isna(ret["temperature"])


def test_plain_arrow_types_only(results: Path) -> None:
    table = build_metrics_table(find_metric_files(results), results)
    for f in table.schema:
        assert f.type in (pa.string(), pa.int64(), pa.float64(), pa.bool_()), (f.name, f.type)
    assert table.schema.field("k").type == pa.int64()
    assert table.schema.field("value").type == pa.float64()


def test_per_question_joins_question_type_and_skills(results: Path) -> None:
    aggregate(
        find_metric_files(results),
        results / "m.parquet",
        results / "q.parquet",
        results_dir=results,
        data_dir=results / "data",
    )
    frame = pd.read_parquet(results / "q.parquet")
    gen = frame[frame["metric"] == "cover_em"].set_index("qid")
    assert gen.loc["q1", "question_type"] == "2hop" and json.loads(gen.loc["q1", "skills"]) == ["a", "b"]
    assert pd.isna(gen.loc["q2", "skills"])
    # the gold table's size, for TANQ's Tables 8 (relations = columns - 1) and 9 (rows)
    assert (gen.loc["q1", "answer_columns"], gen.loc["q1", "answer_rows"]) == (3, 2)
    assert pd.isna(gen.loc["q2", "answer_columns"]) and pd.isna(gen.loc["q2", "answer_rows"])
    assert gen.loc["q1", "llm"] == "smollm2" and gen.loc["q1", "k"] == 5
    ret = frame[frame["metric"] == "ndcg_cut_10"].set_index("qid")
    assert ret.loc["q2", "value"] == pytest.approx(0.23)


def test_off_grid_marks_the_listed_cells_rows_and_is_null_without_a_grid(results: Path) -> None:
    """`off_grid`: the metric files a plan calls off-grid (here the RAG cell) are true on every row,
    in both tables; the others false; no list given (no plan): null, never a guessed false."""
    files = find_metric_files(results)
    rag = results / "metrics/musique/dev/pipe/bm25/smollm2/cot/rag-k5/metrics.json"
    aggregate(files, results / "m.parquet", results / "q.parquet", results_dir=results, off_grid={str(rag)})
    for name, rows in (("m.parquet", 3), ("q.parquet", 4)):
        frame = pd.read_parquet(results / name)
        assert len(frame) == rows
        assert frame.groupby("cell_id")["off_grid"].agg(list).to_dict() == {
            "metrics/musique/dev/pipe/bm25/smollm2/cot/rag-k5": [True] * (1 if name == "m.parquet" else 2),
            "retrieval/musique/dev/pipe/bm25": [False] * 2,
        }, name
    unknown = build_metrics_table(files, results)
    assert unknown.schema.field("off_grid").type == pa.bool_() and unknown.column("off_grid").null_count == 3


def test_mixed_types_in_unknown_column_fall_back_to_text(tmp_path: Path) -> None:
    a = _write_cell(
        tmp_path,
        "metrics/a",
        {"cell": {"stage": "generation", "shots": 3}, "metrics": [{"metric": "em", "value": 1, "unit": "fraction"}]},
    )
    b = _write_cell(
        tmp_path,
        "metrics/b",
        {
            "cell": {"stage": "generation", "shots": "auto"},
            "metrics": [{"metric": "em", "value": None, "unit": "fraction"}],
        },
    )
    table = build_metrics_table([a, b], tmp_path)
    assert table.schema.field("shots").type == pa.string()
    assert table.column("shots").to_pylist() == ["3", "auto"]
    assert table.column("value").to_pylist() == [1.0, None]
    assert table.column("variant").to_pylist() == [None, None]


def test_readers_other_than_pandas(results: Path) -> None:
    aggregate(find_metric_files(results), results / "m.parquet", results / "q.parquet", results_dir=results)
    for module in ("polars", "duckdb"):
        lib = importlib.import_module(module)  # requirements.txt: a missing reader fails, not skips
        if module == "polars":
            assert lib.read_parquet(results / "m.parquet").height == 3
        else:
            assert lib.sql(f"select count(*) from '{results / 'm.parquet'}'").fetchall()[0][0] == 3


def test_malformed_metric_file_names_path(tmp_path: Path) -> None:
    bad = tmp_path / "metrics" / "x" / "metrics.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"cell": {}, "metrics": {"metric": "em"}}')
    with pytest.raises(DataError, match="metrics"):
        build_metrics_table([bad])
    bad.write_text("{not json")
    with pytest.raises(DataError, match=str(bad)):
        build_metrics_table([bad])


def test_cli_aggregate_scans_results_dir(results: Path, capsys) -> None:
    out = results / "metrics.parquet"
    rc = main(
        [
            "aggregate",
            "--results-dir",
            str(results),
            "--data-dir",
            str(results / "data"),
            "--out-metrics",
            str(out),
            "--out-per-question",
            str(results / "per_question.parquet"),
        ]
    )
    assert rc == 0 and "2 metric files -> 3 metric rows" in capsys.readouterr().out
    assert pd.read_parquet(out)["metric"].tolist() == ["cover_em", "ndcg_cut_10", "recall_100"]


def test_one_unit_fraction_and_legacy_percent_files(tmp_path: Path) -> None:
    """Every value is a fraction: explicit units converted once; unit-less files read as written then."""
    files = [
        _write_cell(
            tmp_path,
            "metrics/new",
            {
                "cell": {"stage": "generation", "setting": "closed"},
                "metrics": [{"metric": "rms_f1", "variant": "tanq", "value": 0.0187, "n": 10, "unit": "fraction"}],
            },
        ),
        _write_cell(
            tmp_path,
            "metrics/pct",
            {
                "cell": {"stage": "generation", "setting": "closed"},
                "metrics": [{"metric": "rms_f1", "variant": "tanq", "value": 1.87, "n": 10, "unit": "percent"}],
            },
        ),
        # Written before units were recorded: answer metrics were percentages, retrieval fractions.
        _write_cell(
            tmp_path,
            "metrics/old",
            {
                "cell": {"stage": "generation", "setting": "closed"},
                "metrics": [{"metric": "rms_f1", "variant": "tanq", "value": 1.87, "n": 10}],
            },
        ),
        _write_cell(
            tmp_path,
            "retrieval/old",
            {
                "cell": {"stage": "retrieval"},
                "metrics": [{"metric": "ndcg_cut_10", "variant": "trec_eval", "value": 0.41, "n": 3}],
            },
        ),
    ]
    frame = build_metrics_table(files, tmp_path).to_pandas().set_index("cell_id")
    assert frame.loc["metrics/new", "value"] == pytest.approx(0.0187)
    assert frame.loc["metrics/pct", "value"] == pytest.approx(0.0187)
    assert frame.loc["metrics/old", "value"] == pytest.approx(0.0187)
    assert frame.loc["retrieval/old", "value"] == pytest.approx(0.41)
    assert set(frame["unit"]) == {"fraction"} and frame["reason"].isna().all()
    bad = _write_cell(
        tmp_path,
        "metrics/bad",
        {"cell": {"stage": "generation"}, "metrics": [{"metric": "em", "value": 3, "unit": "per mille"}]},
    )
    with pytest.raises(DataError, match="unknown unit 'per mille'"):
        build_metrics_table([bad], tmp_path)


def test_null_values_keep_their_reason(tmp_path: Path) -> None:
    reason = "no query of the split has a relevant qrel (qrels empty): nothing to evaluate"
    f = _write_cell(
        tmp_path,
        "retrieval/ambigqa/dev/pipe/bm25",
        {
            "cell": {"stage": "retrieval", "dataset": "ambigqa", "retriever": "bm25"},
            "metrics": [
                {
                    "metric": "ndcg_cut_10",
                    "variant": "trec_eval",
                    "value": None,
                    "n": 0,
                    "unit": "fraction",
                    "reason": reason,
                },
                {"metric": "P_1", "variant": "trec_eval", "value": None, "n": 0},
            ],
        },
    )
    rows = build_metrics_table([f], tmp_path).to_pylist()
    assert rows[0]["value"] is None and rows[0]["reason"] == reason and rows[0]["n"] == 0
    assert rows[1]["value"] is None and rows[1]["reason"] == "no value in the metric file"


def test_closed_and_oracle_cells_have_retriever_none_and_k_0(tmp_path: Path) -> None:
    files = [
        _write_cell(
            tmp_path,
            f"metrics/{s}",
            {
                "cell": {"stage": "generation", "setting": s, **extra},
                "metrics": [{"metric": "em", "value": 0.5, "unit": "fraction"}],
            },
        )
        for s, extra in (
            ("closed", {}),
            ("oracle", {"retriever": "none", "k": 0}),
            ("rag", {"retriever": "bm25", "k": 5}),
        )
    ]
    frame = build_metrics_table(files, tmp_path).to_pandas().set_index("setting")
    assert frame.loc["closed", "retriever"] == "none" and frame.loc["closed", "k"] == 0
    assert frame.loc["oracle", "retriever"] == "none" and frame.loc["oracle", "k"] == 0
    assert frame.loc["rag", "retriever"] == "bm25" and frame.loc["rag", "k"] == 5


def test_per_question_rows_carry_the_unit(results: Path) -> None:
    aggregate(find_metric_files(results), results / "m.parquet", results / "q.parquet", results_dir=results)
    frame = pd.read_parquet(results / "q.parquet")
    assert set(frame["unit"]) == {"fraction"}
    metrics = pd.read_parquet(results / "m.parquet")
    assert list(metrics.columns[metrics.columns.get_loc("value") :][:4]) == ["value", "unit", "n", "reason"]


def test_docs_given_are_typed_columns_null_where_unrecorded(tmp_path: Path) -> None:
    """A RAG@5 cell that gave 3, 5 and 5 documents (metrics.json provenance docs_given_*: min 3,
    mean 13/3, max 5) keeps them as int/float columns; a retrieval cell has them null."""
    root = tmp_path / "results"
    doc = {
        **GENERATION,
        "provenance": {**GENERATION["provenance"], "docs_given_min": 3, "docs_given_mean": 13 / 3, "docs_given_max": 5},
    }
    files = [
        _write_cell(root, "metrics/musique/dev/pipe/bm25/smollm2/cot/rag-k5", doc),
        _write_cell(root, "retrieval/musique/dev/pipe/bm25", RETRIEVAL),
    ]
    table = build_metrics_table(files, root)
    assert [table.schema.field(f"docs_given_{s}").type for s in ("min", "mean", "max")] == [
        pa.int64(),
        pa.float64(),
        pa.int64(),
    ]
    rows = {r["stage"]: r for r in table.to_pylist()}
    assert (rows["generation"]["docs_given_min"], rows["generation"]["docs_given_max"]) == (3, 5)
    assert rows["generation"]["docs_given_mean"] == pytest.approx(13 / 3)
    assert rows["retrieval"]["docs_given_mean"] is None
