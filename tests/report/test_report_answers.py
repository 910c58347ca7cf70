"""answers_by_setting: closed-book vs RAG@k vs oracle with intervals, paired tests and Holm, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.report.answer_cell_summaries import bootstrap_ci
from cqabench.report.answer_comparisons import NO_CLOSED, answers_by_setting, validate_not_planned
from cqabench.report.answer_comparisons_render import render_answers, to_markdown
from cqabench.report.significance import holm

NOT_PLANNED = [
    {"dataset": "tanq", "split": "test", "setting": "rag", "reason": "no corpus: TANQ has no documents"},
    {"dataset": "tanq", "split": "test", "setting": "oracle", "reason": "no gold evidence"},
]


def _cell(
    dataset: str,
    setting: str,
    retriever: str,
    k: int,
    values: list[float],
    parse: list[float] | None = None,
    metric: str = "cover_em",
    variant: str = "default",
    llm: str = "m",
    prompt: str = "p",
):
    cell = {
        "cell_id": f"metrics/{dataset}/dev/pipe/{retriever}/{llm}/{prompt}/{setting}-k{k}",
        "stage": "generation",
        "dataset": dataset,
        "split": "dev",
        "serialization": "pipe",
        "llm": llm,
        "prompt": prompt,
        "setting": setting,
        "retriever": retriever,
        "k": k,
    }
    pq_rows = [
        {**cell, "qid": f"q{i}", "metric": metric, "variant": variant, "value": float(v)} for i, v in enumerate(values)
    ]
    pq_rows += [
        {**cell, "qid": f"q{i}", "metric": "parse_ok", "variant": "default", "value": float(v)}
        for i, v in enumerate(parse if parse is not None else [1.0] * len(values))
    ]
    m_rows = [
        {
            **cell,
            "metric": metric,
            "variant": variant,
            "value": float(np.mean(values)) if values else None,
            "n": len(values),
            "unit": "fraction",
            "reason": None,
        }
    ]
    return m_rows, pq_rows


def _frames(*cells):
    m = [r for c in cells for r in c[0]]
    q = [r for c in cells for r in c[1]]
    return pd.DataFrame(m), pd.DataFrame(q)


def test_bootstrap_ci_is_the_percentile_interval_worked_by_hand() -> None:
    # The exact bootstrap distribution of a 0/1 sample's mean is k/n, k ~ Binomial(n, share of ones).
    # [1, 1, 1, 0]: P(k) = 1, 12, 54, 108, 81 (/256) for k = 0..4, so the CDF is 0.004, 0.051,
    # 0.262, 0.684, 1: the 2.5 % point is k = 1 (0.25) and the 97.5 % point k = 4 (1.0). 9,999
    # resamples put ~39 means at 0 and ~508 at or below 0.25, far from the 250th order statistic.
    assert bootstrap_ci([1.0, 1.0, 1.0, 0.0], seed=0) == (0.25, 1.0)
    # [0, 1, 1, 0]: P(k) = 1, 4, 6, 4, 1 (/16): CDF 0.0625 at k = 0 and 0.9375 at k = 3 -> (0, 1)
    assert bootstrap_ci([0.0, 1.0, 1.0, 0.0], seed=0) == (0.0, 1.0)
    x = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.5]
    low, high = bootstrap_ci(x, seed=0)
    assert low < np.mean(x) < high
    assert bootstrap_ci(x, seed=0) == (low, high)  # seeded: the same every time
    assert bootstrap_ci([0.0, 0.0, 0.0]) == (0.0, 0.0)  # degenerate: no spread
    assert bootstrap_ci([1.0]) == (None, None)  # one question: no interval


def test_holm_by_hand() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> ×4 0.02, ×3 0.03, ×2 0.06, ×1 0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2, None, 0.01]) == [pytest.approx(0.2), None, pytest.approx(0.02)]  # m = 2
    assert holm([0.6, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == []


def test_cells_tests_and_holm_on_a_hand_worked_group() -> None:
    metrics, per_q = _frames(
        _cell("musique", "closed", "none", 0, [0, 0, 0, 0, 0, 0], parse=[1, 1, 0, 1, 1, 1]),
        _cell("musique", "rag", "bm25", 5, [1, 1, 1, 1, 1, 0]),
        _cell("musique", "oracle", "none", 0, [1, 1, 1, 1, 1, 1]),
    )
    doc = answers_by_setting(metrics, per_q, NOT_PLANNED)
    cells = {(c["setting"], c["retriever"], c["k"]): c for c in doc["cells"]}
    closed = cells[("closed", "none", 0)]
    assert closed["mean"] == 0.0 and closed["n"] == 6 and closed["parse_rate"] == pytest.approx(5 / 6)
    assert closed["unit"] == "fraction" and (closed["ci_low"], closed["ci_high"]) == (0.0, 0.0)
    rag = cells[("rag", "bm25", 5)]
    assert rag["mean"] == pytest.approx(5 / 6)
    comps = {(c["setting"], c["retriever"]): c for c in doc["comparisons"]}
    assert set(comps) == {("rag", "bm25"), ("oracle", "none")}  # each vs closed; closed not vs itself
    # Exact sign-flip tests. oracle: d = six 1s, |mean| = 1 only when all signs agree: 2 / 64.
    oracle = comps[("oracle", "none")]
    assert oracle["diff"] == 1.0 and oracle["n_common"] == 6 and oracle["exact"]
    assert oracle["p_value"] == pytest.approx(2 / 64)
    # rag: d = five 1s and a 0: all five signs agree in 2 of 32 patterns.
    assert comps[("rag", "bm25")]["p_value"] == pytest.approx(2 / 32)
    # Holm over the two: 2/64 × 2 = 0.0625, then max(0.0625, 2/32 × 1) = 0.0625.
    assert oracle["p_holm"] == pytest.approx(0.0625) and comps[("rag", "bm25")]["p_holm"] == pytest.approx(0.0625)
    assert oracle["family_size"] == 2 and oracle["significant"] is False
    assert doc["not_planned"] == NOT_PLANNED
    md = to_markdown(doc)
    assert "## musique (dev), serialization pipe — m / p" in md
    assert "| closed | none | 0 | 6 | 0.833 |  | 0.000 [0.000, 0.000] |" in md  # no flag: no spread recorded
    assert "+1.000 (n=6) | 0.031 / 0.062 |" in md
    assert "| tanq | test | rag | no corpus: TANQ has no documents |" in md
    assert "Unit: fraction (0–1)" in md and "percentile bootstrap" in md and "Holm" in md


def test_holm_family_is_the_dataset_split_across_prompts() -> None:
    metrics, per_q = _frames(
        _cell("musique", "closed", "none", 0, [0] * 6, prompt="a"),
        _cell("musique", "oracle", "none", 0, [1] * 6, prompt="a"),
        _cell("musique", "closed", "none", 0, [0] * 6, prompt="b"),
        _cell("musique", "oracle", "none", 0, [1] * 6, prompt="b"),
        _cell("finqa", "closed", "none", 0, [0] * 6, metric="em_tol"),
        _cell("finqa", "oracle", "none", 0, [1] * 6, metric="em_tol"),
    )
    doc = answers_by_setting(metrics, per_q)
    by = {(c["dataset"], c["prompt"]): c for c in doc["comparisons"]}
    assert by[("musique", "a")]["family_size"] == 2 and by[("musique", "a")]["p_holm"] == pytest.approx(2 * 2 / 64)
    assert by[("finqa", "p")]["family_size"] == 1 and by[("finqa", "p")]["p_holm"] == pytest.approx(2 / 64)


def test_strategyqa_has_both_primary_metrics() -> None:
    metrics, per_q = _frames(
        _cell("strategyqa", "closed", "none", 0, [1, 0, 1, 0], metric="accuracy"),
        _cell("strategyqa", "closed", "none", 0, [0, 0, 1, 0], metric="cover_em"),
    )
    doc = answers_by_setting(metrics, per_q)
    assert [(c["metric"], c["mean"]) for c in doc["cells"]] == [("accuracy", 0.5), ("cover_em", 0.25)]
    assert "accuracy [95% CI]" in to_markdown(doc) and "cover_em [95% CI]" in to_markdown(doc)


def test_na_propagates_and_is_never_zero() -> None:
    reason = "no question was scored (the cell asked none)"
    metrics, per_q = _frames(
        _cell("ambigqa", "closed", "none", 0, [1, 0, 1], metric="f1_ans", variant="official"),
        _cell("ambigqa", "rag", "bm25", 5, [], metric="f1_ans", variant="official"),
        _cell("tatqa", "oracle", "none", 0, [1, 0]),  # no closed-book cell in its group
    )
    metrics.loc[metrics["retriever"] == "bm25", "reason"] = reason
    doc = answers_by_setting(metrics, per_q)
    rag = next(c for c in doc["cells"] if c["setting"] == "rag")
    assert rag["mean"] is None and rag["reason"] == reason and rag["n"] == 0
    comps = {c["dataset"]: c for c in doc["comparisons"]}
    assert comps["ambigqa"]["p_value"] is None and comps["ambigqa"]["reason"] == reason
    assert comps["tatqa"]["p_value"] is None and comps["tatqa"]["reason"] == NO_CLOSED
    md = to_markdown(doc)
    assert "| rag | bm25 | 5 | 0 | n/a |  | n/a [1] | n/a [1] | n/a |" in md  # no parse rate either
    assert f"[1] {reason}" in md and f"[2] {NO_CLOSED}" in md
    assert "f1_ans (official) [95% CI]" in md
    json.dumps(doc, allow_nan=False)  # machine-readable: nulls, never NaN


def test_one_question_has_no_interval_but_a_mean() -> None:
    metrics, per_q = _frames(_cell("finqa", "closed", "none", 0, [1.0], metric="em_tol"))
    [cell] = answers_by_setting(metrics, per_q)["cells"]
    assert cell["mean"] == 1.0 and cell["ci_low"] is None and "fewer than 2" in cell["ci_reason"]


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"dataset": "x"}, "JSON list"),
        (["x"], "object"),
        ([{"dataset": "x", "split": "dev", "setting": "rag"}], "reason"),
    ],
)
def test_not_planned_is_validated(bad, message) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_not_planned(bad)


def test_cli_report_answers_and_report_tables(tmp_path: Path, capsys) -> None:
    metrics, per_q = _frames(
        _cell("musique", "closed", "none", 0, [0, 1, 0]), _cell("musique", "rag", "bm25", 5, [1, 1, 0])
    )
    metrics.to_parquet(tmp_path / "m.parquet")
    per_q.to_parquet(tmp_path / "q.parquet")
    out = tmp_path / "tables"
    rc = main(
        [
            "report-answers",
            "--metrics",
            str(tmp_path / "m.parquet"),
            "--per-question",
            str(tmp_path / "q.parquet"),
            "--out-dir",
            str(out),
            "--not-planned",
            json.dumps(NOT_PLANNED),
        ]
    )
    assert rc == 0 and "1 groups, 2 cells, 1 comparisons, 2 not planned" in capsys.readouterr().out
    doc = json.loads((out / "answers_by_setting.json").read_text())
    assert doc["unit"] == "fraction" and doc["method"]["interval"]["method"].startswith("percentile")
    assert "<table" in (out / "answers_by_setting.html").read_text()
    assert "no corpus: TANQ" in (out / "answers_by_setting.md").read_text()
    # From a file, too; report-tables writes the same table beside the paper tables.
    (tmp_path / "np.json").write_text(json.dumps(NOT_PLANNED[:1]))
    expected = Path(__file__).resolve().parents[2] / "config" / "expected" / "dexter.yaml"
    rc = main(
        [
            "report-tables",
            "--metrics",
            str(tmp_path / "m.parquet"),
            "--per-question",
            str(tmp_path / "q.parquet"),
            "--expected",
            str(expected),
            "--out-dir",
            str(tmp_path / "t2"),
            "--not-planned",
            str(tmp_path / "np.json"),
        ]
    )
    assert rc == 0
    assert json.loads((tmp_path / "t2" / "answers_by_setting.json").read_text())["not_planned"] == NOT_PLANNED[:1]
    assert (tmp_path / "t2" / "dexter_table3_answers.md").exists()
    rc = main(
        [
            "report-answers",
            "--metrics",
            str(tmp_path / "m.parquet"),
            "--out-dir",
            str(out),
            "--not-planned",
            "[{not json",
        ]
    )
    assert rc == 1 and "--not-planned" in capsys.readouterr().err


def test_render_answers_with_nothing(tmp_path: Path) -> None:
    doc = render_answers(pd.DataFrame(), pd.DataFrame(), [], tmp_path)
    assert doc["cells"] == [] and "(no generation cells)" in (tmp_path / "answers_by_setting.md").read_text()


def test_benjamini_hochberg_when_configured_holm_kept_beside() -> None:
    metrics, per_q = _frames(
        _cell("musique", "closed", "none", 0, [0, 0, 0, 0, 0, 0]),
        _cell("musique", "rag", "bm25", 5, [1, 1, 1, 1, 1, 0]),  # p = 2/32
        _cell("musique", "rag", "bm25", 1, [1, 0, 0, 0, 0, 0]),  # one non-zero difference: p = 1
        _cell("musique", "oracle", "none", 0, [1, 1, 1, 1, 1, 1]),  # p = 2/64
    )
    doc = answers_by_setting(metrics, per_q, NOT_PLANNED, correction="bh", alpha=0.1)
    comps = {(c["setting"], c["k"]): c for c in doc["comparisons"]}
    assert [comps[k]["p_value"] for k in (("oracle", 0), ("rag", 5), ("rag", 1))] == pytest.approx([2 / 64, 2 / 32, 1])
    # BH, m = 3: p·3/rank = 0.09375, 0.09375, 1 -> running minimum from the top: 0.09375, 0.09375, 1.
    assert comps[("oracle", 0)]["p_adjusted"] == pytest.approx(0.09375)
    assert comps[("rag", 5)]["p_adjusted"] == pytest.approx(0.09375) and comps[("rag", 5)]["significant"] is True
    assert comps[("rag", 1)]["p_adjusted"] == pytest.approx(1.0) and comps[("rag", 1)]["significant"] is False
    # Holm stays in the JSON: 0.09375 × 1, 0.0625 × 2 = 0.125, 1: RAG@5 would not pass at 0.1 under Holm.
    assert comps[("rag", 5)]["p_holm"] == pytest.approx(0.125)
    assert doc["method"]["correction"]["method"] == "bh" and doc["method"]["correction"]["alpha"] == 0.1
    md = to_markdown(doc)
    assert "p / p BH" in md and "0.062 / 0.094 *" in md and "Benjamini-Hochberg" in md


def test_oracle_with_fewer_questions_is_compared_on_the_shared_ones_only() -> None:
    """The oracle drops questions without gold documents: closed-book scores q0..q3, oracle q0..q2."""
    metrics, per_q = _frames(
        _cell("musique", "closed", "none", 0, [0, 0, 1, 0]),
        _cell("musique", "oracle", "none", 0, [1, 1, 0]),  # q3 has no gold: not asked
        _cell("musique", "rag", "bm25", 5, [1, 0, 1, 1]),
    )
    doc = answers_by_setting(metrics, per_q)
    cells = {c["setting"]: c for c in doc["cells"]}
    assert (cells["closed"]["n"], cells["closed"]["mean"]) == (4, 0.25)  # each cell's own questions
    assert cells["oracle"]["n"] == 3 and cells["oracle"]["mean"] == pytest.approx(2 / 3)
    comps = {c["setting"]: c for c in doc["comparisons"]}
    oracle = comps["oracle"]
    # By hand, on q0..q2: oracle 1, 1, 0 (mean 2/3), closed 0, 0, 1 (mean 1/3); d = 1, 1, -1, Δ = +1/3.
    assert (oracle["n_cell"], oracle["n_closed"], oracle["n_common"]) == (3, 4, 3)
    assert oracle["same_questions"] is False
    assert oracle["mean"] == pytest.approx(2 / 3) and oracle["mean_closed"] == pytest.approx(1 / 3)
    assert oracle["diff"] == pytest.approx(1 / 3)  # not 2/3 - 1/4, the two own-question means
    # Exact over 2^3 flips: every sum of three ±1 has |mean| >= 1/3, so p = 8/8.
    assert oracle["exact"] and oracle["p_value"] == pytest.approx(1.0)
    rag = comps["rag"]
    assert rag["same_questions"] is True and (rag["n_cell"], rag["n_closed"], rag["n_common"]) == (4, 4, 4)
    md = to_markdown(doc)
    assert "+0.333 on 3 shared (n shared=3: oracle 0.667 vs closed 0.333; oracle n=3, closed n=4) [1]" in md
    assert "[1] this cell and the closed-book cell scored different questions" in md
    assert "+0.500 (n=4) |" in md  # RAG on the same four questions: Δ (3/4 - 1/4) and n only


def test_the_k_column_says_how_many_documents_a_rag_cell_gave() -> None:
    """docs_given_mean (fact column) 4.2 on a RAG@5 cell: "5 (4.2 given)"; 5.0 on another: plain
    "5"; closed-book (0 given at k 0) and cells without the column stay plain."""
    m_short, q_short = _cell("musique", "rag", "bm25", 5, [1, 0])
    m_full, q_full = _cell("musique", "rag", "minilm", 5, [1, 1])
    m_short[0]["docs_given_mean"], m_full[0]["docs_given_mean"] = 4.2, 5.0
    metrics, per_q = _frames((m_short, q_short), (m_full, q_full), _cell("musique", "closed", "none", 0, [0, 0]))
    doc = answers_by_setting(metrics, per_q)
    by_retriever = {c["retriever"]: c["docs_given"] for c in doc["cells"]}
    assert by_retriever == {"bm25": pytest.approx(4.2), "minilm": 5.0, "none": None}
    md = to_markdown(doc)
    assert "| rag | bm25 | 5 (4.2 given) | 2 |" in md
    assert "| rag | minilm | 5 | 2 |" in md and "| closed | none | 0 | 2 |" in md
