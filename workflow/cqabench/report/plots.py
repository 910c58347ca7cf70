"""Figures of the report: effect of k (DEXTER Figure 2), retriever × dataset heatmap, TANQ by skill.

Every function writes a PNG even when there is nothing to draw (it then says so in the image),
so the report rule's outputs always exist and a partial matrix still renders.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: cluster nodes and CI have no display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from cqabench.io import atomic_path  # noqa: E402

# Which answer metric a dataset is judged by in DEXTER (first one present wins).
PRIMARY_METRICS = ("cover_em", "accuracy", "f1_ans", "em_tol", "rms_f1", "f1", "em")


def _save(fig, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def _empty(path: str | Path, title: str, why: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    _save(fig, path)


def primary_metric(frame: pd.DataFrame, dataset: str) -> str | None:
    present = set(frame.loc[frame["dataset"] == dataset, "metric"].dropna().astype(str))
    return next((m for m in PRIMARY_METRICS if m in present), None)


def k_effect_data(metrics: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per dataset: rows (series, k, value) for its primary metric, series = llm/prompt/retriever/setting."""
    need = {"stage", "dataset", "metric", "k", "value"}
    if metrics.empty or not need <= set(metrics.columns):
        return {}
    gen = metrics[(metrics["stage"] == "generation") & metrics["k"].notna()].copy()
    out = {}
    for dataset in sorted(gen["dataset"].dropna().unique()):
        metric = primary_metric(gen, dataset)
        part = gen[(gen["dataset"] == dataset) & (gen["metric"] == metric)].copy()
        parts = [c for c in ("llm", "prompt", "retriever", "setting") if c in part.columns]
        part["series"] = part[parts].astype(str).agg(" / ".join, axis=1) if parts else "all"
        part["k"] = part["k"].astype(int)
        part = part.groupby(["series", "k"], as_index=False)["value"].mean()
        part.attrs["metric"] = metric
        out[dataset] = part
    return out


def plot_k_effect(metrics: pd.DataFrame, path: str | Path) -> None:
    data = k_effect_data(metrics)
    title = "Effect of the number of retrieved documents k on answer quality"
    if not data or all(len(d["k"].unique()) == 0 for d in data.values()):
        _empty(path, title, "no generation cells with k yet")
        return
    n = len(data)
    cols = min(3, n)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.4 * rows), squeeze=False)
    for ax, (dataset, part) in zip(axes.flat, data.items()):
        for series, line in part.groupby("series"):
            line = line.sort_values("k")
            ax.plot(line["k"], line["value"], marker="o", label=series)
        ax.set_title(dataset)
        ax.set_xlabel("k")
        ax.set_ylabel(part.attrs.get("metric") or "value")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title)
    _save(fig, path)


def heatmap_data(metrics: pd.DataFrame, metric: str = "ndcg_cut_10") -> pd.DataFrame:
    """retriever × dataset means of one retrieval metric (NaN where not run)."""
    need = {"stage", "dataset", "retriever", "metric", "value"}
    if metrics.empty or not need <= set(metrics.columns):
        return pd.DataFrame()
    part = metrics[(metrics["stage"] == "retrieval") & (metrics["metric"] == metric)]
    if part.empty:
        return pd.DataFrame()
    return part.pivot_table(index="retriever", columns="dataset", values="value", aggfunc="mean")


def plot_heatmap(metrics: pd.DataFrame, path: str | Path, metric: str = "ndcg_cut_10") -> None:
    grid = heatmap_data(metrics, metric)
    title = f"{metric}: retriever × dataset"
    if grid.empty:
        _empty(path, title, "no retrieval cells yet")
        return
    fig, ax = plt.subplots(figsize=(1.3 * grid.shape[1] + 2.5, 0.6 * grid.shape[0] + 1.8))
    image = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis", aspect="auto", vmin=0)
    ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=30, ha="right")
    ax.set_yticks(range(grid.shape[0]), grid.index)
    for (i, j), v in np.ndenumerate(grid.to_numpy(dtype=float)):
        ax.text(j, i, "—" if np.isnan(v) else f"{v:.3f}", ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(image, ax=ax)
    ax.set_title(title)
    _save(fig, path)


def skill_data(per_question: pd.DataFrame, dataset: str = "tanq", metric: str = "rms_f1") -> pd.DataFrame:
    """Mean score per (skill, cell series): a question with several skills counts for each."""
    need = {"dataset", "metric", "value", "skills"}
    if per_question.empty or not need <= set(per_question.columns):
        return pd.DataFrame()
    part = per_question[(per_question["dataset"] == dataset) & (per_question["metric"] == metric)].copy()
    if part.empty:
        return pd.DataFrame()
    part["skill"] = part["skills"].map(lambda s: json.loads(s) if isinstance(s, str) and s else ["(none)"])
    part = part.explode("skill")
    parts = [c for c in ("llm", "prompt", "setting") if c in part.columns]
    part["series"] = part[parts].astype(str).agg(" / ".join, axis=1) if parts else "all"
    return part.pivot_table(index="skill", columns="series", values="value", aggfunc="mean")


def plot_skills(per_question: pd.DataFrame, path: str | Path, dataset: str = "tanq", metric: str = "rms_f1") -> None:
    grid = skill_data(per_question, dataset, metric)
    title = f"{dataset}: {metric} by skill"
    if grid.empty:
        _empty(path, title, f"no per-question {metric} scores for {dataset} yet")
        return
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * grid.shape[0] + 2), 4))
    grid.plot.bar(ax=ax)
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.legend(fontsize=6)
    _save(fig, path)
