"""Retrieval across the matrix: every retriever against the baseline (BM25) on every dataset.

The heatmap and the paper tables show means; whether "dense beats BM25 on OTT-QA" survives the
sample size is a paired test on the per-query scores of the two runs (same queries, same qrels),
and since the claim is made for every (dataset, retriever) at once, the p-values are corrected
over that whole family (Holm by default, Benjamini-Hochberg with `correction="bh"`; config
`report.significance`). The test is `cqabench.report.significance.randomization_test` (scipy's
paired permutation test), exact for small n.

One row per (dataset, split, serialization, run other than the baseline). A comparison that
cannot be made (no baseline run of that split, no per-query scores because the metric is n/a,
no query both runs scored) carries its reason and is not in the family.
"""

from __future__ import annotations

import html
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pandas as pd

from cqabench.common.io import write_json, write_text
from cqabench.report.answer_comparisons_render import _f, _p  # one number format for both significance tables
from cqabench.report.significance import (
    CORRECTION_NAMES,
    CORRECTION_TEXT,
    adjust,
    randomization_test,
)

GROUP = ("dataset", "split", "serialization")
METRIC = "ndcg_cut_10"
VARIANT = "trec_eval"
BASELINE = "bm25"
ALPHA = 0.05
RESAMPLES = 10000

NO_BASELINE = "no {baseline} run of this dataset split to compare with"
NO_SCORES = "no per-query {metric} scores for this run (n/a in the fact table)"
NO_BASELINE_SCORES = "no per-query {metric} scores for the {baseline} run (n/a in the fact table)"
NO_COMMON = "no query scored by both runs"
SAMPLE_NOTE = (
    "Scores are on the bundled sample (a few dozen queries per dataset), not the paper's data: "
    "read p-values as how much this sample can tell, not as the paper's result."
)


def _scores(part: pd.DataFrame) -> pd.Series:
    values = pd.to_numeric(part["value"], errors="coerce")
    values.index = part["qid"].astype(str)
    return values.dropna()


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def retrieval_vs_baseline(
    per_question: pd.DataFrame | None,
    metric: str = METRIC,
    variant: str = VARIANT,
    baseline: str = BASELINE,
    correction: str = "holm",
    alpha: float = ALPHA,
    resamples: int = RESAMPLES,
    seed: int = 0,
    metrics: pd.DataFrame | None = None,
    runs: Collection[str] | None = None,
) -> dict[str, Any]:
    """The family of paired tests as one JSON-ready document (method, comparisons).

    `metrics` (the fact table), when given, adds the runs that have no per-query rows at all
    (every query n/a), so the table lists them with the reason instead of leaving them out.
    `runs`, when given, keeps only those runs' comparisons, and the family is theirs alone (the
    pipelines table, `cqabench.report.retrieval_pipelines`).
    """
    comparisons: list[dict[str, Any]] = []
    frame = per_question if per_question is not None else pd.DataFrame()
    needed = {"stage", "metric", "variant", "retriever", "qid", "value", "cell_id", *GROUP}
    if not frame.empty and needed <= set(frame.columns):
        part = frame[
            (frame["stage"].astype("string") == "retrieval")
            & (frame["metric"].astype("string") == metric)
            & (frame["variant"].astype("string") == variant)
        ]
        columns = [*GROUP, "retriever", "cell_id"]
        sources = [
            f[f["stage"].astype("string") == "retrieval"][columns]
            for f in (frame, metrics)
            if f is not None and not f.empty and set(columns) | {"stage"} <= set(f.columns)
        ]
        cells = pd.concat([c.astype("string") for c in sources]).drop_duplicates().sort_values([*GROUP, "retriever"])
        for key, group in cells.groupby(list(GROUP), sort=True, dropna=False):
            names = list(dict.fromkeys(group["retriever"].tolist()))
            base_cells = group[group["retriever"] == baseline]["cell_id"].tolist()
            base = part[part["cell_id"].astype("string").isin(base_cells)]
            for run in (r for r in names if r != baseline and (runs is None or r in runs)):
                run_cells = group[group["retriever"] == run]["cell_id"].tolist()
                mine = part[part["cell_id"].astype("string").isin(run_cells)]
                comparisons.append(
                    _compare(
                        dict(zip(GROUP, key)), run, mine, base, bool(base_cells), metric, baseline, resamples, seed
                    )
                )
    raw = [c["p_value"] for c in comparisons]
    family = sum(p is not None for p in raw)
    for c, p in zip(comparisons, adjust(raw, correction)):
        c["p_adjusted"] = p
        c["family_size"] = family if p is not None else None
        c["significant"] = None if p is None else bool(p < alpha)
    return {
        "unit": "fraction",
        "metric": metric,
        "variant": variant,
        "baseline": baseline,
        "method": {
            "test": {
                "method": "paired sign-flip randomization test, two-sided (scipy.stats.permutation_test, "
                "permutation_type='samples')",
                "on": "queries both runs scored",
                "resamples": resamples,
                "exact_when": "2^n <= resamples",
                "seed": seed,
            },
            "correction": {
                "method": correction,
                "description": CORRECTION_TEXT.get(correction, correction),
                "family": f"every {'pipeline ' if runs is not None else ''}run vs {baseline} on every "
                "(dataset, split, serialization)",
                "family_size": family,
                "alpha": alpha,
            },
        },
        "comparisons": comparisons,
    }


def _compare(
    key: dict[str, Any],
    run: str,
    mine: pd.DataFrame,
    base: pd.DataFrame,
    has_base: bool,
    metric: str,
    baseline: str,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        **key,
        "retriever": run,
        "against": baseline,
        "n_common": 0,
        "mean": None,
        "mean_baseline": None,
        "diff": None,
        "p_value": None,
        "exact": None,
        "reason": None,
    }
    if not has_base:
        out["reason"] = NO_BASELINE.format(baseline=baseline)
        return out
    a, b = _scores(mine), _scores(base)
    if a.empty:
        out["reason"] = NO_SCORES.format(metric=metric)
        return out
    if b.empty:
        out["reason"] = NO_BASELINE_SCORES.format(metric=metric, baseline=baseline)
        return out
    common = a.index.intersection(b.index).sort_values()
    if len(common) == 0:
        out["reason"] = NO_COMMON
        return out
    test = randomization_test(a.loc[common].to_numpy(), b.loc[common].to_numpy(), resamples, seed)
    out.update(
        n_common=len(common),
        mean=test.mean_a,
        mean_baseline=test.mean_b,
        diff=test.diff,
        p_value=test.p_value,
        exact=test.exact,
    )
    return out


def caption(doc: dict[str, Any]) -> str:
    """This table's own caption: what is compared, on which n, the unit, the test and the family."""
    c, t = doc["method"]["correction"], doc["method"]["test"]
    name = CORRECTION_NAMES.get(c["method"], c["method"])
    return (
        f"Each retrieval run against {doc['baseline']} on the same queries: {doc['metric']} "
        f"({doc['variant']}), unit fraction (0–1), n = queries both runs scored. Δ = mean(run − "
        f"{doc['baseline']}); p = two-sided paired sign-flip randomization test ({t['resamples']} resamples, "
        f"exact when 2^n ≤ {t['resamples']}); p {name} = p adjusted by {c['description']} over {c['family']} "
        f"(m = {c['family_size']}); * = p {name} < {c['alpha']}. {SAMPLE_NOTE}"
    )


def _rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    name = CORRECTION_NAMES.get(doc["method"]["correction"]["method"], doc["method"]["correction"]["method"])
    head = [
        "dataset",
        "split",
        "serialization",
        "retriever",
        "n",
        "mean",
        f"mean {doc['baseline']}",
        f"Δ vs {doc['baseline']}",
        f"p / p {name}",
    ]
    notes: list[str] = []
    rows = []
    for c in doc["comparisons"]:
        cells = [_text(c[k]) for k in (*GROUP, "retriever")]
        if c["p_value"] is None:
            if c["reason"] not in notes:
                notes.append(c["reason"])
            ref = f"n/a [{notes.index(c['reason']) + 1}]"
            rows.append([*cells, "0", ref, "", "", ""])
            continue
        star = " *" if c["significant"] else ""
        rows.append(
            [
                *cells,
                str(c["n_common"]),
                _f(c["mean"]),
                _f(c["mean_baseline"]),
                _f(c["diff"], sign=True),
                f"{_p(c['p_value'])} / {_p(c['p_adjusted'])}{star}",
            ]
        )
    return head, rows, notes


def to_markdown(doc: dict[str, Any]) -> str:
    head, rows, notes = _rows(doc)
    lines = [f"# Retrieval: each run vs {doc['baseline']} ({doc['metric']})", "", caption(doc), ""]
    if not rows:
        return "\n".join([*lines, "(no retrieval runs besides the baseline)", ""])
    return "\n".join([*lines, *markdown_table(head, rows, notes)]) + "\n"


def to_html(doc: dict[str, Any]) -> str:
    esc = html.escape
    head, rows, notes = _rows(doc)
    out = [
        "<!DOCTYPE html><meta charset='utf-8'>",
        f"<h2>Retrieval: each run vs {esc(doc['baseline'])} ({esc(doc['metric'])})</h2>",
        f"<p>{esc(caption(doc))}</p>",
    ]
    if not rows:
        out.append("<p>(no retrieval runs besides the baseline)</p>")
    else:
        out += html_table(head, rows, [])
    out += html_table([], [], notes)
    return "\n".join(out) + "\n"


def markdown_table(head: list[str], rows: list[list[str]], notes: list[str]) -> list[str]:
    """A table's Markdown lines and its numbered notes (shared by the retrieval tables)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] if head else []
    lines += ["| " + " | ".join(x.replace("|", "\\|") for x in r) + " |" for r in rows]
    if notes:
        lines += ["", "Notes:", ""] + [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return lines


def html_table(head: list[str], rows: list[list[str]], notes: list[str]) -> list[str]:
    """A table's HTML lines (none without a head) and its notes as an ordered list."""
    esc = html.escape
    out = []
    if head:
        out.append('<table border="1" cellspacing="0" cellpadding="4">')
        out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
        out += ["<tr>" + "".join(f"<td>{esc(x)}</td>" for x in r) + "</tr>" for r in rows]
        out.append("</table>")
    if notes:
        out.append("<h3>Notes</h3><ol>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ol>")
    return out


def render(
    per_question: pd.DataFrame | None, out_dir: str | Path, name: str = "retrieval_vs_baseline", **options: Any
) -> dict[str, Any]:
    """Write <name>.{md,html,json} into out_dir; returns the document."""
    doc = retrieval_vs_baseline(per_question, **options)
    out_dir = Path(out_dir)
    write_text(to_markdown(doc), out_dir / f"{name}.md")
    write_text(to_html(doc), out_dir / f"{name}.html")
    write_json(doc, out_dir / f"{name}.json")
    return doc
