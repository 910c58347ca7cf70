"""Paper-layout tables: ours / paper / Δ / OK|FAIL, missing cells shown as missing, plots render."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.report import plots
from cqabench.report.expected import load_expected
from cqabench.report.tables import (
    build_grid,
    caption,
    format_cell,
    render_tables,
    to_markdown,
)

REPO = Path(__file__).resolve().parents[2]


def _expected(tmp_path: Path, tables: list[dict]) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"paper": "Test paper", "tables": tables}))
    return path


METRICS = pd.DataFrame(
    [
        {
            "cell_id": "r/musique/bm25",
            "stage": "retrieval",
            "dataset": "musique",
            "retriever": "bm25",
            "metric": "ndcg_cut_10",
            "variant": "trec_eval",
            "value": 0.312,
            "k": None,
        },
        {
            "cell_id": "r/musique/dpr",
            "stage": "retrieval",
            "dataset": "musique",
            "retriever": "dpr",
            "metric": "ndcg_cut_10",
            "variant": "trec_eval",
            "value": 0.20,
            "k": None,
        },
        {
            "cell_id": "r/finqa/bm25",
            "stage": "retrieval",
            "dataset": "finqa",
            "retriever": "bm25",
            "metric": "ndcg_cut_10",
            "variant": "trec_eval",
            "value": 0.150,
            "k": None,
        },
        {
            "cell_id": "r/finqa/bm25",
            "stage": "retrieval",
            "dataset": "finqa",
            "retriever": "bm25",
            "metric": "recall_100",
            "variant": "trec_eval",
            "value": 0.9,
            "k": None,
        },
    ]
)

TABLE2 = {
    "id": "t2",
    "title": "nDCG@10",
    "metric": "ndcg_cut_10",
    "variant": "trec_eval",
    "rows": ["retriever"],
    "columns": ["dataset"],
    "tolerance": 0.02,
    "paper_unit": "percent",
    "order": {"retriever": ["dpr", "bm25"]},
    "cells": [
        {"retriever": "bm25", "dataset": "musique", "value": 30.0},  # Δ +0.012 -> OK
        {"retriever": "bm25", "dataset": "finqa", "value": 20.0},  # Δ -0.050 -> FAIL
        {"retriever": "colbertv2", "dataset": "musique", "value": 35.0},
    ],
}  # not run


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
    assert grid.summary() == {
        "id": "t2",
        "unit": "fraction",
        "tolerance": 0.02,
        "ok": 1,
        "fail": 1,
        "not_comparable": 0,
        "missing": 1,
        "not_available": 0,
        "ours_only": 1,
        "ambiguous": 0,
        "not_comparable_reasons": {},
    }


def test_markdown_and_html_written(tmp_path: Path) -> None:
    specs = load_expected(_expected(tmp_path, [TABLE2]))
    summaries = render_tables(METRICS, None, specs, tmp_path / "out", paper_data=True, config={})
    md = (tmp_path / "out" / "t2.md").read_text()
    assert "| retriever \\ dataset | musique | finqa |" in md or "| retriever \\ dataset | finqa | musique |" in md
    assert "0.150 / 0.200 (Δ-0.050) FAIL" in md and "— / 0.350 (missing)" in md  # no paper_setup: judged
    html = (tmp_path / "out" / "t2.html").read_text()
    assert "<table" in html and "FAIL" in html and "background:#f8d0d0" in html
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == summaries


def test_per_question_table_by_type(tmp_path: Path) -> None:
    per_q = pd.DataFrame(
        [
            {
                "cell_id": "c1",
                "dataset": "tanq",
                "llm": "m",
                "qid": "a",
                "question_type": "simple",
                "metric": "rms_f1",
                "value": 1.0,
            },
            {
                "cell_id": "c1",
                "dataset": "tanq",
                "llm": "m",
                "qid": "b",
                "question_type": "simple",
                "metric": "rms_f1",
                "value": 0.5,
            },
            {
                "cell_id": "c1",
                "dataset": "tanq",
                "llm": "m",
                "qid": "c",
                "question_type": "composition",
                "metric": "rms_f1",
                "value": 0.2,
            },
            {
                "cell_id": "c1",
                "dataset": "tanq",
                "llm": "m",
                "qid": "c",
                "question_type": "composition",
                "metric": "rms_recall",
                "value": 0.4,
            },
        ]
    )
    [spec] = load_expected(
        _expected(
            tmp_path,
            [
                {
                    "id": "t5",
                    "source": "per_question",
                    "metric": ["rms_recall", "rms_f1"],
                    "rows": ["question_type"],
                    "columns": ["metric"],
                    "filters": {"dataset": "tanq"},
                    "tolerance": 0.05,
                    "paper_unit": "fraction",
                    "cells": [{"question_type": "simple", "metric": "rms_f1", "value": 0.70}],
                }
            ],
        )
    )
    grid = build_grid(pd.DataFrame(), per_q, spec)
    simple = grid.cells[(("simple",), ("rms_f1",))]
    assert simple.ours == pytest.approx(0.75) and simple.status(0.05) == "OK"
    assert grid.cells[(("composition",), ("rms_recall",))].ours == pytest.approx(0.4)
    assert "simple" in to_markdown(grid)


def test_empty_fact_table_shows_paper_cells_as_missing(tmp_path: Path) -> None:
    [spec] = load_expected(_expected(tmp_path, [TABLE2]))
    grid = build_grid(pd.DataFrame(), None, spec)
    assert {c.status(0.02) for c in grid.cells.values()} == {"missing"}


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"]}, "tolerance"),
        ({"id": "x", "metric": ["m", "n"], "rows": ["a"], "columns": ["b"], "tolerance": 0.1}, "several metrics"),
        (
            {
                "id": "x",
                "metric": "m",
                "rows": ["a"],
                "columns": ["b"],
                "tolerance": 0.1,
                "paper_unit": "fraction",
                "cells": [{"a": 1}],
            },
            "value",
        ),
        (
            {
                "id": "x",
                "metric": "m",
                "rows": ["a"],
                "columns": ["b"],
                "tolerance": 0.1,
                "paper_unit": "fraction",
                "cells": [{"a": 1, "value": 2}],
            },
            "lacks",
        ),
        # A published number without its unit is ambiguous (0.2 or 20?).
        (
            {
                "id": "x",
                "metric": "m",
                "rows": ["a"],
                "columns": ["b"],
                "tolerance": 0.1,
                "cells": [{"a": 1, "b": 2, "value": 2}],
            },
            "paper_unit",
        ),
        (
            {"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"], "tolerance": 0.1, "paper_unit": "permille"},
            "paper_unit",
        ),
        (
            {"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"], "tolerance": 0.1, "paper_scale": 0.5},
            "paper_scale",
        ),
        (
            {
                "id": "x",
                "metric": "m",
                "rows": ["a"],
                "columns": ["b"],
                "tolerance": 0.1,
                "paper_scale": 0.01,
                "paper_unit": "percent",
            },
            "paper_unit only",
        ),
        ({"id": "x", "metric": "m", "rows": ["a"], "columns": ["b"], "tolerance": 0.1, "colums": []}, "unknown keys"),
    ],
)
def test_bad_expected_files_raise_config_error(tmp_path: Path, bad: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_expected(_expected(tmp_path, [bad]))


def test_shipped_expected_files_parse() -> None:
    ids = [s.id for p in sorted((REPO / "config" / "expected").glob("*.yaml")) for s in load_expected(p)]
    assert {
        "dexter_table2_ndcg10",
        "dexter_table7_recall100",
        "dexter_table3_answers",
        "tanq_table5_by_type",
        "strategyqa_recall10",
    } <= set(ids)


def test_old_paper_scale_still_reads_as_a_unit(tmp_path: Path) -> None:
    legacy = {**TABLE2, "paper_scale": 0.01}
    del legacy["paper_unit"]
    [spec] = load_expected(_expected(tmp_path, [legacy]))
    assert spec.paper_unit == "percent"
    assert build_grid(METRICS, None, spec).cells[(("bm25",), ("musique",))].paper == pytest.approx(0.30)
    [spec] = load_expected(_expected(tmp_path, [{**legacy, "paper_scale": 1}]))
    assert spec.paper_unit == "fraction"


def _cell_value(spec, dim: str):
    """A value a fact-table row can carry for one table dimension (a filter's value when it has one)."""
    if dim == "metric":
        return spec.metric[0]
    if dim in spec.filters:
        wanted = spec.filters[dim]
        return wanted[0] if isinstance(wanted, list) else wanted
    return 5 if dim == "k" else f"some-{dim}"


def _shipped_tables() -> list[dict]:
    out = []
    for path in sorted((REPO / "config" / "expected").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        out += [pytest.param(path.name, doc, t, id=t["id"]) for t in doc["tables"]]
    return out


@pytest.mark.parametrize("unit, printed", [("percent", 20.0), ("fraction", 0.2)])
@pytest.mark.parametrize("name, doc, table", _shipped_tables())
def test_identical_paper_number_is_ok_for_every_shipped_table(tmp_path: Path, name, doc, table, unit, printed) -> None:
    """ours 0.2 vs a paper that prints 20 (percent) or 0.2 (fraction): OK with Δ 0, for every table."""
    raw = {
        k: v for k, v in table.items() if k not in ("paper_unit", "paper_scale", "cells")
    }  # the shipped cells are replaced
    path = tmp_path / name
    spec_only = load_expected(_expected(tmp_path, [raw]))[0]
    cell = {d: _cell_value(spec_only, d) for d in spec_only.dimensions}
    path.write_text(
        yaml.safe_dump(
            {
                "paper": doc.get("paper", ""),
                "tables": [{**raw, "paper_unit": unit, "cells": [{**cell, "value": printed}]}],
            }
        )
    )
    [spec] = load_expected(path)
    row = {
        "cell_id": "c1",
        "stage": "generation",
        **{k: _cell_value(spec, k) for k in spec.filters},
        **cell,
        "metric": spec.metric[0],
        "variant": spec.variant or _cell_value(spec, "variant"),
    }
    if spec.source == "per_question":  # mean of the cell's per-question scores: (0.1 + 0.3) / 2
        per_q = pd.DataFrame([{**row, "qid": "a", "value": 0.1}, {**row, "qid": "b", "value": 0.3}])
        grid = build_grid(pd.DataFrame(), per_q, spec)
    else:
        grid = build_grid(pd.DataFrame([{**row, "value": 0.2}]), None, spec)
    [only] = grid.cells.values()
    assert only.ours == pytest.approx(0.2) and only.paper == pytest.approx(0.2)
    assert abs(only.diff) < 1e-12 and only.status(spec.tolerance) == "OK", (spec.id, only)
    assert grid.summary()["ok"] == 1 and grid.summary()["fail"] == 0
    assert "All numbers are fractions" in to_markdown(grid)


def test_not_evaluable_cells_show_na_with_the_reason(tmp_path: Path) -> None:
    reason = "no query of the split has a relevant qrel (qrels empty): nothing to evaluate"
    frame = pd.concat(
        [
            METRICS,
            pd.DataFrame(
                [
                    {
                        "cell_id": "r/ambigqa/bm25",
                        "stage": "retrieval",
                        "dataset": "ambigqa",
                        "retriever": "bm25",
                        "metric": "ndcg_cut_10",
                        "variant": "trec_eval",
                        "value": None,
                        "reason": reason,
                        "k": None,
                    }
                ]
            ),
        ],
        ignore_index=True,
    )
    table = {**TABLE2, "cells": TABLE2["cells"] + [{"retriever": "bm25", "dataset": "ambigqa", "value": 25.0}]}
    [spec] = load_expected(_expected(tmp_path, [table]))
    grid = build_grid(frame, None, spec)
    na = grid.cells[(("bm25",), ("ambigqa",))]
    assert na.ours is None and na.reason == reason and na.status(0.02) == "n/a"  # neither FAIL nor missing
    assert grid.summary()["not_available"] == 1 and grid.summary()["fail"] == 1  # finqa only
    assert format_cell(na, spec, 1) == "n/a [1] / 0.250 (n/a)"
    md = to_markdown(grid)
    assert "n/a [1] / 0.250 (n/a)" in md and f"[1] n/a: {reason}" in md and "0.000" not in md
    # Ours-only n/a (no paper number): just n/a and its note.
    [spec] = load_expected(_expected(tmp_path, [{**TABLE2, "cells": []}]))
    grid = build_grid(frame, None, spec)
    assert format_cell(grid.cells[(("bm25",), ("ambigqa",))], spec, 1) == "n/a [1]"
    html = render_tables(frame, None, [spec], tmp_path / "out") and (tmp_path / "out" / "t2.html").read_text()
    assert "n/a [1]" in html and "<li>n/a: no query of the split" in html


def test_heatmap_marks_na_and_picks_readable_text(tmp_path: Path) -> None:
    frame = pd.concat(
        [
            METRICS,
            pd.DataFrame(
                [
                    {
                        "cell_id": "r/ambigqa/bm25",
                        "stage": "retrieval",
                        "dataset": "ambigqa",
                        "retriever": "bm25",
                        "metric": "ndcg_cut_10",
                        "variant": "trec_eval",
                        "value": None,
                        "reason": "qrels empty",
                    }
                ]
            ),
        ],
        ignore_index=True,
    )
    grid, why = plots.heatmap_data(frame, reasons=True)
    assert grid.loc["bm25", "finqa"] == pytest.approx(0.15) and pd.isna(grid.loc["dpr", "finqa"])
    assert pd.isna(grid.loc["bm25", "ambigqa"]) and why.loc["bm25", "ambigqa"] == "qrels empty"
    assert not isinstance(why.loc["dpr", "finqa"], str)  # not run: no reason, drawn blank
    assert list(grid.columns) == ["ambigqa", "musique", "finqa"]  # DEXTER's order
    import matplotlib

    viridis = matplotlib.colormaps["viridis"]
    assert plots.text_colour(viridis(1.0)) == "black"  # yellow
    assert plots.text_colour(viridis(0.0)) == "white"  # dark purple
    plots.plot_heatmap(frame, tmp_path / "h.png")
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _generation_frames():
    """Per-question scores of one (dataset, llm, prompt): closed, RAG@1/@5 over two retrievers, oracle."""
    scores = {
        ("closed", "none", 0): [0, 0, 1, 0],
        ("rag", "bm25", 1): [0, 1, 1, 0],
        ("rag", "bm25", 5): [1, 1, 1, 0],
        ("rag", "dense", 5): [1, 0, 1, 0],
        ("oracle", "none", 0): [1, 1, 1, 1],
    }
    pq_rows, m_rows = [], []
    for (setting, retriever, k), values in scores.items():
        cell = {
            "cell_id": f"metrics/musique/train/pipe/{retriever}/m/p/{setting}-k{k}",
            "stage": "generation",
            "dataset": "musique",
            "split": "train",
            "serialization": "pipe",
            "llm": "m",
            "prompt": "p",
            "setting": setting,
            "retriever": retriever,
            "k": k,
        }
        for i, v in enumerate(values):
            pq_rows.append({**cell, "qid": f"q{i}", "metric": "cover_em", "variant": "default", "value": float(v)})
            pq_rows.append({**cell, "qid": f"q{i}", "metric": "parse_ok", "variant": "default", "value": 1.0})
        m_rows.append({**cell, "metric": "cover_em", "variant": "default", "value": sum(values) / 4, "n": 4})
    return pd.DataFrame(m_rows), pd.DataFrame(pq_rows), scores


def test_k_effect_data_by_hand() -> None:
    metrics, per_q, scores = _generation_frames()
    data = plots.k_effect_data(metrics, per_q)
    assert set(data["metric"]) == {"cover_em"} and set(data["unit"]) == {"fraction"}
    got = {(r.setting, r.retriever, r.k): r for r in data.itertuples()}
    assert set(got) == set(scores)
    assert got[("closed", "none", 0)].mean == pytest.approx(0.25)
    assert got[("rag", "bm25", 5)].mean == pytest.approx(0.75) and got[("rag", "bm25", 5)].n == 4
    assert got[("oracle", "none", 0)].ci_low == 1.0 and got[("oracle", "none", 0)].ci_high == 1.0  # all ones
    # [0, 1, 1, 0]: the mean of a resample is k/4, k ~ Binomial(4, 1/2), P(0) = P(4) = 1/16 > 2.5 %:
    # the percentile interval is (0, 1) (test_report_answers.py works it out)
    assert (got[("rag", "bm25", 1)].ci_low, got[("rag", "bm25", 1)].ci_high) == (0.0, 1.0)
    assert set(data["series"]) == {"m / p"}


def test_k_effect_without_per_question_scores_takes_the_fact_table() -> None:
    metrics, _, _ = _generation_frames()
    data = plots.k_effect_data(metrics)
    row = data[(data["setting"] == "rag") & (data["retriever"] == "bm25") & (data["k"] == 5)].iloc[0]
    assert row["mean"] == pytest.approx(0.75) and row["ci_low"] is None


def test_plots_write_png_with_and_without_data(tmp_path: Path) -> None:
    metrics, per_q, _ = _generation_frames()
    all_zero = per_q.assign(
        dataset="finqa",
        metric=per_q["metric"].replace({"cover_em": "em_tol"}),
        value=0.0,
        cell_id="f/" + per_q["cell_id"],
    )
    per_q = pd.concat([per_q, all_zero], ignore_index=True)
    tanq = pd.DataFrame(
        [
            {"dataset": "tanq", "llm": "m", "metric": "rms_f1", "value": 1.0, "skills": json.dumps(["a", "b"])},
            {"dataset": "tanq", "llm": "m", "metric": "rms_f1", "value": 0.0, "skills": json.dumps(["a"])},
        ]
    )
    skills = plots.skill_data(tanq)
    assert skills.loc["a"].iloc[0] == pytest.approx(0.5) and skills.loc["b"].iloc[0] == pytest.approx(1.0)
    drawn = {}
    for name, call in {
        "k.png": lambda p: plots.plot_k_effect(metrics, p, per_q, k_values=[1, 5, 10], svg=tmp_path / "k.svg"),
        "h.png": lambda p: plots.plot_heatmap(METRICS, p),
        "s.png": lambda p: plots.plot_skills(tanq, p),
        "e.png": lambda p: plots.plot_k_effect(pd.DataFrame(), p),
    }.items():
        drawn[name] = call(tmp_path / name).drawn
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn == {"k.png": True, "h.png": True, "s.png": True, "e.png": False}  # e: no cells, says so
    assert (tmp_path / "k.svg").read_text().lstrip().startswith("<?xml")


def test_skill_plot_reads_the_primary_rms_variant_only() -> None:
    # TANQ RMS comes in two readings per question; the plot keeps scoring.PRIMARY's (official)
    tanq = pd.DataFrame(
        [
            {
                "dataset": "tanq",
                "llm": "m",
                "metric": "rms_f1",
                "variant": "official",
                "value": 0.2,
                "skills": json.dumps(["a"]),
            },
            {
                "dataset": "tanq",
                "llm": "m",
                "metric": "rms_f1",
                "variant": "cqabench_parse",
                "value": 1.0,
                "skills": json.dumps(["a"]),
            },
        ]
    )
    assert plots.skill_data(tanq).loc["a"].iloc[0] == pytest.approx(0.2)  # not the mean 0.6


def test_k_effect_axis_range() -> None:
    assert plots._top([0.0, 0.0, None]) == 0.1  # all zero: [0, 0.1], not ±0.04
    # the axis starts below 0, so a closed-book line at 0 is drawn above the x axis, not inside it
    assert plots.y_range([0.0, None]) == pytest.approx((-0.004, 0.1)) and plots.y_range([0.9]) == (-0.04, 1.0)
    assert plots._top([0.31]) == 0.4 and plots._top([0.9]) == 1.0
    assert plots.retriever_colours(["dense", "bm25", "none"]) == {"bm25": plots.PALETTE[0], "dense": plots.PALETTE[1]}


def test_heatmap_cells_keep_unsearched_datasets_with_n_and_delta(tmp_path: Path) -> None:
    """A dataset with no retrieval cell stays as a dash, every value carries its n, Δ uses the paper."""
    frame = pd.concat(
        [
            METRICS.assign(n=[30, 30, 1, 1]),
            pd.DataFrame(
                [{"cell_id": "g/tanq", "stage": "generation", "dataset": "tanq", "metric": "rms_f1", "value": 0.1}]
            ),
        ],
        ignore_index=True,
    )
    cells = plots.heatmap_cells(frame, paper={("bm25", "musique"): 0.30})
    assert list(dict.fromkeys(cells["dataset"])) == ["musique", "finqa", "tanq"]
    by = {(r["retriever"], r["dataset"]): r for r in cells.to_dict("records")}
    assert by[("bm25", "finqa")]["n"] == 1 and by[("bm25", "finqa")]["value"] == pytest.approx(0.15)
    assert by[("bm25", "musique")]["delta"] == pytest.approx(0.012)
    assert pd.isna(by[("bm25", "finqa")]["delta"])  # no paper number for that pair
    assert np.isnan(by[("dpr", "tanq")]["value"]) and by[("dpr", "tanq")]["reason"] == plots.NOT_SEARCHED
    assert plots.metric_name("ndcg_cut_10") == "nDCG@10" and plots.metric_name("recall_100") == "Recall@100"


def test_heatmap_paper_numbers_come_from_the_shipped_table2() -> None:
    specs = load_expected(REPO / "config" / "expected" / "dexter.yaml")
    paper, name = plots.heatmap_paper(specs, "ndcg_cut_10")
    assert name == "DEXTER Table 2"
    assert paper[("bm25", "2wikimultihopqa")] == pytest.approx(0.327)


def test_text_colour_follows_wcag_contrast() -> None:
    """Black on every viridis colour lighter than mid-teal, white on the dark purples; each pick
    has the higher contrast ratio of the two."""
    import matplotlib

    viridis = matplotlib.colormaps["viridis"]
    for x in np.linspace(0, 1, 21):
        colour = viridis(x)
        lum = plots.luminance(colour)
        best = "black" if plots.contrast(lum, 0.0) >= plots.contrast(lum, 1.0) else "white"
        assert plots.text_colour(colour) == best
        assert max(plots.contrast(lum, 0.0), plots.contrast(lum, 1.0)) >= 4.5  # WCAG AA for small text
    assert plots.text_colour((1.0, 1.0, 0.0)) == "black" and plots.text_colour((0.27, 0.0, 0.33)) == "white"
    assert plots.luminance((1, 1, 1)) == pytest.approx(1.0) and plots.luminance((0, 0, 0)) == 0.0


def test_each_table_caption_is_its_own(tmp_path: Path) -> None:
    """The caption names the table, our n and split per dataset, and explains only the formats shown."""
    frame = METRICS.assign(n=[30, 30, 1, 1], split=["train", "train", "dev", "dev"])
    [spec] = load_expected(_expected(tmp_path, [TABLE2]))
    grid = build_grid(frame, None, spec)
    text = " ".join(caption(grid, run="sample"))
    assert text.startswith("nDCG@10. Compares our ndcg_cut_10 (one value per cell)")
    assert "finqa dev n=1" in text and "musique train n=30" in text
    assert "OK when |Δ| ≤ 0.02" in text and "(missing)" in text
    assert "'paper x'" not in text and "n/a [i]" not in text  # formats this table does not show
    assert "config 'sample', not from the paper's data" in text
    assert "Caveat" not in " ".join(caption(grid, run="dexter", paper_data=True))
    render_tables(frame, None, [spec], tmp_path / "out", run="sample")
    rst = (tmp_path / "out" / "t2.caption.rst").read_text()
    # reST markup characters escaped; on the sample (paper_data false) no cell is judged
    assert "finqa dev n=1" in rst and "ndcg\\_cut\\_10" in rst and "OK\\|FAIL" not in rst
    assert "not comparable [i]" in rst and "no cell is judged" in rst


def _retrieval_rows(value: float = 0.3) -> pd.DataFrame:
    """BM25 and SPLADE nDCG@10 on MuSiQue, TAT-QA (dev) and FinQA (test), as config/dexter.yaml runs them."""
    return pd.DataFrame(
        [
            {
                "cell_id": f"retrieval/{ds}/{split}/pipe/{r}",
                "stage": "retrieval",
                "dataset": ds,
                "split": split,
                "retriever": r,
                "metric": "ndcg_cut_10",
                "variant": "trec_eval",
                "value": value,
                "n": 10,
                "k": None,
                "relevance": "paper",
            }
            for ds, split in (("musique", "dev"), ("tatqa", "dev"), ("finqa", "test"))
            for r in ("bm25", "splade")
        ]
    )


def test_heatmap_marks_cells_table2_marks_not_comparable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36 item 10: the heatmap printed Δ to DEXTER Table 2 where Table 2 itself says "not
    comparable". Now a cell gets a Δ exactly where the table judges it comparable: on
    config/dexter.yaml BM25 on FinQA only (Δ 0.3 − paper), not MuSiQue (its qrels, issue 34 item 4),
    not TAT-QA (its corpus) nor any SPLADE cell (its scoring); on the sample (report.paper_data
    false) no cell at all."""
    from cqabench.report.comparability import SAMPLE, RunContext

    specs = load_expected(REPO / "config" / "expected" / "dexter.yaml")
    paper, _ = plots.heatmap_paper(specs)
    metrics = _retrieval_rows()
    full = RunContext.of(yaml.safe_load((REPO / "config" / "dexter.yaml").read_text()))
    apart = plots.heatmap_not_comparable(metrics, specs, run=full)
    grid = build_grid(metrics, None, plots.heatmap_spec(specs), full)
    assert apart == {(r[0], c[0]): cell.not_comparable for (r, c), cell in grid.cells.items() if cell.not_comparable}
    cells = {
        (r["retriever"], r["dataset"]): r
        for r in plots.heatmap_cells(metrics, paper=paper, not_comparable=apart).to_dict("records")
    }
    assert cells[("bm25", "finqa")]["delta"] == pytest.approx(0.3 - paper[("bm25", "finqa")])
    assert pd.isna(cells[("bm25", "finqa")]["not_comparable"])
    for key in (
        ("bm25", "musique"),
        ("bm25", "tatqa"),
        ("splade", "musique"),
        ("splade", "tatqa"),
        ("splade", "finqa"),
    ):
        assert pd.isna(cells[key]["delta"]) and cells[key]["not_comparable"] == apart[key]
    assert "TAT-QA corpus" in cells[("bm25", "tatqa")]["not_comparable"]
    assert cells[("bm25", "musique")]["not_comparable"].startswith("MuSiQue qrels are each question's own paragraphs")
    assert "SPLADE is scored by the dot product" in cells[("splade", "musique")]["not_comparable"]  # both reasons

    sample = plots.heatmap_not_comparable(metrics, specs, run=RunContext.of({"name": "sample"}))
    assert set(sample.values()) == {SAMPLE} and len(sample) == 6
    assert plots.heatmap_not_comparable(metrics, specs, run=None) == {}  # no run given: nothing judged

    drawn: list[str] = []  # what the figure writes: every text of its axes, title and notes
    real_save = plots._save

    def capture(fig, path, svg=None):
        drawn.extend(t.get_text() for ax in fig.axes for t in [*ax.texts, ax.title, ax.xaxis.label])
        real_save(fig, path, svg)

    monkeypatch.setattr(plots, "_save", capture)
    plots.plot_heatmap(metrics, tmp_path / "h.png", paper=paper, paper_name="DEXTER Table 2", not_comparable=sample)
    cell_texts = [t for t in drawn if t.startswith("0.300")]
    assert len(cell_texts) == 6 and all("Δ" not in t and t.endswith("n.c. [1]") for t in cell_texts)
    assert any(f"[1] not comparable with DEXTER Table 2: {SAMPLE}" in t for t in drawn)
    drawn.clear()
    plots.plot_heatmap(metrics, tmp_path / "h2.png", paper=paper, paper_name="DEXTER Table 2", not_comparable=apart)
    musique = [t for t in drawn if t.startswith("0.300")]
    assert sum("Δ" in t for t in musique) == 1 and sum("n.c." in t for t in musique) == 5
