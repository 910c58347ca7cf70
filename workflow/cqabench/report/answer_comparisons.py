"""Answers by setting: how much does retrieval decide the answer? Closed-book vs RAG@k vs oracle.

Per (dataset, split, serialization, llm, prompt) group, one row per generation cell: closed-book
(retriever "none", k 0), RAG@k for each retriever and k, oracle (gold evidence, k 0). Each row
gives, for each primary answer metric of the dataset (`cqabench.evaluation.scoring.PRIMARY`), the
cell's mean, 95 % bootstrap interval, n and parse rate (`cqabench.report.answer_cell_summaries`) and,
against the group's closed-book cell (for RAG@k and oracle): Δ = mean(cell − closed) on the
questions both scored, the two-sided paired sign-flip randomization test of
`cqabench.report.significance` (exact over all 2^n flips when 2^n ≤ resamples), and the
Holm-corrected p-value (Benjamini-Hochberg with `correction="bh"`, config
`report.significance.correction`). The family is every comparison of one dataset split (all its
serializations, LLMs, prompts, settings and primary metrics), so a claim like "RAG helps on
MuSiQue" is corrected for everything tried on MuSiQue.

Shared questions: a cell's own mean is over its own questions, and those can differ from the
closed-book cell's (the oracle drops questions without gold documents, cqabench.generation.oracle). Δ, p and
the two means of a comparison (`mean`, `mean_closed`) are therefore always on the questions
both scored, paired by qid; each comparison records `n_cell`, `n_closed`, `n_common` and
`same_questions`, and where the sets differ the table says so beside Δ (the two means on the
shared questions, and both n) with a note, so two point estimates on different questions are
never read as a difference.

A metric with no evaluable question (null value in the fact table) is "n/a" with its reason;
a comparison that cannot be made (no closed-book cell, no common question) is "n/a" too.
A cell with failed items (questions whose generation failed, fact column `n_failed`; kept only
with `generation.allow_failed_items`) shows "n (+m failed)" with a note and is listed under
`failed_items`: its mean is over the questions answered, never a failure scored as wrong.

A constant model is shown as one: a cell whose predictions are nearly all one answer
(fact column `constant_answer`, cqabench.evaluation.answer_spread) or whose parse rate is low
(`low_parse_rate`) says so in its row ("answered 'no' to 30/30") and is listed under
`flagged_cells`, since its score is the share of questions that answer happens to fit and its
differences from other cells say nothing about retrieval. An oracle whose context is not gold
documents (`context_source` facts: StrategyQA's annotators' facts) is labelled "oracle (facts)".

Cells the workflow did not plan (`not_planned`: [{dataset, split, setting, reason}, ...]) are
listed with their reason. This module builds the document; `cqabench.report.answer_comparisons_render`
writes it as Markdown, HTML and JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from cqabench.common.errors import ConfigError
from cqabench.evaluation.scoring import PRIMARY, UNIT
from cqabench.report.answer_cell_summaries import (
    BOOTSTRAP_RESAMPLES,
    CELL_KEYS,
    CONFIDENCE,
    GROUP_KEYS,
    NO_SCORES,
    cell_order,
    cell_rows,
    flagged_cells,
    group_key,
    group_rank,
    mark_failed,
)
from cqabench.report.significance import CORRECTION_TEXT, adjust, holm, randomization_test

TEST_RESAMPLES = 10000
ALPHA = 0.05
NOT_PLANNED_KEYS = ("dataset", "split", "setting", "reason")

NO_CLOSED = "no closed-book cell in this group to compare with"
NO_COMMON = "no question scored by both this cell and the closed-book cell"


def validate_not_planned(entries: Any) -> list[dict[str, Any]]:
    """The workflow's list of cells it did not plan: [{dataset, split, setting, reason}, ...]."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"--not-planned: expected a JSON list of objects, got {type(entries).__name__}")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"--not-planned[{i}]: expected an object with {list(NOT_PLANNED_KEYS)}")
        missing = [k for k in NOT_PLANNED_KEYS if entry.get(k) in (None, "")]
        if missing:
            raise ConfigError(f"--not-planned[{i}]: lacks {missing} (each entry needs {list(NOT_PLANNED_KEYS)})")
        out.append({k: (str(v) if k in NOT_PLANNED_KEYS else v) for k, v in entry.items()})
    return out


def answers_by_setting(
    metrics: pd.DataFrame | None,
    per_question: pd.DataFrame | None,
    not_planned: Iterable[dict[str, Any]] | None = None,
    seed: int = 0,
    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES,
    test_resamples: int = TEST_RESAMPLES,
    confidence: float = CONFIDENCE,
    correction: str = "holm",
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """The whole table as one JSON-ready document: method, cells, comparisons, not-planned cells.

    `correction` (holm | bh, config `report.significance.correction`) decides `p_adjusted` and
    `significant`; `p_holm` is kept whatever the choice, for readers of earlier documents.
    """
    scores: dict = {}
    cells = cell_rows(metrics, per_question, seed, bootstrap_resamples, confidence, scores)
    failed_items = mark_failed(cells, metrics)
    flagged = flagged_cells(cells)
    records = sorted(cells, key=lambda r: (group_rank(r), cell_order(r)))  # metrics keep PRIMARY's order
    comparisons = _comparisons(records, scores, test_resamples, seed)
    _correct(comparisons, correction, alpha)
    return {
        "unit": UNIT,
        "method": {
            "mean": "mean over the cell's questions of the dataset's primary metric (cqabench.evaluation.scoring.PRIMARY)",
            "interval": {
                "method": "percentile bootstrap (scipy.stats.bootstrap)",
                "confidence": confidence,
                "resamples": bootstrap_resamples,
                "seed": seed,
            },
            "test": {
                "method": "paired sign-flip randomization test, two-sided (cqabench.report.significance)",
                "against": "closed",
                "on": "questions both cells scored",
                "resamples": test_resamples,
                "exact_when": "2^n <= resamples",
                "seed": seed,
            },
            "correction": {
                "method": correction,
                "description": CORRECTION_TEXT.get(correction, correction),
                "family": "every comparison of one (dataset, split)",
                "alpha": alpha,
            },
        },
        "primary_metrics": {ds: [list(m) for m in ms] for ds, ms in PRIMARY.items()},
        "cells": records,
        "comparisons": comparisons,
        "not_planned": validate_not_planned(list(not_planned) if not_planned is not None else []),
        "failed_items": failed_items,
        "flagged_cells": flagged,
    }


def _comparisons(records: list[dict[str, Any]], scores: dict, resamples: int, seed: int) -> list[dict[str, Any]]:
    """Every non-closed row of a group against the group's closed-book row of the same metric."""
    comparisons = []
    for key in dict.fromkeys(group_key(r) for r in records):
        group = [r for r in records if group_key(r) == key]
        closed = [r for r in group if r["setting"] == "closed"]
        for row in group:
            if row["setting"] == "closed":
                continue
            ref = next((c for c in closed if (c["metric"], c["variant"]) == (row["metric"], row["variant"])), None)
            comparisons.append(_compare(row, ref, scores, resamples, seed))
    return comparisons


def _correct(comparisons: list[dict[str, Any]], correction: str, alpha: float) -> None:
    """Set each comparison's corrected p-values and significance over its family: one (dataset, split)."""
    families: dict[tuple, list[int]] = {}
    for i, c in enumerate(comparisons):
        families.setdefault((c["dataset"], c["split"]), []).append(i)
    for members in families.values():
        raw = [comparisons[i]["p_value"] for i in members]
        for i, p_holm, p in zip(members, holm(raw), adjust(raw, correction)):
            comparisons[i]["p_holm"] = p_holm
            comparisons[i]["p_adjusted"] = p
            comparisons[i]["family_size"] = sum(1 for j in members if comparisons[j]["p_value"] is not None)
            comparisons[i]["significant"] = None if p is None else bool(p < alpha)


def _compare(
    row: dict[str, Any], ref: dict[str, Any] | None, scores: dict, resamples: int, seed: int
) -> dict[str, Any]:
    out = {
        **{k: row[k] for k in (*GROUP_KEYS, *CELL_KEYS, "metric", "variant", "cell_id")},
        "unit": UNIT,
        "against": "closed",
        "against_cell_id": None if ref is None else ref["cell_id"],
        "n_cell": 0,
        "n_closed": 0,
        "n_common": 0,
        "same_questions": None,
        "mean": None,
        "mean_closed": None,
        "diff": None,
        "p_value": None,
        "exact": None,
        "resamples": None,
        "p_holm": None,
        "p_adjusted": None,
        "family_size": None,
        "significant": None,
        "reason": None,
    }
    if ref is None:
        out["reason"] = NO_CLOSED
        return out
    a = scores.get((row["cell_id"], row["metric"], row["variant"]))
    b = scores.get((ref["cell_id"], ref["metric"], ref["variant"]))
    if a is None or b is None:
        out["reason"] = row["reason"] or ref["reason"] or NO_SCORES
        return out
    common = a.index.intersection(b.index).sort_values()
    out.update(n_cell=len(a), n_closed=len(b), same_questions=set(a.index) == set(b.index))
    if len(common) == 0:
        out["reason"] = NO_COMMON
        return out
    test = randomization_test(a.loc[common].to_numpy(), b.loc[common].to_numpy(), resamples, seed)
    out.update(
        n_common=len(common),
        mean=float(test.mean_a),
        mean_closed=float(test.mean_b),
        diff=float(test.diff),
        p_value=float(test.p_value),
        exact=bool(test.exact),
        resamples=int(test.resamples),
    )
    return out
