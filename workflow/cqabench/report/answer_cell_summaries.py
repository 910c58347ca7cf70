"""Answer cells: one row per (generation cell, primary metric) of the fact tables, with its interval.

Per generation cell (closed-book, RAG@k for each retriever and k, oracle, open-book) and each
primary answer metric of the dataset (`cqabench.evaluation.scoring.PRIMARY`), a row gives:

* the mean over the cell's questions (a fraction, 0..1) and n;
* a 95 % bootstrap confidence interval of that mean over questions: `scipy.stats.bootstrap`,
  percentile method (BCa is undefined on the all-0 / all-1 vectors small samples give), 9,999
  resamples, generator seeded per cell (`np.random.default_rng(seed)`), so the interval does
  not depend on which other cells exist; none for n < 2;
* the parse rate: mean of the cell's per-question `parse_ok`;
* the failed items (fact column `n_failed`: questions whose generation failed, kept only with
  `generation.allow_failed_items`; its mean is over the questions answered, never a failure
  scored as wrong) and the spread flags (fact columns `constant_answer`, `low_parse_rate`,
  cqabench.evaluation.answer_spread: a cell whose predictions are nearly all one answer);
* the labels its table row shows (`setting_label`, `k_label`) and the order rows and groups
  take (`cell_order`, `group_rank`: DEXTER's dataset order first).

A metric with no evaluable question (null value in the fact table) has no mean and its reason.
`cqabench.report.answer_comparisons` compares these rows with their group's closed-book cell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from cqabench.evaluation.answer_spread import describe as describe_spread
from cqabench.evaluation.scoring import PARSE_METRIC, PRIMARY, UNIT

SETTING_ORDER = ("closed", "rag", "oracle", "open-book")  # open-book: TANQ's tool agent
DATASET_ORDER = ("ambigqa", "2wikimultihopqa", "musique", "ottqa", "strategyqa", "tatqa", "finqa", "tanq")  # DEXTER's
GROUP_KEYS = ("dataset", "split", "serialization", "llm", "prompt")
CELL_KEYS = ("setting", "retriever", "k")
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9999

FEWER_THAN_TWO = "fewer than 2 questions: no bootstrap interval"
NO_SCORES = "no per-question scores for this cell"


# --- statistics ---------------------------------------------------------------------------------


def bootstrap_ci(
    values: Sequence[float], confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean (scipy.stats.bootstrap); (None, None) for n < 2."""
    from scipy.stats import bootstrap

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return None, None
    if np.all(x == x[0]):  # every resample has the same mean
        return float(x[0]), float(x[0])
    result = bootstrap(
        (x,),
        np.mean,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        batch=1000,
        rng=np.random.default_rng(seed),
    )
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
    info: dict[str, Any] = {key: _text(row.get(key)) for key in GROUP_KEYS}
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
    raw = row.get("docs_given_mean")
    if raw is None:
        return None
    try:
        value = float(raw)
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


CELL_COLUMNS = [
    "cell_id",
    *GROUP_KEYS,
    *CELL_KEYS,
    "metric",
    "variant",
    "unit",
    "mean",
    "ci_low",
    "ci_high",
    "n",
    "parse_rate",
    "reason",
    "ci_reason",
    "context_source",
    *SPREAD_KEYS,
]


def cell_summaries(
    metrics: pd.DataFrame | None,
    per_question: pd.DataFrame | None,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> pd.DataFrame:
    """`cell_rows` as a data frame (columns `CELL_COLUMNS`)."""
    return pd.DataFrame(cell_rows(metrics, per_question, seed, resamples, confidence), columns=CELL_COLUMNS)


def cell_rows(
    metrics: pd.DataFrame | None,
    per_question: pd.DataFrame | None,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    scores: dict | None = None,
) -> list[dict[str, Any]]:
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
            row = {
                "cell_id": cell_id,
                **info,
                "metric": metric,
                "variant": variant,
                "unit": UNIT,
                "parse_rate": parse_rate,
                "mean": None,
                "ci_low": None,
                "ci_high": None,
                "n": 0,
                "reason": None,
                "ci_reason": None,
            }
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
    return [
        {**{k: r[k] for k in ("cell_id", *GROUP_KEYS, *CELL_KEYS)}, "n_failed": r["n_failed"]} for r in failed.values()
    ]


def flagged_cells(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells with a constant answer or a low parse rate, once each, with their flags as sentences."""
    out: dict[str, dict[str, Any]] = {}
    for row in cells:
        flags = spread_flags(row)
        if flags and row["cell_id"] not in out:
            out[row["cell_id"]] = {
                **{k: row[k] for k in ("cell_id", *GROUP_KEYS, *CELL_KEYS)},
                "context_source": row.get("context_source"),
                **{k: row.get(k) for k in SPREAD_KEYS},
                "parse_rate": row.get("parse_rate"),
                "flags": flags,
            }
    return sorted(out.values(), key=lambda r: (group_rank(r), cell_order(r)))


# --- order -----------------------------------------------------------------------------------------


def cell_order(row: dict[str, Any]) -> tuple:
    """A row's place in its group: setting, retriever, k, cell."""
    return (SETTING_ORDER.index(row["setting"]), row["retriever"] or "", row["k"], row["cell_id"])


def group_key(row: dict[str, Any]) -> tuple:
    """The (dataset, split, serialization, llm, prompt) group of a row."""
    return tuple(row.get(k) for k in GROUP_KEYS)


def dataset_rank(name: str | None) -> tuple:
    """DEXTER's dataset order first, then any other name alphabetically."""
    return (DATASET_ORDER.index(name), "") if name in DATASET_ORDER else (len(DATASET_ORDER), str(name))


def group_rank(row: dict[str, Any]) -> tuple:
    """A group's place in the document: DEXTER's dataset order, then the rest of its key."""
    key = group_key(row)
    return (dataset_rank(key[0]), *(str(x) for x in key[1:]))
