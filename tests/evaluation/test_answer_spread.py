"""A constant model is shown as one (cqabench.evaluation.answer_spread): hand-counted spreads, the metrics.json
and fact-table columns, the answers table's flags and the report page's plain statement."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cqabench.evaluation.answer_spread import answer_spread, describe, normalized
from cqabench.report.aggregate import build_metrics_table
from cqabench.report.answer_comparisons import answers_by_setting
from cqabench.report.answer_comparisons_render import to_markdown
from cqabench.report.model_limits import limits_html, questions_text, typical_half_width


def test_normalized_ignores_case_spacing_and_edge_punctuation() -> None:
    assert normalized("  No. ") == normalized("no") == normalized('"NO"') == "no"
    assert normalized("New  York City") == "new york city"
    assert normalized("1.5") == "1.5" and normalized("-3") == "3"  # inner dots kept; a leading sign is an edge
    assert normalized(None) == normalized("") == ""


def test_spread_by_hand() -> None:
    # 28 of 30 say no (in three spellings), 2 say yes: 28/30 = 0.933 >= 0.9, constant
    preds = ["no"] * 20 + ["No."] * 5 + [" no"] * 3 + ["yes"] * 2
    s = answer_spread(preds, [True] * 30)
    assert s == {
        "n_answers": 30,
        "top_answer": "no",
        "top_answer_count": 28,
        "top_answer_share": pytest.approx(28 / 30),
        "parse_rate": 1.0,
        "constant_answer": True,
        "low_parse_rate": False,
    }
    assert answer_spread(["a"] * 9 + ["b"], [True] * 10)["constant_answer"]  # exactly 0.9 counts
    assert not answer_spread(["a"] * 8 + ["b", "c"], [True] * 10)["constant_answer"]  # 0.8
    assert not answer_spread(["a"], [True])["constant_answer"]  # one question is no evidence of anything
    # nothing extracted is an answer like any other ("" twice of three: 0.667), and a low parse rate
    s = answer_spread(["", "", "x"], [False, False, True])
    assert (s["top_answer"], s["top_answer_count"], s["constant_answer"]) == ("", 2, False)
    assert s["parse_rate"] == pytest.approx(1 / 3) and s["low_parse_rate"]
    assert not answer_spread(["a", "b"], [True, False])["low_parse_rate"]  # 0.5 is not below 0.5
    assert answer_spread([], []) == {
        "n_answers": 0,
        "top_answer": None,
        "top_answer_count": 0,
        "top_answer_share": None,
        "parse_rate": None,
        "constant_answer": False,
        "low_parse_rate": False,
    }
    with pytest.raises(ValueError, match="2 predictions but 1 parse flags"):
        answer_spread(["a", "b"], [True])


def test_describe_says_it_plainly() -> None:
    s = answer_spread(["no"] * 30, [True] * 30)
    assert describe(s, "smollm2-135m") == ["smollm2-135m answered 'no' to 30/30 questions"]
    s = answer_spread([""] * 9 + ["7"], [False] * 9 + [True])
    assert describe(s) == [
        "the model answered nothing extractable to 9/10 questions",
        "a final answer was extracted from only 1/10 outputs",
    ]
    assert describe(answer_spread(["a", "b"], [True, True])) == []
    # read back from the fact table, whose count columns hold nulls: floats, written as counts
    floats = {
        "constant_answer": True,
        "top_answer": "no",
        "top_answer_count": 30.0,
        "n_answers": 30.0,
        "low_parse_rate": True,
        "parse_rate": 0.1,
    }
    assert describe(floats) == [
        "the model answered 'no' to 30/30 questions",
        "a final answer was extracted from only 3/30 outputs",
    ]


def _predictions(path: Path, preds: list[str], parse: list[bool]) -> Path:
    rows = [
        {"qid": f"q{i}", "prediction": p, "parse_ok": ok, "parse_reason": "", "finish_reason": "stop"}
        for i, (p, ok) in enumerate(zip(preds, parse))
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_evaluate_generation_records_the_spread_and_aggregate_makes_columns(tmp_path: Path) -> None:
    """A StrategyQA cell that says "no" to its 4 questions (1 of them gold yes): metrics.json holds
    the spread, the fact table its columns, on every row of the cell."""
    from cqabench.cli import main
    from cqabench.data.schema import Answer, CanonicalData, Query

    data = tmp_path / "data"
    tables = CanonicalData(
        queries=[Query(f"q{i}", "Is it?") for i in range(4)],
        answers=[Answer(f"q{i}", "boolean", boolean=b) for i, b in enumerate([False, False, False, True])],
    ).tables()
    queries, answers = tables["queries"], tables["answers"]
    data.mkdir()
    pq.write_table(queries, data / "queries.parquet")
    pq.write_table(answers, data / "answers.parquet")
    preds = _predictions(tmp_path / "generation" / "predictions.parquet", ["no", "No", "no.", "no"], [True] * 4)
    out = tmp_path / "metrics" / "strategyqa" / "dev" / "pipe" / "none" / "m" / "p" / "closed-k0"
    code = main(
        [
            "evaluate-generation",
            "--dataset",
            "strategyqa",
            "--predictions",
            str(preds),
            "--queries",
            str(data / "queries.parquet"),
            "--answers",
            str(data / "answers.parquet"),
            "--cell",
            json.dumps({"setting": "closed", "llm": "m", "prompt": "p", "split": "dev"}),
            "--out-json",
            str(out / "metrics.json"),
            "--out-per-question",
            str(out / "per_question.parquet"),
        ]
    )
    assert code == 0
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["answers"] == {
        "n_answers": 4,
        "top_answer": "no",
        "top_answer_count": 4,
        "top_answer_share": 1.0,
        "parse_rate": 1.0,
        "constant_answer": True,
        "low_parse_rate": False,
    }
    table = build_metrics_table([out / "metrics.json"], tmp_path).to_pandas()
    assert len(table) > 1
    assert table["constant_answer"].tolist() == [True] * len(table)
    assert set(table["top_answer"]) == {"no"} and set(table["top_answer_count"]) == {4}
    assert set(table["n_answers"]) == {4} and set(table["low_parse_rate"]) == {False}


def _cell(
    dataset: str,
    setting: str,
    values: list[float],
    spread: dict | None = None,
    retriever: str = "none",
    k: int = 0,
    context_source: str | None = None,
):
    cell = {
        "cell_id": f"metrics/{dataset}/dev/pipe/{retriever}/m/p/{setting}-k{k}",
        "stage": "generation",
        "dataset": dataset,
        "split": "dev",
        "serialization": "pipe",
        "llm": "m",
        "prompt": "p",
        "setting": setting,
        "retriever": retriever,
        "k": k,
        "context_source": context_source,
        **(spread or {}),
    }
    pq_rows = [
        {**cell, "qid": f"q{i}", "metric": "cover_em", "variant": "default", "value": float(v)}
        for i, v in enumerate(values)
    ]
    parsed = round((spread or {}).get("parse_rate", 1.0) * len(values))  # the per-question parse_ok rows
    pq_rows += [
        {**cell, "qid": f"q{i}", "metric": "parse_ok", "variant": "default", "value": float(i < parsed)}
        for i in range(len(values))
    ]
    m_rows = [
        {
            **cell,
            "metric": "cover_em",
            "variant": "default",
            "value": float(np.mean(values)),
            "n": len(values),
            "unit": "fraction",
            "reason": None,
        }
    ]
    return m_rows, pq_rows


def test_the_answers_table_flags_a_constant_cell_and_names_a_facts_oracle() -> None:
    constant = answer_spread(["no"] * 6, [True] * 6)
    unparsed = answer_spread(["", "", "", "", "a", "b"], [False, False, False, False, True, True])
    cells = [
        _cell("musique", "closed", [0, 0, 1, 0, 0, 0], constant),
        _cell("musique", "rag", [1, 0, 1, 0, 1, 0], unparsed, "bm25", 5),
        _cell(
            "musique", "oracle", [1, 1, 1, 0, 1, 0], answer_spread(list("abcdef"), [True] * 6), context_source="facts"
        ),
    ]
    metrics = pd.DataFrame([r for c in cells for r in c[0]])
    per_q = pd.DataFrame([r for c in cells for r in c[1]])
    doc = answers_by_setting(metrics, per_q)
    flagged = {f["setting"]: f["flags"] for f in doc["flagged_cells"]}
    assert flagged == {
        "closed": ["m answered 'no' to 6/6 questions"],
        "rag": ["a final answer was extracted from only 2/6 outputs"],
    }
    md = to_markdown(doc)
    assert "| closed | none | 0 | 6 | 1.000 | m answered 'no' to 6/6 questions [1] |" in md
    assert "| rag | bm25 | 5 | 6 | 0.333 | a final answer was extracted from only 2/6 outputs [1] |" in md
    assert "| oracle (facts) | none | 0 | 6 | 1.000 |  |" in md
    assert "[1] flagged: the model gave (nearly) one answer" in md


def test_the_page_says_what_the_answers_can_and_cannot_show() -> None:
    cells = [
        {
            "cell_id": "a",
            "dataset": "strategyqa",
            "split": "dev",
            "llm": "smollm2-135m",
            "prompt": "few-shot",
            "setting": "closed",
            "retriever": "none",
            "k": 0,
            "n": 30,
            "ci_low": 0.3,
            "ci_high": 0.6,
        },
        {
            "cell_id": "b",
            "dataset": "musique",
            "split": "train",
            "llm": "smollm2-135m",
            "prompt": "few-shot",
            "setting": "rag",
            "retriever": "bm25",
            "k": 5,
            "n": 30,
            "ci_low": 0.0,
            "ci_high": 0.2,
        },
        {
            "cell_id": "c",
            "dataset": "tanq",
            "split": "test",
            "llm": "smollm2-135m",
            "prompt": "few-shot",
            "setting": "closed",
            "retriever": "none",
            "k": 0,
            "n": 10,
            "ci_low": None,
            "ci_high": None,
        },
    ]
    assert typical_half_width(cells) == pytest.approx(0.125)  # median of 0.15 and 0.1
    assert questions_text(cells) == "at most 30 questions per dataset (tanq 10)"
    flagged = [{**cells[0], "flags": ["smollm2-135m answered 'no' to 30/30 questions"]}]
    page = limits_html({"cells": cells, "flagged_cells": flagged}, paper_data=False)
    assert "They come from smollm2-135m on at most 30 questions per dataset (tanq 10)" in page
    assert "(a typical 95 % interval here is ±0.12)" in page
    assert "No number here reproduces a paper's." in page
    assert "1 of 3 answer cells are flagged" in page
    assert (
        "<li>strategyqa (dev), closed, few-shot: smollm2-135m answered &#x27;no&#x27; to 30/30 questions</li>" in page
    )
    assert "Every cell of strategyqa is flagged" in page
    assert "No number here" not in limits_html({"cells": cells, "flagged_cells": []}, paper_data=True)
    assert "No answer cell is flagged" in limits_html({"cells": cells, "flagged_cells": []}, paper_data=True)
    assert limits_html({"cells": []}, paper_data=False) == ""
