"""Retrieval pipelines beside their baseline: every fused or reranked run against BM25.

A pipeline (`retrieval.pipelines`: a fusion of runs, a cross-encoder reranking of a run) is what
practitioners deploy; the question this table answers is whether it retrieves better than the
first stage it is built on, on the same queries. It reads the fact tables only: a run is a
pipeline when its rows' `retriever_type` is `fusion` or `rerank`, and its definition is read back
from the `retriever_settings` its rows record, so the table shows what was run, not what the
configuration says now.

Each pipeline run is compared with the baseline on nDCG@10 and on Recall@100 with the paired test
of the retrieval significance table (`retrieval_significance.retrieval_vs_baseline`); each metric
is one family (every pipeline run on every dataset split), corrected by Holm (or BH, config
`report.significance`). The family holds the pipeline runs only, so its corrections differ from
those of the all-runs significance table, which also holds the first-stage retrievers.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from cqabench.common.io import write_json, write_text
from cqabench.report.answer_comparisons_render import _f, _p
from cqabench.report.retrieval_significance import (
    ALPHA,
    BASELINE,
    GROUP,
    RESAMPLES,
    SAMPLE_NOTE,
    VARIANT,
    html_table,
    markdown_table,
    retrieval_vs_baseline,
)
from cqabench.report.significance import CORRECTION_NAMES, CORRECTION_TEXT

PIPELINE_TYPES = ("fusion", "rerank")
METRICS = {"ndcg_cut_10": "nDCG@10", "recall_100": "R@100"}
NO_PIPELINES = (
    "no retrieval pipeline in this run's fact table (declare one under retrieval.pipelines: "
    "a fusion of runs or a cross-encoder reranking)"
)


def describe(settings: Mapping[str, Any]) -> str:
    """A pipeline's definition in one line, from the settings its rows record."""
    kind = settings.get("type")
    depth = settings.get("depth")
    if kind == "fusion":
        method = str(settings.get("method", "?"))
        knob = (
            f"rrf_k {settings['rrf_k']}"
            if settings.get("rrf_k") is not None
            else (f"norm {settings['norm']}" if settings.get("norm") else "")
        )
        parts = ", ".join(str(r) for r in settings.get("fuse") or [])
        extra = "; ".join(x for x in (knob, f"depth {depth}" if depth else "") if x)
        return f"{method.upper() if method == 'rrf' else method}({parts})" + (f"; {extra}" if extra else "")
    if kind == "rerank":
        model = str(settings.get("model", "?"))
        if settings.get("revision"):
            model += f"@{str(settings['revision'])[:12]}"
        return f"{model} reranks {settings.get('of', '?')} top {depth}" + (
            f" (max_length {settings['max_length']})" if settings.get("max_length") else ""
        )
    return str(kind)


def pipeline_runs(metrics: pd.DataFrame | None) -> dict[str, str]:
    """Run name -> definition, for every run of the fact table whose type is a pipeline."""
    if metrics is None or metrics.empty or not {"stage", "retriever", "retriever_type"} <= set(metrics.columns):
        return {}
    rows = metrics[
        (metrics["stage"].astype("string") == "retrieval")
        & metrics["retriever_type"].astype("string").isin(PIPELINE_TYPES)
    ]
    out: dict[str, str] = {}
    for _, row in rows.drop_duplicates("retriever").sort_values("retriever").iterrows():
        raw = row.get("retriever_settings")
        try:
            settings = json.loads(raw) if isinstance(raw, str) and raw else {}
        except json.JSONDecodeError:
            settings = {}
        out[str(row["retriever"])] = describe({"type": row["retriever_type"], **settings})
    return out


def retrieval_pipelines(
    per_question: pd.DataFrame | None, metrics: pd.DataFrame | None, baseline: str = BASELINE,
    correction: str = "holm", alpha: float = ALPHA, resamples: int = RESAMPLES, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """One JSON-ready document: per (dataset split, pipeline run), both metrics' comparisons."""
    runs = pipeline_runs(metrics)
    docs = {m: retrieval_vs_baseline(per_question, metric=m, variant=VARIANT, baseline=baseline, correction=correction,
                                     alpha=alpha, resamples=resamples, seed=seed, metrics=metrics, runs=set(runs))
            for m in METRICS} if runs else {}  # fmt: skip
    rows: dict[tuple, dict[str, Any]] = {}
    for metric, doc in docs.items():
        for c in doc["comparisons"]:
            key = (*(c[g] for g in GROUP), c["retriever"])
            row = rows.setdefault(
                key, {**{g: c[g] for g in GROUP}, "run": c["retriever"], "definition": runs.get(c["retriever"], "")}
            )
            row[metric] = {k: c[k] for k in ("n_common", "mean", "mean_baseline", "diff", "p_value", "p_adjusted",
                                             "significant", "reason")}  # fmt: skip
    first = next(iter(docs.values()), None)
    return {
        "unit": "fraction",
        "baseline": baseline,
        "metrics": dict(METRICS),
        "runs": runs,
        "method": {
            "test": first["method"]["test"] if first else None,
            "correction": {m: d["method"]["correction"] for m, d in docs.items()},
            "correction_method": correction,
            "alpha": alpha,
        },
        "rows": list(rows.values()),
        "reason": None if runs else NO_PIPELINES,
    }


def caption(doc: dict[str, Any]) -> str:
    name = CORRECTION_NAMES.get(doc["method"]["correction_method"], doc["method"]["correction_method"])
    text = CORRECTION_TEXT.get(doc["method"]["correction_method"], doc["method"]["correction_method"])
    sizes = ", ".join(f"{METRICS[m]} m = {c['family_size']}" for m, c in doc["method"]["correction"].items())
    return (
        f"Each fused or reranked run (retrieval.pipelines) against {doc['baseline']} on the same queries "
        f"(trec_eval), unit fraction (0–1); n = queries both runs scored. Δ = mean(run − {doc['baseline']}); "
        f"p = two-sided paired sign-flip randomization test; p {name} = p adjusted by {text} within each "
        f"metric over every pipeline run on every dataset split ({sizes}); * = p {name} < "
        f"{doc['method']['alpha']}. {SAMPLE_NOTE}"
    )


def _cells(part: Mapping[str, Any] | None) -> list[str]:
    if not part or part.get("p_value") is None:
        return ["n/a", "", ""]
    star = " *" if part["significant"] else ""
    return [_f(part["mean"]), _f(part["diff"], sign=True), f"{_p(part['p_value'])} / {_p(part['p_adjusted'])}{star}"]


def _table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    name = CORRECTION_NAMES.get(doc["method"]["correction_method"], doc["method"]["correction_method"])
    b = doc["baseline"]
    head = ["dataset", "split", "serialization", "run", "pipeline", "n"]
    for label in METRICS.values():
        head += [label, f"Δ {label} vs {b}", f"p / p {name}"]
    notes: list[str] = []
    rows = []
    for r in doc["rows"]:
        parts = [r.get(m) for m in METRICS]
        for part in parts:
            reason = (part or {}).get("reason")
            if reason and reason not in notes:
                notes.append(reason)
        n = max((p or {}).get("n_common") or 0 for p in parts)
        cells = [str(r[g]) for g in GROUP] + [r["run"], r["definition"], str(n)]
        for part in parts:
            shown = _cells(part)
            if shown[0] == "n/a" and (part or {}).get("reason"):
                shown[0] = f"n/a [{notes.index(part['reason']) + 1}]"
            cells += shown
        rows.append(cells)
    return head, rows, notes


def to_markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Retrieval pipelines vs {doc['baseline']}", ""]
    if doc["reason"]:
        return "\n".join([*lines, doc["reason"] + ".", ""])
    head, rows, notes = _table(doc)
    return "\n".join([*lines, caption(doc), "", *markdown_table(head, rows, notes)]) + "\n"


def to_html(doc: dict[str, Any]) -> str:
    esc = html.escape
    out = ["<!DOCTYPE html><meta charset='utf-8'>", f"<h2>Retrieval pipelines vs {esc(doc['baseline'])}</h2>"]
    if doc["reason"]:
        return "\n".join([*out, f"<p>{esc(doc['reason'])}.</p>"]) + "\n"
    head, rows, notes = _table(doc)
    out.append(f"<p>{esc(caption(doc))}</p>")
    out += html_table(head, rows, notes)
    return "\n".join(out) + "\n"


def render(
    per_question: pd.DataFrame | None,
    metrics: pd.DataFrame | None,
    out_dir: str | Path,
    name: str = "retrieval_pipelines",
    **options: Any,
) -> dict[str, Any]:
    """Write <name>.{md,html,json} into out_dir; returns the document."""
    doc = retrieval_pipelines(per_question, metrics, **options)
    out_dir = Path(out_dir)
    write_text(to_markdown(doc), out_dir / f"{name}.md")
    write_text(to_html(doc), out_dir / f"{name}.html")
    write_json(doc, out_dir / f"{name}.json")
    return doc
