"""Answers by setting: how much does retrieval decide the answer? Closed-book vs RAG@k vs oracle.

Per (dataset, split, serialization, llm, prompt) group, one row per generation cell: closed-book
(retriever "none", k 0), RAG@k for each retriever and k, oracle (gold evidence, k 0). Each row
gives, for each primary answer metric of the dataset (`cqabench.evaluation.scoring.PRIMARY`):

* the mean over the cell's questions (a fraction, 0..1) and n;
* a 95 % bootstrap confidence interval of that mean over questions: `scipy.stats.bootstrap`,
  percentile method (BCa is undefined on the all-0 / all-1 vectors small samples give), 9,999
  resamples, generator seeded per cell (`np.random.default_rng(seed)`), so the interval does
  not depend on which other cells exist; none for n < 2;
* the parse rate: mean of the cell's per-question `parse_ok`;
* against the group's closed-book cell (for RAG@k and oracle): Δ = mean(cell − closed) on the
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
listed with their reason.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from cqabench.evaluation.answer_spread import CONSTANT_SHARE, LOW_PARSE_RATE
from cqabench.evaluation.answer_spread import describe as describe_spread
from cqabench.common.errors import ConfigError
from cqabench.common.io import write_json, write_text
from cqabench.report.significance import (
    CORRECTION_NAMES,
    CORRECTION_TEXT,
    adjust,
    holm,
    randomization_test,
)
from cqabench.evaluation.scoring import PARSE_METRIC, PRIMARY, UNIT

SETTING_ORDER = ("closed", "rag", "oracle", "open-book")  # open-book: TANQ's tool agent
DATASET_ORDER = ("ambigqa", "2wikimultihopqa", "musique", "ottqa", "strategyqa", "tatqa", "finqa", "tanq")  # DEXTER's
GROUP_KEYS = ("dataset", "split", "serialization", "llm", "prompt")
CELL_KEYS = ("setting", "retriever", "k")
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9999
TEST_RESAMPLES = 10000
ALPHA = 0.05
NOT_PLANNED_KEYS = ("dataset", "split", "setting", "reason")

FEWER_THAN_TWO = "fewer than 2 questions: no bootstrap interval"
NO_CLOSED = "no closed-book cell in this group to compare with"
NO_COMMON = "no question scored by both this cell and the closed-book cell"
NO_SCORES = "no per-question scores for this cell"
DIFFERENT_QUESTIONS = ("this cell and the closed-book cell scored different questions (the oracle drops questions "
                       "without gold documents): Δ, p and the two means beside Δ are on the questions both scored "
                       "only; the mean column is each cell's own questions")


# --- statistics ---------------------------------------------------------------------------------


def bootstrap_ci(values: Sequence[float], confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = 0) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean (scipy.stats.bootstrap); (None, None) for n < 2."""
    from scipy.stats import bootstrap

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None, None
    if np.all(x == x[0]):  # every resample has the same mean
        return float(x[0]), float(x[0])
    result = bootstrap((x,), np.mean, n_resamples=resamples, confidence_level=confidence, method="percentile",
                       vectorized=True, batch=1000, rng=np.random.default_rng(seed))
    ci = result.confidence_interval
    return float(ci.low), float(ci.high)


# --- cells ---------------------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _k(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def _generation(frame: pd.DataFrame | None) -> pd.DataFrame:
    if frame is None or frame.empty or "setting" not in frame.columns or "metric" not in frame.columns:
        return pd.DataFrame()
    part = frame
    if "stage" in part.columns:
        part = part[part["stage"].astype("string") == "generation"]
    part = part[part["setting"].astype("string").isin(SETTING_ORDER).fillna(False).astype(bool)]
    if "breakdown" in part.columns:  # whole-cell values only; TANQ's breakdown rows share the metric name
        part = part[part["breakdown"].isna()]
    return part.copy()


def _cell_info(row: dict[str, Any]) -> dict[str, Any]:
    info = {key: _text(row.get(key)) for key in GROUP_KEYS}
    info["setting"] = _text(row.get("setting"))
    info["retriever"] = _text(row.get("retriever")) or "none"
    info["k"] = _k(row.get("k"))
    if info["setting"] in ("closed", "oracle"):
        info["retriever"], info["k"] = "none", 0
    info["docs_given"] = _docs_given(row)
    info["context_source"] = _text(row.get("context_source"))
    info.update({key: _spread_value(row.get(key)) for key in SPREAD_KEYS})
    return info


SPREAD_KEYS = ("n_answers", "top_answer", "top_answer_count", "top_answer_share", "constant_answer", "low_parse_rate")


def _spread_value(value: Any) -> Any:
    """A fact-table spread value as plain Python (None for a null or a cell written before it existed)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return str(value)


def spread_flags(cell: dict[str, Any]) -> list[str]:
    """The cell's constant-answer and low-parse-rate flags as sentences ([] when neither is set)."""
    return describe_spread(cell, str(cell.get("llm") or "the model"))


def setting_label(cell: dict[str, Any]) -> str:
    """The setting column: "oracle (facts)" where the oracle showed facts rather than gold documents."""
    source = cell.get("context_source")
    if cell.get("setting") == "oracle" and source not in (None, "", "gold"):
        return f"oracle ({source})"
    return str(cell.get("setting"))


def _docs_given(row: dict[str, Any]) -> float | None:
    """The cell's mean documents given per question (fact column docs_given_mean), None if unrecorded."""
    try:
        value = float(row.get("docs_given_mean"))
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def k_label(cell: dict[str, Any]) -> str:
    """The k column: k, with the mean documents actually given when a RAG cell gave other than k
    (a run ranking fewer than k for some question), e.g. "5 (4.2 given)"."""
    given = cell.get("docs_given")
    if cell.get("setting") != "rag" or given is None or abs(given - cell["k"]) < 1e-9:
        return str(cell["k"])
    return f"{cell['k']} ({given:.1f} given)"


CELL_COLUMNS = ["cell_id", *GROUP_KEYS, *CELL_KEYS, "metric", "variant", "unit", "mean", "ci_low", "ci_high", "n",
                "parse_rate", "reason", "ci_reason", "context_source", *SPREAD_KEYS]


def cell_summaries(metrics: pd.DataFrame | None, per_question: pd.DataFrame | None, seed: int = 0,
                   resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE) -> pd.DataFrame:
    """`cell_rows` as a data frame (columns `CELL_COLUMNS`)."""
    return pd.DataFrame(cell_rows(metrics, per_question, seed, resamples, confidence), columns=CELL_COLUMNS)


def cell_rows(metrics: pd.DataFrame | None, per_question: pd.DataFrame | None, seed: int = 0,
              resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
              scores: dict | None = None) -> list[dict[str, Any]]:
    """One row per (generation cell, primary metric): mean, bootstrap interval, n, parse rate, reason.

    Per-question scores give the mean and interval; a cell only in the metrics table (or whose
    metric is null there) takes its value / reason from it. `scores`, when given, is filled with
    {(cell_id, metric, variant): pd.Series of per-question values by qid} for the paired tests.
    """
    pq_gen, m_gen = _generation(per_question), _generation(metrics)
    cells: dict[str, dict[str, Any]] = {}
    for frame in (m_gen, pq_gen):
        if frame.empty or "cell_id" not in frame.columns:
            continue
        for record in frame.drop_duplicates("cell_id").to_dict("records"):
            cells.setdefault(str(record["cell_id"]), _cell_info(record))
    by_cell_pq = {str(c): g for c, g in pq_gen.groupby("cell_id")} if not pq_gen.empty else {}
    by_cell_m = {str(c): g for c, g in m_gen.groupby("cell_id")} if not m_gen.empty else {}
    rows = []
    for cell_id in sorted(cells):
        info = cells[cell_id]
        primary = PRIMARY.get(info["dataset"] or "", ())
        pq_part = by_cell_pq.get(cell_id, pd.DataFrame(columns=["metric", "variant", "value", "qid"]))
        m_part = by_cell_m.get(cell_id, pd.DataFrame(columns=["metric", "variant", "value", "reason", "n"]))
        parse = _values(pq_part, *PARSE_METRIC)
        parse_rate = float(parse.mean()) if len(parse) else _metric_value(m_part, *PARSE_METRIC)[0]
        for metric, variant in primary:
            values = _values(pq_part, metric, variant)
            row = {"cell_id": cell_id, **info, "metric": metric, "variant": variant, "unit": UNIT,
                   "parse_rate": parse_rate, "mean": None, "ci_low": None, "ci_high": None, "n": 0,
                   "reason": None, "ci_reason": None}
            if len(values):
                if scores is not None:
                    scores[(cell_id, metric, variant)] = values
                row["mean"] = float(values.mean())
                row["n"] = len(values)
                row["ci_low"], row["ci_high"] = bootstrap_ci(values.to_numpy(), confidence, resamples, seed)
                if row["ci_low"] is None:
                    row["ci_reason"] = FEWER_THAN_TWO
            else:
                value, n, reason = _metric_value(m_part, metric, variant)
                row["mean"], row["n"] = value, n
                row["reason"] = reason if value is None else None
                if value is not None:
                    row["ci_reason"] = NO_SCORES
                elif reason is None:
                    row["reason"] = NO_SCORES
            rows.append(row)
    return rows


def _values(part: pd.DataFrame, metric: str, variant: str) -> pd.Series:
    if part.empty:
        return pd.Series(dtype=float)
    mask = part["metric"].astype("string") == metric
    if "variant" in part.columns:
        mask &= part["variant"].astype("string") == variant
    chosen = part[mask.fillna(False).astype(bool)]
    values = pd.to_numeric(chosen["value"], errors="coerce")
    values.index = chosen["qid"].astype(str) if "qid" in chosen.columns else values.index
    return values.dropna()


def _metric_value(part: pd.DataFrame, metric: str, variant: str) -> tuple[float | None, int, str | None]:
    if part.empty:
        return None, 0, None
    mask = part["metric"].astype("string") == metric
    if "variant" in part.columns:
        mask &= part["variant"].astype("string") == variant
    chosen = part[mask.fillna(False).astype(bool)]
    if chosen.empty:
        return None, 0, None
    first = chosen.iloc[0]
    value = first.get("value")
    n = first.get("n")
    reason = first.get("reason") if "reason" in chosen.columns else None
    value = None if value is None or pd.isna(value) else float(value)
    n = 0 if n is None or pd.isna(n) else int(n)
    return value, n, (str(reason) if isinstance(reason, str) and reason else None)


FAILED_NOTE = ("questions whose generation failed (the backend gave up on them) are left out of this cell's "
               "mean and of its comparisons: n counts the questions scored, +m failed the ones asked but never answered")


def mark_failed(cells: list[dict[str, Any]], metrics: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Set each cell row's `n_failed` (fact column, the most over the cell's whole-cell rows; 0 where
    unrecorded) and return the cells with failed items, for the document's `failed_items` list."""
    m_gen = _generation(metrics)
    counts: dict[str, int] = {}
    if not m_gen.empty and {"cell_id", "n_failed"} <= set(m_gen.columns):
        per_cell = pd.to_numeric(m_gen["n_failed"], errors="coerce").groupby(m_gen["cell_id"].astype(str)).max()
        counts = {str(c): int(v) for c, v in per_cell.dropna().items()}
    for row in cells:
        row["n_failed"] = counts.get(row["cell_id"], 0)
    failed = {r["cell_id"]: r for r in cells if r["n_failed"]}
    return [{**{k: r[k] for k in ("cell_id", *GROUP_KEYS, *CELL_KEYS)}, "n_failed": r["n_failed"]}
            for r in failed.values()]


# --- the table -----------------------------------------------------------------------------------


def _order(row: dict[str, Any]) -> tuple:
    return (SETTING_ORDER.index(row["setting"]), row["retriever"] or "", row["k"], row["cell_id"])


def _group_key(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in GROUP_KEYS)


def dataset_rank(name: str | None) -> tuple:
    """DEXTER's dataset order first, then any other name alphabetically."""
    return (DATASET_ORDER.index(name), "") if name in DATASET_ORDER else (len(DATASET_ORDER), str(name))


def _group_rank(row: dict[str, Any]) -> tuple:
    key = _group_key(row)
    return (dataset_rank(key[0]), *(str(x) for x in key[1:]))


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


def answers_by_setting(metrics: pd.DataFrame | None, per_question: pd.DataFrame | None,
                       not_planned: Iterable[dict[str, Any]] | None = None, seed: int = 0,
                       bootstrap_resamples: int = BOOTSTRAP_RESAMPLES, test_resamples: int = TEST_RESAMPLES,
                       confidence: float = CONFIDENCE, correction: str = "holm", alpha: float = ALPHA,
                       ) -> dict[str, Any]:
    """The whole table as one JSON-ready document: method, cells, comparisons, not-planned cells.

    `correction` (holm | bh, config `report.significance.correction`) decides `p_adjusted` and
    `significant`; `p_holm` is kept whatever the choice, for readers of earlier documents.
    """
    scores: dict = {}
    cells = cell_rows(metrics, per_question, seed, bootstrap_resamples, confidence, scores)
    failed_items = mark_failed(cells, metrics)
    flagged = flagged_cells(cells)
    records = sorted(cells, key=lambda r: (_group_rank(r), _order(r)))  # metrics keep PRIMARY's order
    comparisons = []
    for key in dict.fromkeys(_group_key(r) for r in records):
        group = [r for r in records if _group_key(r) == key]
        closed = [r for r in group if r["setting"] == "closed"]
        for row in group:
            if row["setting"] == "closed":
                continue
            ref = next((c for c in closed if (c["metric"], c["variant"]) == (row["metric"], row["variant"])), None)
            comparisons.append(_compare(row, ref, scores, test_resamples, seed))
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
    return {
        "unit": UNIT,
        "method": {
            "mean": "mean over the cell's questions of the dataset's primary metric (cqabench.evaluation.scoring.PRIMARY)",
            "interval": {"method": "percentile bootstrap (scipy.stats.bootstrap)", "confidence": confidence,
                         "resamples": bootstrap_resamples, "seed": seed},
            "test": {"method": "paired sign-flip randomization test, two-sided (cqabench.report.significance)",
                     "against": "closed", "on": "questions both cells scored", "resamples": test_resamples,
                     "exact_when": "2^n <= resamples", "seed": seed},
            "correction": {"method": correction, "description": CORRECTION_TEXT.get(correction, correction),
                           "family": "every comparison of one (dataset, split)", "alpha": alpha},
        },
        "primary_metrics": {ds: [list(m) for m in ms] for ds, ms in PRIMARY.items()},
        "cells": records,
        "comparisons": comparisons,
        "not_planned": validate_not_planned(list(not_planned) if not_planned is not None else []),
        "failed_items": failed_items,
        "flagged_cells": flagged,
    }


FLAG_NOTE = (f"flagged: the model gave (nearly) one answer to every question of this cell (at least "
             f"{CONSTANT_SHARE:.0%} of its predictions alike), or a final answer could be extracted from fewer than "
             f"{LOW_PARSE_RATE:.0%} of its outputs; its score is then the share of questions that one answer (or an unparsed output) happens to fit, and "
             "its differences from other cells say nothing about retrieval or evidence")


def flagged_cells(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells with a constant answer or a low parse rate, once each, with their flags as sentences."""
    out: dict[str, dict[str, Any]] = {}
    for row in cells:
        flags = spread_flags(row)
        if flags and row["cell_id"] not in out:
            out[row["cell_id"]] = {**{k: row[k] for k in ("cell_id", *GROUP_KEYS, *CELL_KEYS)},
                                   "context_source": row.get("context_source"),
                                   **{k: row.get(k) for k in SPREAD_KEYS}, "parse_rate": row.get("parse_rate"),
                                   "flags": flags}
    return sorted(out.values(), key=lambda r: (_group_rank(r), _order(r)))


def _compare(row: dict[str, Any], ref: dict[str, Any] | None, scores: dict, resamples: int,
             seed: int) -> dict[str, Any]:
    out = {**{k: row[k] for k in (*GROUP_KEYS, *CELL_KEYS, "metric", "variant", "cell_id")},
           "unit": UNIT, "against": "closed", "against_cell_id": None if ref is None else ref["cell_id"],
           "n_cell": 0, "n_closed": 0, "n_common": 0, "same_questions": None,
           "mean": None, "mean_closed": None, "diff": None, "p_value": None, "exact": None,
           "resamples": None, "p_holm": None, "p_adjusted": None, "family_size": None, "significant": None,
           "reason": None}
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
    out.update(n_common=len(common), mean=float(test.mean_a), mean_closed=float(test.mean_b),
               diff=float(test.diff), p_value=float(test.p_value), exact=bool(test.exact),
               resamples=int(test.resamples))
    return out


# --- rendering -----------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 3, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


class _Notes:
    """Numbered footnotes for n/a reasons, shared by a whole document."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def ref(self, reason: str | None) -> str:
        if not reason:
            return ""
        if reason not in self.items:
            self.items.append(reason)
        return f" [{self.items.index(reason) + 1}]"


def _metric_label(metric: str, variant: str) -> str:
    return metric if variant in ("default", None) else f"{metric} ({variant})"


def _layout(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Groups with their table rows: one row per cell, metric columns side by side."""
    comps = {(c["cell_id"], c["metric"], c["variant"]): c for c in doc["comparisons"]}
    groups: dict[tuple, dict[str, Any]] = {}
    for r in doc["cells"]:
        g = groups.setdefault(_group_key(r), {"key": dict(zip(GROUP_KEYS, _group_key(r))), "metrics": [], "rows": {}})
        mv = (r["metric"], r["variant"])
        if mv not in g["metrics"]:
            g["metrics"].append(mv)
        row = g["rows"].setdefault(r["cell_id"], {"cell": r, "by_metric": {}})
        row["by_metric"][mv] = (r, comps.get((r["cell_id"], *mv)))
    out = []
    for g in groups.values():
        g["rows"] = sorted(g["rows"].values(), key=lambda x: _order(x["cell"]))
        out.append(g)
    return out


def _title(key: dict[str, Any]) -> str:
    where = f"{key['dataset']} ({key['split']})"
    if key.get("serialization"):
        where += f", serialization {key['serialization']}"
    return f"{where} — {key['llm']} / {key['prompt']}"


def _row_cells(row: dict[str, Any], metrics: list[tuple[str, str]], notes: _Notes) -> list[str]:
    cell = row["cell"]
    out = [setting_label(cell), cell["retriever"], k_label(cell)]
    ns = sorted({str(r["n"]) for r, _ in row["by_metric"].values()})
    failed = f" (+{cell['n_failed']} failed)" + notes.ref(FAILED_NOTE) if cell.get("n_failed") else ""
    flags = spread_flags(cell)
    out += ["/".join(ns) + failed, _f(cell["parse_rate"]), "; ".join(flags) + notes.ref(FLAG_NOTE) if flags else ""]
    for mv in metrics:
        r, comp = row["by_metric"].get(mv, (None, None))
        if r is None:
            out += ["—", "", ""]
            continue
        if r["mean"] is None:
            out.append("n/a" + notes.ref(r["reason"]))
        elif r["ci_low"] is None:
            out.append(f"{_f(r['mean'])}" + notes.ref(r.get("ci_reason")))
        else:
            out.append(f"{_f(r['mean'])} [{_f(r['ci_low'])}, {_f(r['ci_high'])}]")
        if comp is None:
            out += ["(reference)" if cell["setting"] == "closed" else "", ""]
        elif comp["p_value"] is None:
            out += ["n/a" + notes.ref(comp["reason"]), "n/a"]
        else:
            star = " *" if comp["significant"] else ""
            out += [_delta_text(comp, cell["setting"], notes),
                    f"{_p(comp['p_value'])} / {_p(comp.get('p_adjusted', comp['p_holm']))}{star}"]
    return out


def _delta_text(comp: dict[str, Any], setting: str, notes: _Notes) -> str:
    """Δ and its n; where the two cells scored different questions, both means on the shared ones and both n."""
    text = f"{_f(comp['diff'], sign=True)} (n={comp['n_common']})"
    if comp.get("same_questions") is False:
        text = (f"{_f(comp['diff'], sign=True)} on {comp['n_common']} shared (n shared={comp['n_common']}: "
                f"{setting} {_f(comp['mean'])} vs closed {_f(comp['mean_closed'])}; {setting} n={comp['n_cell']}, "
                f"closed n={comp['n_closed']})" + notes.ref(DIFFERENT_QUESTIONS))
    return text


def _header(metrics: list[tuple[str, str]], correction: str = "holm") -> list[str]:
    head = ["setting", "retriever", "k", "n", "parse rate", "flags"]
    for m, v in metrics:
        label = _metric_label(m, v)
        head += [f"{label} [95% CI]", f"Δ {label} vs closed", f"p / p {CORRECTION_NAMES.get(correction, correction)}"]
    return head


def method_text(doc: dict[str, Any]) -> str:
    i, t, c = doc["method"]["interval"], doc["method"]["test"], doc["method"]["correction"]
    name = CORRECTION_NAMES.get(c["method"], c["method"])
    return (f"Unit: fraction (0–1). Each row is one generation cell: closed-book (no context), RAG@k "
            f"(top-k of a retriever) or oracle (gold evidence; \"oracle (facts)\": the annotators' facts, where "
            f"the data has no gold paragraph text). Mean of the dataset's primary answer metric "
            f"over the cell's questions with a {i['confidence']:.0%} percentile bootstrap interval "
            f"(scipy.stats.bootstrap, {i['resamples']} resamples, seed {i['seed']}); n = questions; parse rate = "
            f"share of questions whose final answer could be extracted; flags = a cell whose predictions are "
            f"nearly all one answer (≥ {CONSTANT_SHARE:.0%}) or whose parse rate is below {LOW_PARSE_RATE}. "
            f"Δ = mean(cell − closed-book) on the "
            f"questions both scored, paired by question (n shared; where the cells scored different questions, "
            f"e.g. the oracle without questions lacking gold documents, both means on the shared questions and "
            f"both n are given beside Δ); p = two-sided paired sign-flip randomization test ({t['resamples']} "
            f"resamples, exact when 2^n ≤ {t['resamples']}); p {name} = p adjusted by {c.get('description', name)} over "
            f"{c['family']}; * = p {name} < {c['alpha']}. n/a = not evaluable (see the notes).")


def to_markdown(doc: dict[str, Any]) -> str:
    notes = _Notes()
    lines = ["# Answers by setting: closed-book, RAG@k, oracle", "", method_text(doc), ""]
    layout = _layout(doc)
    if not layout:
        lines += ["(no generation cells)", ""]
    for g in layout:
        lines += [f"## {_title(g['key'])}", ""]
        head = _header(g["metrics"], doc["method"]["correction"]["method"])
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in g["rows"]:
            lines.append("| " + " | ".join(x.replace("|", "\\|") for x in _row_cells(row, g["metrics"], notes)) + " |")
        lines.append("")
    lines += _not_planned_md(doc["not_planned"])
    if notes.items:
        lines += ["## Notes", ""] + [f"[{i}] {reason}" for i, reason in enumerate(notes.items, 1)] + [""]
    return "\n".join(lines)


def _not_planned_md(entries: list[dict[str, Any]]) -> list[str]:
    lines = ["## Cells not planned", ""]
    if not entries:
        return lines + ["(none: every dataset × setting of the configuration was planned)", ""]
    lines += ["| dataset | split | setting | reason |", "|---|---|---|---|"]
    for e in entries:
        lines.append("| " + " | ".join(str(e[k]).replace("|", "\\|") for k in NOT_PLANNED_KEYS) + " |")
    return lines + [""]


def to_html(doc: dict[str, Any]) -> str:
    esc = html.escape
    notes = _Notes()
    out = ["<!DOCTYPE html><meta charset='utf-8'>", "<h2>Answers by setting: closed-book, RAG@k, oracle</h2>",
           f"<p>{esc(method_text(doc))}</p>"]
    layout = _layout(doc)
    if not layout:
        out.append("<p>(no generation cells)</p>")
    for g in layout:
        out.append(f"<h3>{esc(_title(g['key']))}</h3>")
        out.append('<table border="1" cellspacing="0" cellpadding="4">')
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in _header(g["metrics"], doc["method"]["correction"]["method"])) + "</tr>")
        for row in g["rows"]:
            tds = "".join(f"<td>{esc(x)}</td>" for x in _row_cells(row, g["metrics"], notes))
            out.append(f"<tr>{tds}</tr>")
        out.append("</table>")
    out.append("<h3>Cells not planned</h3>")
    if doc["not_planned"]:
        out.append('<table border="1" cellspacing="0" cellpadding="4"><tr>'
                   + "".join(f"<th>{k}</th>" for k in NOT_PLANNED_KEYS) + "</tr>")
        for e in doc["not_planned"]:
            out.append("<tr>" + "".join(f"<td>{esc(str(e[k]))}</td>" for k in NOT_PLANNED_KEYS) + "</tr>")
        out.append("</table>")
    else:
        out.append("<p>(none: every dataset × setting of the configuration was planned)</p>")
    if notes.items:
        out.append("<h3>Notes</h3><ol>" + "".join(f"<li>{esc(n)}</li>" for n in notes.items) + "</ol>")
    return "\n".join(out) + "\n"


def render_answers(metrics: pd.DataFrame | None, per_question: pd.DataFrame | None,
                   not_planned: Iterable[dict[str, Any]] | None, out_dir, seed: int = 0,
                   bootstrap_resamples: int = BOOTSTRAP_RESAMPLES, test_resamples: int = TEST_RESAMPLES,
                   name: str = "answers_by_setting", correction: str = "holm", alpha: float = ALPHA,
                   ) -> dict[str, Any]:
    """Write <name>.md, <name>.html and <name>.json into out_dir; returns the document."""
    from pathlib import Path

    doc = answers_by_setting(metrics, per_question, not_planned, seed, bootstrap_resamples, test_resamples,
                             correction=correction, alpha=alpha)
    out_dir = Path(out_dir)
    write_text(to_markdown(doc), out_dir / f"{name}.md")
    write_text(to_html(doc), out_dir / f"{name}.html")
    write_json(doc, out_dir / f"{name}.json")
    return doc
