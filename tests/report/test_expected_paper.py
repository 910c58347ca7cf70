"""config/expected/*.yaml against the papers' own tables (tests/fixtures/paper/*.yaml: the workplace's
../shared/paper transcriptions, vendored; transcribed as printed).

Every published value there must be in our expected files at the cell it belongs to (so none is
mistyped or dropped), and every published cell of ours must come from there (none invented). A
fabricated result equal to a paper value reads OK; one off by more than the table's tolerance
reads FAIL.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.report.comparability import RunContext
from cqabench.report.expected import PAPER_LABELS, load_expected, our_name, paper_label
from cqabench.report.tables import build_grid, format_cell, tanq_type, to_markdown

REPO = Path(__file__).resolve().parents[2]
PAPER_DIR = REPO / "tests" / "fixtures" / "paper"  # copies of ../shared/paper/*.yaml (tests/fixtures/README.md)
EXPECTED = REPO / "config" / "expected"

# Transcribed tables we deliberately do not carry, and why (a new table in shared/paper must be
# carried or listed here).
NOT_CARRIED = {
    ("dexter", "table1_statistics"): "dataset sizes, not results: docs/fidelity.md compares them with our splits",
}
TANQ_GROUP = {
    "table5_by_question_type": ("tanq_table5_by_type", "tanq_type"),
    "table6_by_skill": ("tanq_table6_by_skill", "skill"),
    "table7_by_number_of_skills": ("tanq_table7_by_n_skills", "n_skills"),
    "table8_by_number_of_relations": ("tanq_table8_by_n_relations", "n_relations"),
    "table9_by_answer_table_length": ("tanq_table9_by_table_length", "table_length"),
}
METRIC = {"c-EM": "cover_em", "F1_Ans": "f1_ans", "EM-Tol": "em_tol"}
RMS = ("rms_precision", "rms_recall", "rms_f1")


def _paper(name: str) -> dict:
    return _read_yaml(PAPER_DIR / f"{name}.yaml")


@cache
def _read_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@cache
def _specs(name: str) -> dict:
    return {s.id: s for s in load_expected(EXPECTED / f"{name}.yaml")}


def _key(spec, cell: dict) -> tuple:
    return spec.key_of({k: v for k, v in cell.items() if k != "value"})


def _table3_row(label: str) -> dict:
    """'rag-oracle / few-shot-cot / Mistral-7b' -> our cell dimensions."""
    parts = [p.strip() for p in label.split("/")]
    if parts[0] == "supervised baseline":
        return {"llm": "supervised-baseline", "prompt": "none", "setting": "supervised", "retriever": "none", "k": 0}
    setting = our_name("dexter", "setting", parts[0])
    llm = our_name("dexter", "llm", parts[2]) if len(parts) > 2 else "gpt-3.5-turbo"
    retriever, k = ("colbertv2", 10) if setting == "rag" else ("none", 0)  # Table 3's RAG rows: ColBERTv2 top-10
    return {
        "llm": llm,
        "prompt": our_name("dexter", "prompt", parts[1]),
        "setting": setting,
        "retriever": retriever,
        "k": k,
    }


def _tanq_row(label: str) -> dict:
    setting, llm = (p.strip() for p in label.split("/"))
    llm = our_name("tanq", "llm", llm)
    return {
        "setting": our_name("tanq", "setting", setting),
        "llm": llm,
        "prompt": "tools" if llm == "tool-lm" else "none" if llm == "human" else "few-shot",
    }


def published_cells() -> list[tuple[str, str, dict, float]]:
    """(expected file, table id, our cell dimensions, value as printed) of every value in shared/paper."""
    return _published_cells()


@cache
def _published_cells() -> list[tuple[str, str, dict, float]]:
    out = []
    dx, tq, sq = _paper("dexter"), _paper("tanq"), _paper("strategyqa")
    for key, tid in (("table2_ndcg10", "dexter_table2_ndcg10"), ("table7_recall100", "dexter_table7_recall100")):
        t = dx[key]
        for row, values in t["rows"].items():
            for col, v in zip(t["columns"], values, strict=True):
                if v is not None:
                    out.append(
                        (
                            "dexter",
                            tid,
                            {
                                "retriever": our_name("dexter", "retriever", row),
                                "dataset": our_name("dexter", "dataset", col),
                            },
                            v,
                        )
                    )
    t = dx["table3_answers"]
    for row, values in t["rows"].items():
        for col, metric, v in zip(t["columns"], t["metrics"], values, strict=True):
            if v is not None:
                out.append(
                    (
                        "dexter",
                        "dexter_table3_answers",
                        {**_table3_row(row), "dataset": our_name("dexter", "dataset", col), "metric": METRIC[metric]},
                        v,
                    )
                )
    t = dx["table8_open_models_oracle_few_shot_cot"]
    for row, values in t["rows"].items():
        llm = "supervised-baseline" if row == "supervised baseline" else our_name("dexter", "llm", row)
        for col, metric, v in zip(t["columns"], t["metrics"], values, strict=True):
            if v is not None:
                out.append(
                    (
                        "dexter",
                        "dexter_table8_open_models",
                        {"llm": llm, "dataset": our_name("dexter", "dataset", col), "metric": METRIC[metric]},
                        v,
                    )
                )
    for key, (tid, dim) in TANQ_GROUP.items():
        t = tq[key]
        for row, groups in t["rows"].items():
            for group, prf in zip(t["groups"], groups, strict=True):
                if prf is None:
                    continue
                value = our_name("tanq", dim, group)
                for metric, v in zip(RMS, prf, strict=True):
                    if v is not None:
                        out.append(("tanq", tid, {**_tanq_row(row), dim: value, "metric": metric}, v))
    t = tq["table10_failure_types"]  # rows: failure types; columns: oracle models and the open-book Tool LM
    for row, values in t["rows"].items():
        for col, v in zip(t["columns"], values, strict=True):
            setting = "open-book" if col == "Tool LM" else "oracle"
            out.append(
                (
                    "tanq",
                    "tanq_table10_failures",
                    {**_tanq_row(f"{setting} / {col}"), "metric": our_name("tanq", "metric", row)},
                    v,
                )
            )
    t = sq["table9_recall10"]
    for row, v in {**t["rows"], **t["human_experts_100_questions"]}.items():
        out.append(
            (
                "strategyqa",
                "strategyqa_recall10",
                {"retriever": our_name("strategyqa", "retriever", row), "dataset": "strategyqa"},
                v,
            )
        )
    return out


def test_every_transcribed_table_is_carried_or_excused() -> None:
    carried = {
        ("dexter", k)
        for k in ("table2_ndcg10", "table7_recall100", "table3_answers", "table8_open_models_oracle_few_shot_cot")
    }
    carried |= {("tanq", k) for k in TANQ_GROUP} | {
        ("tanq", "table10_failure_types"),
        ("strategyqa", "table9_recall10"),
    }
    for name in ("dexter", "tanq", "strategyqa"):
        tables = {k for k, v in _paper(name).items() if isinstance(v, dict) and ("rows" in v)}
        assert tables == {k for n, k in carried | set(NOT_CARRIED) if n == name}, name


def test_every_paper_value_is_in_our_expected_files_at_its_cell() -> None:
    specs = {name: _specs(name) for name in ("dexter", "tanq", "strategyqa")}
    expected = [(name, tid, cell) for name, tid, cell, _ in published_cells()]
    assert len(expected) == 56 + 56 + 71 + 28 + 87 + 147 + 57 + 84 + 63 + 36 + 5
    for name, tid, cell, value in published_cells():
        spec = specs[name][tid]
        ours = {_key(spec, c): c["value"] for c in spec.cells}
        key = spec.key_of(cell)
        assert key in ours, (tid, cell)
        assert float(ours[key]) == float(value), (tid, cell, ours[key], value)


def test_no_published_cell_of_ours_is_invented() -> None:
    """The converse: every cell in config/expected is a value of shared/paper (same count, same keys)."""
    paper = {}
    for name, tid, cell, value in published_cells():
        spec = _specs(name)[tid]
        paper[(tid, spec.key_of(cell))] = value
    for name in ("dexter", "tanq", "strategyqa"):
        for tid, spec in _specs(name).items():
            keys = [_key(spec, c) for c in spec.cells]
            assert len(keys) == len(set(keys)), f"{tid}: a cell is listed twice"
            for cell, key in zip(spec.cells, keys):
                assert (tid, key) in paper, (tid, cell)
                assert float(cell["value"]) == float(paper[(tid, key)])


def test_percent_is_converted_once_on_read() -> None:
    t3 = _specs("dexter")["dexter_table3_answers"]
    cell = {
        "llm": "gpt-3.5-turbo",
        "prompt": "few-shot-cot",
        "setting": "rag",
        "retriever": "colbertv2",
        "k": 10,
        "dataset": "ottqa",
        "metric": "cover_em",
    }
    printed = next(v for n, tid, c, v in published_cells() if tid == t3.id and c == cell)
    assert t3.paper_unit == "percent" and t3.published()[t3.key_of(cell)] == pytest.approx(printed / 100)
    t2 = _specs("dexter")["dexter_table2_ndcg10"]
    assert t2.paper_unit == "fraction"
    assert t2.published()[t2.key_of({"retriever": "bm25", "dataset": "2wikimultihopqa"})] == pytest.approx(0.327)
    for name in ("dexter", "tanq", "strategyqa"):
        for spec in _specs(name).values():
            assert all(0 <= v <= 1 for v in spec.published().values()), spec.id


def _fabricated(spec, cell: dict, value: float) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """A fact-table row (or two per-question rows averaging to `value`) that lands in `cell`."""
    row = {
        "cell_id": "c1",
        "stage": "x",
        **{k: (v[0] if isinstance(v, list) else v) for k, v in spec.filters.items()},
        **{k: v for k, v in cell.items() if k != "value"},
        "variant": spec.variant or "default",
        "metric": cell.get("metric", spec.metric[0]),
        "unit": "fraction",
    }
    if spec.source == "per_question":
        return pd.DataFrame(), pd.DataFrame(
            [{**row, "qid": "a", "value": value - 0.01}, {**row, "qid": "b", "value": value + 0.01}]
        )
    return pd.DataFrame([{**row, "value": value}]), None


def _all_specs():
    return [pytest.param(s, id=s.id) for name in ("dexter", "tanq", "strategyqa") for s in _specs(name).values()]


@pytest.mark.parametrize("spec", _all_specs())
def test_a_result_equal_to_the_paper_is_ok_and_one_beyond_the_tolerance_fails(spec) -> None:
    # A cell of every table: ours exactly the paper's, then just inside and just outside the tolerance.
    cell = spec.cells[0]
    paper = float(cell["value"]) * spec.paper_factor
    key = _key(spec, cell)
    for ours, status in (
        (paper, "OK"),
        (paper + spec.tolerance - 0.002, "OK"),
        (paper + spec.tolerance + 0.002, "FAIL"),
        (paper - spec.tolerance - 0.002, "FAIL"),
    ):
        metrics, per_q = _fabricated(spec, cell, ours)
        grid = build_grid(metrics, per_q, spec)
        got = grid.cells[key]
        assert got.ours == pytest.approx(ours) and got.paper == pytest.approx(paper), spec.id
        assert got.status(spec.tolerance) == status, (spec.id, ours, paper)
        assert status in format_cell(got, spec)


def test_paper_only_rows_print_as_reference_not_missing() -> None:
    spec = _specs("tanq")["tanq_table5_by_type"]
    grid = build_grid(pd.DataFrame(), None, spec)
    cell = grid.cells[
        spec.key_of({"setting": "oracle", "llm": "gpt4", "prompt": "few-shot", "tanq_type": "all", "metric": "rms_f1"})
    ]
    assert cell.status(spec.tolerance) == "" and format_cell(cell, spec) == "paper 0.291"
    assert grid.summary()["missing"] == 0
    dexter = _specs("dexter")["dexter_table2_ndcg10"]
    assert build_grid(pd.DataFrame(), None, dexter).summary()["missing"] == 56  # ours to run: missing, not reference


def test_our_tanq_rows_sit_beside_the_papers() -> None:
    spec = _specs("tanq")["tanq_table5_by_type"]
    per_q = pd.DataFrame(
        [
            {
                "cell_id": "c",
                "dataset": "tanq",
                "setting": "closed",
                "llm": "smollm2-135m",
                "prompt": "few-shot",
                "qid": q,
                "metric": "rms_f1",
                "variant": "official",
                "value": v,
                "question_type": qt,
                "skills": None,
            }
            for q, v, qt in (
                ("a", 1.0, "wikidata_comp"),
                ("b", 0.5, "wikitables_composition"),
                ("c", 0.0, "wikidata_intersection"),
            )
        ]
    )
    grid = build_grid(pd.DataFrame(), per_q, spec)
    ours = ("closed", "smollm2-135m", "few-shot")
    assert grid.cells[(ours, ("composition", "rms_f1"))].ours == pytest.approx(0.75)  # both composition kinds pooled
    assert grid.cells[(ours, ("all", "rms_f1"))].ours == pytest.approx(0.5)
    assert ("closed", "gpt4", "few-shot") in grid.row_keys and ours in grid.row_keys
    md = to_markdown(grid)
    assert "closed book / GPT4 / few-shot" in md and "closed book / smollm2-135m / few-shot" in md
    assert tanq_type("wikitables_simple") == "simple" and tanq_type("wikidata_intersection") == "intersection"


def test_names_map_to_the_papers_labels_in_one_place() -> None:
    assert paper_label("dexter", "dataset", "2wikimultihopqa") == "WQA"
    assert paper_label("dexter", "dataset", "musique") == "MQA"
    assert paper_label("dexter", "setting", "oracle") == "RAG-Oracle"
    assert our_name("dexter", "retriever", "SPLADEV2") == our_name("dexter", "retriever", "SPLADE") == "splade"
    assert our_name("dexter", "setting", "rag-oracle") == "oracle"
    with pytest.raises(ConfigError, match="PAPER_LABELS"):
        our_name("dexter", "retriever", "BM42")
    # Every retriever and dataset of the full config has a paper label; no shipped table renames
    # values on its own (the mapping lives only in PAPER_LABELS).
    config = yaml.safe_load((REPO / "config" / "dexter.yaml").read_text())
    for name in config["retrieval"]["retrievers"]:
        assert name in PAPER_LABELS["dexter"]["retriever"], name
    for name in config["retrieval"]["datasets"]:
        assert name in PAPER_LABELS["dexter"]["dataset"], name
    for path in EXPECTED.glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        assert doc.get("label_set") in PAPER_LABELS, path
        assert all("labels" not in t for t in doc["tables"]), path


def test_default_report_shows_the_paper_beside_ours_with_the_sample_note(tmp_path: Path) -> None:
    """Cells shaped like the embedded default's (BM25 on the sample; SmolLM2 few-shot, closed / RAG / oracle)."""
    metrics = pd.DataFrame(
        [
            {
                "cell_id": "r1",
                "stage": "retrieval",
                "dataset": "tatqa",
                "split": "dev",
                "retriever": "bm25",
                "metric": "ndcg_cut_10",
                "variant": "trec_eval",
                "value": 0.5,
                "unit": "fraction",
                "n": 240,
            },
            {
                "cell_id": "g1",
                "stage": "generation",
                "dataset": "tatqa",
                "split": "dev",
                "retriever": "none",
                "k": 0,
                "llm": "smollm2-135m",
                "prompt": "few-shot",
                "setting": "oracle",
                "metric": "cover_em",
                "variant": "default",
                "value": 0.1,
                "unit": "fraction",
                "n": 30,
            },
        ]
    )
    specs = _specs("dexter")
    sample = RunContext.of({"name": "default", "datasets": {"tatqa": {"splits": ["dev"]}}})  # paper_data false
    md2 = to_markdown(build_grid(metrics, None, specs["dexter_table2_ndcg10"], sample), run="default")
    # ours beside the paper's Tat-QA BM25, not judged: the sample is not the paper's data
    assert "0.500 / 0.432 (not comparable [1])" in md2 and ") FAIL" not in md2 and ") OK" not in md2
    assert "[1] not comparable: bundled sample, not the paper's data (report.paper_data: false)" in md2
    assert "bundled sample" in md2 and "not the paper's data" in md2
    assert md2.index("bundled sample") < md2.index("| retriever")  # the note comes before the table
    md3 = to_markdown(build_grid(metrics, None, specs["dexter_table3_answers"], sample))
    assert "smollm2-135m / few-shot / RAG-Oracle / - / 0" in md3 and "gpt-3.5-turbo / few-shot / RAG-Oracle" in md3
    assert "WQA = 2wikimultihopqa" in md3  # labels explained


def test_tables_8_and_9_group_by_the_gold_tables_shape() -> None:
    # Relations = gold columns - 1, in the paper's groups read as upper bounds; length = gold rows.
    per_q = pd.DataFrame(
        [
            {
                "cell_id": "c",
                "dataset": "tanq",
                "setting": "closed",
                "llm": "m",
                "prompt": "few-shot",
                "qid": q,
                "metric": "rms_f1",
                "variant": "official",
                "value": v,
                "question_type": "wikidata_comp",
                "skills": None,
                "answer_columns": cols,
                "answer_rows": rows,
            }
            for q, v, cols, rows in (("a", 1.0, 2, 3), ("b", 0.5, 4, 4), ("c", 0.0, 3, 7), ("d", 0.2, 9, 16))
        ]
    )
    ours = ("closed", "m", "few-shot")
    t8 = build_grid(pd.DataFrame(), per_q, _specs("tanq")["tanq_table8_by_n_relations"])
    assert t8.cells[(ours, ("1", "rms_f1"))].ours == pytest.approx(1.0)  # a: 1 relation
    assert t8.cells[(ours, ("3", "rms_f1"))].ours == pytest.approx(0.25)  # b (3) and c (2): up to three
    assert t8.cells[(ours, ("10", "rms_f1"))].ours == pytest.approx(0.2)  # d: 8 relations
    assert (ours, ("5", "rms_f1")) not in t8.cells
    t9 = build_grid(pd.DataFrame(), per_q, _specs("tanq")["tanq_table9_by_table_length"])
    assert t9.cells[(ours, ("short", "rms_f1"))].ours == pytest.approx(1.0)
    assert t9.cells[(ours, ("medium", "rms_f1"))].ours == pytest.approx(0.5)
    assert t9.cells[(ours, ("long", "rms_f1"))].ours == pytest.approx(0.1)  # c and d
    assert not t8.notes and not t9.notes  # the shape columns are there: our rows are shown
