"""Paper-layout tables: ours / paper / Δ / OK|FAIL, missing cells shown as missing, plots render."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cqabench.errors import ConfigError
from cqabench.report import plots
from cqabench.report.expected import load_expected
from cqabench.report.tables import build_grid, format_cell, render_tables, to_markdown

REPO = Path(__file__).resolve().parents[1]


def _expected(tmp_path: Path, tables: list[dict]) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"paper": "Test paper", "tables": tables}))
    return path


METRICS = pd.DataFrame([
    {"cell_id": "r/musique/bm25", "stage": "retrieval", "dataset": "musique", "retriever": "bm25",
     "metric": "ndcg_cut_10", "variant": "trec_eval", "value": 0.312, "k": None},
    {"cell_id": "r/musique/dpr", "stage": "retrieval", "dataset": "musique", "retriever": "dpr",
     "metric": "ndcg_cut_10", "variant": "trec_eval", "value": 0.20, "k": None},
    {"cell_id": "r/finqa/bm25", "stage": "retrieval", "dataset": "finqa", "retriever": "bm25",
     "metric": "ndcg_cut_10", "variant": "trec_eval", "value": 0.150, "k": None},
    {"cell_id": "r/finqa/bm25", "stage": "retrieval", "dataset": "finqa", "retriever": "bm25",
     "metric": "recall_100", "variant": "trec_eval", "value": 0.9, "k": None},
])

TABLE2 = {"id": "t2", "title": "nDCG@10", "metric": "ndcg_cut_10", "variant": "trec_eval",
          "rows": ["retriever"], "columns": ["dataset"], "tolerance": 0.02, "paper_scale": 0.01,
          "order": {"retriever": ["dpr", "bm25"]},
          "cells": [{"retriever": "bm25", "dataset": "musique", "value": 30.0},    # Δ +0.012 -> OK
                    {"retriever": "bm25", "dataset": "finqa", "value": 20.0},      # Δ -0.050 -> FAIL
                    {"retriever": "colbertv2", "dataset": "musique", "value": 35.0}]}  # not run


def test_grid_compares_within_tolerance(tmp_path: Path) -> None:
    [spec] = load_expected(_expected(tmp_path, [TABLE2]))
    grid = build_grid(METRICS, None, spec)
    assert grid.row_keys == [("dpr",), ("bm25",), ("colbertv2",)]  # YAML order first, then sorted
    ok = grid.cells[(("bm25",), ("musique",))]
    assert ok.ours == pytest.approx(0.312) and ok.paper == pytest.approx(0.30)
    assert ok.diff == pytest.approx(0.012) and ok.status(0.02) == "OK"
    fail = grid.cells[(("bm25",), ("finqa",))]
    assert fail.diff == pytest.approx(-0.05) and fail.status(0.02) == "FAIL"
    missing = grid.cells[(("colbertv2",), ("musique",))]
    assert missing.ours is None and missing.status(0.02) == "missing"
    assert format_cell(missing, spec) == "— / 0.350 (missing)"
    assert format_cell(ok, spec) == "0.312 / 0.300 (Δ+0.012) OK"
    assert format_cell(grid.cells[(("dpr",), ("musique",))], spec) == "0.200"  # ours only
    assert grid.summary() == {"id": "t2", "tolerance": 0.02, "ok": 1, "fail": 1, "missing": 1,
                              "ours_only": 1, "ambiguous": 0}


def test_markdown_and_html_written(tmp_path: Path) -> None:
    specs = load_expected(_expected(tmp_path, [TABLE2]))
    summaries = render_tables(METRICS, None, specs, tmp_path / "out")
    md = (tmp_path / "out" / "t2.md").read_text()
    assert "| retriever \\ dataset | musique | finqa |" in md or "| retriever \\ dataset | finqa | musique |" in md
    assert "0.150 / 0.200 (Δ-0.050) FAIL" in md and "— / 0.350 (missing)" in md
    html = (tmp_path / "out" / "t2.html").read_text()
    assert "<table" in html and "FAIL" in html and "background:#f8d0d0" in html
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == summaries


def test_per_question_table_by_type(tmp_path: Path) -> None:
    per_q = pd.DataFrame([
        {"cell_id": "c1", "dataset": "tanq", "llm": "m", "qid": "a", "question_type": "simple", "metric": "rms_f1", "value": 1.0},
        {"cell_id": "c1", "dataset": "tanq", "llm": "m", "qid": "b", "question_type": "simple", "metric": "rms_f1", "value": 0.5},
        {"cell_id": "c1", "dataset": "tanq", "llm": "m", "qid": "c", "question_type": "composition", "metric": "rms_f1", "value": 0.2},
        {"cell_id": "c1", "dataset": "tanq", "llm": "m", "qid": "c", "question_type": "composition", "metric": "rms_recall", "value": 0.4},
    ])
    [spec] = load_expected(_expected(tmp_path, [{
        "id": "t5", "source": "per_question", "metric": ["rms_recall", "rms_f1"], "rows": ["question_type"],
        "columns": ["metric"], "filters": {"dataset": "tanq"}, "tolerance": 0.05,
        "cells": [{"question_type": "simple", "metric": "rms_f1", "value": 0.70}]}]))
    grid = build_grid(pd.DataFrame(), per_q, spec)
    simple = grid.cells[(("simple",), ("rms_f1",))]
    assert simple.ours == pytest.approx(0.75) and simple.status(0.05) == "OK"
    assert grid.cells[(("composition",), ("rms_recall",))].ours == pytest.approx(0.4)
    assert "simple" in to_markdown(grid)


def test_empty_fact_table_shows_paper_cells_as_missing(tmp_path: Path) -> None:
    [spec] = load_expected(_expected(tmp_path, [TABLE2]))
    grid = build_grid(pd.DataFrame(), None, spec)
    assert {c.status(0.02) for c in grid.cells.values()} == {"missing"}


@pytest.mark.parametrize("bad, message", [
    ({"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"]}, "tolerance"),
    ({"id": "x", "metric": ["m", "n"], "rows": ["a"], "columns": ["b"], "tolerance": 0.1}, "several metrics"),
    ({"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"], "tolerance": 0.1, "cells": [{"a": 1}]}, "value"),
    ({"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"], "tolerance": 0.1, "cells": [{"a": 1, "value": 2}]}, "lacks"),
    ({"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"], "tolerance": 0.1, "colums": []}, "unknown keys"),
])
def test_bad_expected_files_raise_config_error(tmp_path: Path, bad: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_expected(_expected(tmp_path, [bad]))


def test_shipped_expected_files_parse() -> None:
    ids = [s.id for p in sorted((REPO / "config" / "expected").glob("*.yaml")) for s in load_expected(p)]
    assert {"dexter_table2_ndcg10", "dexter_table7_recall100", "dexter_table3_answers",
            "tanq_table5_by_type", "strategyqa_recall10"} <= set(ids)


def test_plots_write_png_with_and_without_data(tmp_path: Path) -> None:
    gen = pd.DataFrame([
        {"stage": "generation", "dataset": "musique", "llm": "m", "prompt": "cot", "retriever": "bm25",
         "setting": "rag", "k": k, "metric": "cover_em", "value": v}
        for k, v in ((1, 0.2), (5, 0.3), (10, 0.25))])
    data = plots.k_effect_data(gen)
    assert list(data["musique"]["value"]) == [0.2, 0.3, 0.25] and data["musique"].attrs["metric"] == "cover_em"
    grid = plots.heatmap_data(pd.concat([METRICS.assign(stage="retrieval")]))
    assert grid.loc["bm25", "finqa"] == pytest.approx(0.15) and pd.isna(grid.loc["dpr", "finqa"])
    per_q = pd.DataFrame([
        {"dataset": "tanq", "llm": "m", "metric": "rms_f1", "value": 1.0, "skills": json.dumps(["a", "b"])},
        {"dataset": "tanq", "llm": "m", "metric": "rms_f1", "value": 0.0, "skills": json.dumps(["a"])}])
    skills = plots.skill_data(per_q)
    assert skills.loc["a"].iloc[0] == pytest.approx(0.5) and skills.loc["b"].iloc[0] == pytest.approx(1.0)
    for name, call in {"k.png": lambda p: plots.plot_k_effect(gen, p), "h.png": lambda p: plots.plot_heatmap(METRICS, p),
                       "s.png": lambda p: plots.plot_skills(per_q, p), "e.png": lambda p: plots.plot_k_effect(pd.DataFrame(), p)}.items():
        call(tmp_path / name)
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
