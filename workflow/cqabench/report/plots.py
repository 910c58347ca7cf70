"""Figures of the report: effect of k (DEXTER Figure 2), retriever × dataset heatmap, TANQ by skill.

Every value plotted is a fraction in 0..1 and each figure says so on its axis or colour bar. A
cell that ran but had nothing to evaluate (null value with a reason) is drawn as "n/a" / a dash
with the reason in the figure's notes, never as 0. Every function writes a PNG even when there is
nothing to draw (it then says so in the image), so the report rule's outputs always exist and a
partial matrix still renders; each returns a `FigureStatus` (`write_manifest` puts them in
figures.json), so the report page prints the sentence instead of an image without content.
"""

from __future__ import annotations

import itertools
import json
import math
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # headless: cluster nodes and CI have no display

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from cqabench.common.io import atomic_path, write_json
from cqabench.evaluation.scoring import PRIMARY
from cqabench.report.answer_cell_summaries import BOOTSTRAP_RESAMPLES, cell_summaries, dataset_rank

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

UNIT_LABEL = "fraction 0–1"
# tab10 without its grey (kept for reference lines) and olive (too pale on white).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
# An oracle that showed the annotators' facts rather than gold documents (context_source facts,
# StrategyQA on the sample) is its own reference line, never drawn as the gold-evidence oracle.
ORACLE_FACTS = "oracle-facts"
REFERENCES: dict[str, tuple[str, LineStyleType]] = {
    "closed": ("closed-book", "--"),
    "oracle": ("oracle (gold evidence)", ":"),
    ORACLE_FACTS: ("oracle (annotators' facts)", "-."),
}


@dataclass
class FigureStatus:
    """What a plot function drew: `drawn` false means the image only says `reason` (no data marks)."""

    drawn: bool
    reason: str | None = None
    panels: list[dict] = field(default_factory=list)  # k-effect: dataset, series, n per panel


def _save(fig, path: str | Path, svg: str | Path | None = None) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    if svg is not None:
        # text stays text (selectable, small), not glyph outlines
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "cqabench"}), atomic_path(svg) as tmp:
            fig.savefig(tmp, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def _empty(path: str | Path, title: str, why: str, svg: str | Path | None = None) -> FigureStatus:
    fig, ax = plt.subplots(figsize=(6, 2))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    _save(fig, path, svg)
    return FigureStatus(False, why)


def write_manifest(statuses: dict[str, FigureStatus], path: str | Path) -> None:
    """figures.json: per figure whether it was drawn, why not, and (Figure 2) n per panel."""
    write_json({name: asdict(status) for name, status in statuses.items()}, path)


def read_manifest(path: str | Path) -> dict[str, dict]:
    """figures.json as written by `write_manifest`; {} when absent or unreadable."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def primary_metric(dataset: str) -> tuple[str, str] | None:
    """The (metric, variant) the k-effect plot shows for a dataset: its first primary metric."""
    metrics = PRIMARY.get(dataset)
    return metrics[0] if metrics else None


def retriever_colours(retrievers) -> dict[str, str]:
    """One colour per retriever, the same in every panel (sorted names -> palette, cycling)."""
    names = sorted({str(r) for r in retrievers if r not in (None, "none")})
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def k_effect_data(
    metrics: pd.DataFrame, per_question: pd.DataFrame | None = None, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES
) -> pd.DataFrame:
    """The points of the k-effect figure: one row per generation cell, its dataset's primary metric.

    Columns: dataset, metric, variant, series (llm / prompt, plus the serialization when there are
    several), setting ("oracle-facts" for an oracle that showed the annotators' facts), retriever ("none" for
    closed / oracle), k (0 for closed / oracle), mean,
    ci_low, ci_high (95 % percentile bootstrap over questions; null without per-question scores
    or for n < 2), n, reason (why mean is null), unit ("fraction").
    """
    cells = cell_summaries(metrics, per_question, seed=seed, resamples=resamples)
    columns = [
        "dataset",
        "metric",
        "variant",
        "series",
        "llm",
        "prompt",
        "serialization",
        "setting",
        "retriever",
        "k",
        "mean",
        "ci_low",
        "ci_high",
        "n",
        "reason",
        "unit",
    ]
    if cells.empty:
        return pd.DataFrame(columns=columns)
    keep = [(ds, *pm) for ds in cells["dataset"].dropna().unique() if (pm := primary_metric(ds))]
    wanted = pd.DataFrame(keep, columns=["dataset", "metric", "variant"])
    part = cells.merge(wanted, on=["dataset", "metric", "variant"])
    several = part["serialization"].nunique(dropna=True) > 1
    part["series"] = part["llm"].astype(str) + " / " + part["prompt"].astype(str)
    if several:
        part["series"] += " / " + part["serialization"].astype(str)
    part["k"] = part["k"].astype(int)
    facts = (part["setting"] == "oracle") & (part["context_source"].astype("string") == "facts").fillna(False)
    part.loc[facts.astype(bool), "setting"] = ORACLE_FACTS
    part = part.sort_values(["dataset", "series", "setting", "retriever", "k"], key=None).reset_index(drop=True)
    return part[columns]


def _top(values) -> float:
    """The y-axis top: 1 for big values, else the next tenth above the largest (at least 0.1)."""
    finite = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    high = max(finite, default=0.0)
    return 1.0 if high > 0.75 else max(0.1, math.ceil((high * 1.1 + 1e-9) * 10) / 10)


def y_range(values) -> tuple[float, float]:
    """The k-effect panel's y limits: [-4 % of the top, top]. The axis starts below 0 so that a line
    at 0 (closed-book or a retriever scoring nothing, common on a small sample) is drawn above the
    x axis instead of being hidden in it; ticks stay on [0, top]."""
    top = _top(values)
    return -0.04 * top, top


def _yerr(frame: pd.DataFrame) -> np.ndarray | None:
    lo = pd.to_numeric(frame["ci_low"], errors="coerce")
    hi = pd.to_numeric(frame["ci_high"], errors="coerce")
    mean = pd.to_numeric(frame["mean"], errors="coerce")
    if lo.isna().all():
        return None
    return np.vstack([(mean - lo).fillna(0).clip(lower=0).to_numpy(), (hi - mean).fillna(0).clip(lower=0).to_numpy()])


def panel_n(part: pd.DataFrame) -> str:
    """The questions behind a panel's points: "n=30", or "n=25–30" when its cells differ (the
    oracle leaves out questions without gold documents); "n=0" when nothing was evaluable."""
    counts = sorted({int(n) for n in pd.to_numeric(part["n"], errors="coerce").dropna()})
    if not counts:
        return "n=0"
    return f"n={counts[0]}" if len(counts) == 1 else f"n={counts[0]}–{counts[-1]}"


def plot_k_effect(
    metrics: pd.DataFrame,
    path: str | Path,
    per_question: pd.DataFrame | None = None,
    k_values: list[int] | None = None,
    seed: int = 0,
    svg: str | Path | None = None,
) -> FigureStatus:
    """DEXTER Figure 2: per dataset (and LLM / prompt), the primary metric against k.

    One line per retriever (bootstrap 95 % error bars), closed-book and oracle as horizontal
    reference lines (dashed / dotted, with a light band for their interval), one legend for the
    whole figure, x ticks at the configured k values (`k_values`, else every k that ran). Each
    panel's title gives its n (questions). The y axis starts a little below 0, so a line at 0
    (a closed-book score of 0 on a small sample) is drawn above the axis, not hidden in it.
    Written as PNG and, with `svg`, as SVG too.
    """
    data = k_effect_data(metrics, per_question, seed)
    title = "Effect of the number of retrieved documents k on answer quality"
    if data.empty:
        return _empty(path, title, "no generation cells yet", svg)
    rag = data[data["setting"] == "rag"]
    ks = sorted({int(k) for k in (k_values or [])} | {int(k) for k in rag["k"]}) or [1]
    colours = retriever_colours(rag["retriever"])
    panels = []
    for series in sorted(data["series"].unique()):
        for dataset in sorted(data.loc[data["series"] == series, "dataset"].unique(), key=dataset_rank):
            panels.append((series, dataset, data[(data["series"] == series) & (data["dataset"] == dataset)]))
    ncols = min(4, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(3.7 * ncols, 3.1 * nrows + 0.9), squeeze=False, layout="constrained"
    )
    notes: list[str] = []
    shown_panels: list[dict] = []
    pad = max(0.6, 0.06 * (ks[-1] - ks[0]))
    gap = min((b - a for a, b in itertools.pairwise(ks)), default=2)
    dodge = min(0.25, 0.5 * gap / max(1, len(colours)))
    for ax, (series, dataset, part) in zip(axes.flat, panels):
        metric, variant = part.iloc[0]["metric"], part.iloc[0]["variant"]
        tops = list(part["mean"]) + list(part["ci_high"])
        for setting, (label, style) in REFERENCES.items():
            ref = part[part["setting"] == setting]
            if ref.empty:
                continue
            row = ref.iloc[0]
            if row["mean"] is None or pd.isna(row["mean"]):
                notes.append(f"{dataset}, {series}: {label} n/a ({row['reason']})")
                continue
            ax.axhline(row["mean"], color="black", linestyle=style, linewidth=1.6, zorder=2, clip_on=False)
            if row["ci_low"] is not None and not pd.isna(row["ci_low"]):
                ax.axhspan(row["ci_low"], row["ci_high"], color="black", alpha=0.05, linewidth=0, zorder=1)
        for retriever, line in part[part["setting"] == "rag"].groupby("retriever"):
            # Retrievers side by side around each k, so their error bars do not hide each other.
            shift = dodge * (sorted(colours).index(retriever) - (len(colours) - 1) / 2)
            line = line.sort_values("k")
            shown = line[line["mean"].notna()]
            for _, row in line[line["mean"].isna()].iterrows():
                notes.append(f"{dataset}, {series}: {retriever} k={row['k']} n/a ({row['reason']})")
            if shown.empty:
                continue
            bars = ax.errorbar(
                shown["k"] + shift,
                shown["mean"].astype(float),
                yerr=_yerr(shown),
                color=colours[retriever],
                marker="o",
                markersize=5,
                linewidth=1.8,
                capsize=3,
                zorder=3,
            )
            for artist in bars.lines[0:1] + tuple(bars.lines[2]):
                artist.set_clip_on(False)  # an all-zero line stays visible on the axis
        if part["mean"].isna().all():
            ax.text(0.5, 0.5, "n/a", transform=ax.transAxes, ha="center", va="center", fontsize=12, color="0.4")
        if part[part["setting"] == "rag"].empty:
            ax.text(0.5, 0.92, "no RAG cells", transform=ax.transAxes, ha="center", va="top", fontsize=8, color="0.35")
        label = metric if variant in ("default", None) else f"{metric} ({variant})"
        n_text = panel_n(part)
        shown_panels.append({"dataset": dataset, "series": series, "n": n_text})
        ax.set_title(f"{dataset} ({n_text})\n{series}", fontsize=9)
        ax.set_xlabel("k (retrieved documents)", fontsize=8)
        ax.set_ylabel(f"{label}, {UNIT_LABEL}", fontsize=8)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlim(ks[0] - pad, ks[-1] + pad)
        low, top = y_range(tops)
        ax.set_ylim(low, top)
        ax.set_yticks([t for t in ax.get_yticks() if 0 <= t <= top + 1e-9])
        ax.tick_params(labelsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles = [Line2D([], [], color=c, marker="o", linewidth=1.8, label=f"RAG: {r}") for r, c in colours.items()]
    handles += [
        Line2D([], [], color="black", linestyle=style, linewidth=1.6, label=label)
        for setting, (label, style) in REFERENCES.items()
        if setting != ORACLE_FACTS or (data["setting"] == ORACLE_FACTS).any()
    ]
    handles.append(
        Line2D(
            [],
            [],
            color="0.3",
            marker="|",
            linestyle="none",
            markersize=10,
            label="error bars / band: 95% bootstrap CI",
        )
    )
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize=8, frameon=False)
    fig.suptitle(f"{title}\n(primary answer metric per dataset, {UNIT_LABEL}; n = questions per panel)", fontsize=11)
    if notes:
        fig.text(0.0, -0.01, "\n".join(dict.fromkeys(notes)), fontsize=7, va="top", ha="left")
    _save(fig, path, svg)
    if data["mean"].isna().all():
        return FigureStatus(False, "every point is n/a: " + "; ".join(dict.fromkeys(notes)), shown_panels)
    return FigureStatus(True, None, shown_panels)


NOT_SEARCHED = "not searched: no retrieval cell for this dataset (no corpus or qrels in this configuration)"


def metric_name(metric: str) -> str:
    """A retrieval metric in words as papers print it: ndcg_cut_10 -> nDCG@10, recall_100 -> Recall@100."""
    names = {"ndcg_cut": "nDCG", "recall": "Recall", "map_cut": "MAP", "P": "P", "recip_rank": "MRR"}
    head, _, cut = metric.rpartition("_")
    if head in names and cut.isdigit():
        return f"{names[head]}@{cut}"
    return names.get(metric, metric)


def heatmap_data(metrics: pd.DataFrame, metric: str = "ndcg_cut_10", reasons: bool = False):
    """retriever × dataset means of one retrieval metric (NaN where not run or n/a).

    With `reasons`, also the retriever × dataset reasons of the n/a cells (None elsewhere).
    """
    need = {"stage", "dataset", "retriever", "metric", "value"}
    empty = (pd.DataFrame(), pd.DataFrame()) if reasons else pd.DataFrame()
    if metrics.empty or not need <= set(metrics.columns):
        return empty
    part = metrics[(metrics["stage"] == "retrieval") & (metrics["metric"] == metric)]
    if part.empty:
        return empty
    index = sorted(part["retriever"].dropna().unique())
    columns = sorted(part["dataset"].dropna().unique(), key=dataset_rank)
    values = part.assign(value=pd.to_numeric(part["value"], errors="coerce"))
    grid = values.pivot_table(index="retriever", columns="dataset", values="value", aggfunc="mean", dropna=False)
    grid = grid.reindex(index=index, columns=columns)
    if not reasons:
        return grid
    why = pd.DataFrame([[None] * len(columns) for _ in index], index=index, columns=columns, dtype=object)
    if "reason" in part.columns:
        for record in part[part["value"].isna()].to_dict("records"):
            if isinstance(record.get("reason"), str) and pd.isna(grid.loc[record["retriever"], record["dataset"]]):
                why.loc[record["retriever"], record["dataset"]] = record["reason"]
    return grid, why


def heatmap_cells(
    metrics: pd.DataFrame,
    metric: str = "ndcg_cut_10",
    paper: dict[tuple[str, str], float] | None = None,
    not_comparable: dict[tuple[str, str], str] | None = None,
) -> pd.DataFrame:
    """The heatmap as one row per (retriever, dataset): value, n, reason, paper, delta,
    not_comparable.

    Columns are every dataset of the fact table, not only those searched: a dataset without a
    retrieval cell (TANQ in the sample: no corpus, no qrels) is a row with value NaN and the
    reason NOT_SEARCHED, so the figure shows it as a dash instead of dropping it. `n` is the
    number of queries behind the value (FinQA's 1.000 from one query reads n=1); `paper` maps
    (retriever, dataset) to the published number (a fraction), `delta` is ours − paper, except
    where `not_comparable` (`heatmap_not_comparable`) gives a reason: there `delta` is empty, as
    in the paper table, and `not_comparable` holds the reason.
    """
    columns = ["retriever", "dataset", "value", "n", "reason", "paper", "delta", "not_comparable"]
    grid, why = heatmap_data(metrics, metric, reasons=True)
    if grid.empty:
        return pd.DataFrame(columns=columns)
    datasets = sorted(set(grid.columns) | set(metrics["dataset"].dropna().astype(str)), key=dataset_rank)
    part = metrics[(metrics["stage"] == "retrieval") & (metrics["metric"] == metric)]
    counts: dict[tuple[str, str], int] = {}
    if "n" in part.columns:
        for record in part.to_dict("records"):
            n = pd.to_numeric(record.get("n"), errors="coerce")
            if not pd.isna(n):
                key = (str(record["retriever"]), str(record["dataset"]))
                counts[key] = max(counts.get(key, 0), int(n))
    paper = paper or {}
    rows = []
    for retriever in grid.index:
        for dataset in datasets:
            searched = dataset in grid.columns
            value = float(grid.loc[retriever, dataset]) if searched else math.nan
            reason = why.loc[retriever, dataset] if searched else NOT_SEARCHED
            published = paper.get((str(retriever), str(dataset)))
            apart = (not_comparable or {}).get((str(retriever), str(dataset)))
            delta = value - published if published is not None and not math.isnan(value) and not apart else None
            rows.append(
                {
                    "retriever": retriever,
                    "dataset": dataset,
                    "value": value,
                    "n": counts.get((str(retriever), str(dataset))),
                    "reason": reason if isinstance(reason, str) else None,
                    "paper": published,
                    "delta": delta,
                    "not_comparable": apart,
                }
            )
    return pd.DataFrame(rows, columns=columns).astype(
        {"reason": object, "paper": float, "delta": float, "not_comparable": object}
    )


def _linear(channel: float) -> float:
    """sRGB channel (0..1) to linear light, as WCAG's relative luminance defines it."""
    return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4


def luminance(rgba) -> float:
    """WCAG 2 relative luminance of a colour (0 black .. 1 white)."""
    r, g, b = (_linear(float(c)) for c in rgba[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(lum_a: float, lum_b: float) -> float:
    """WCAG contrast ratio of two luminances (1 .. 21)."""
    high, low = max(lum_a, lum_b), min(lum_a, lum_b)
    return (high + 0.05) / (low + 0.05)


def text_colour(rgba) -> str:
    """Black or white, whichever has the higher WCAG contrast against the cell colour."""
    lum = luminance(rgba)
    return "black" if contrast(lum, 0.0) >= contrast(lum, 1.0) else "white"


def heatmap_spec(specs: list, metric: str = "ndcg_cut_10") -> Any:
    """The first paper table laid out like the heatmap (rows retriever, columns dataset, this one
    metric, with published cells), or None."""
    for spec in specs:
        if spec.metric == [metric] and spec.rows == ["retriever"] and spec.columns == ["dataset"] and spec.cells:
            return spec
    return None


def heatmap_paper(specs: list, metric: str = "ndcg_cut_10") -> tuple[dict[tuple[str, str], float], str]:
    """The published (retriever, dataset) -> value of `heatmap_spec`'s table, and its short name."""
    spec = heatmap_spec(specs, metric)
    if spec is None:
        return {}, "paper"
    cells = {(r[0], c[0]): v for (r, c), v in spec.published().items()}
    return cells, spec.title.split(":")[0].strip() or spec.id


def heatmap_not_comparable(
    metrics: pd.DataFrame, specs: list, metric: str = "ndcg_cut_10", run: Any = None
) -> dict[tuple[str, str], str]:
    """(retriever, dataset) -> why our cell is not comparable with the paper's, judged exactly as
    the paper table itself judges it (`tables.build_grid` with the run's `RunContext`), so the
    heatmap never prints a Δ that the table marks "not comparable". `run` None: nothing judged."""
    spec = heatmap_spec(specs, metric)
    if spec is None or run is None or metrics.empty:
        return {}
    from cqabench.report.tables import build_grid

    grid = build_grid(metrics, None, spec, run)
    return {(r[0], c[0]): cell.not_comparable for (r, c), cell in grid.cells.items() if cell.not_comparable}


def plot_heatmap(
    metrics: pd.DataFrame,
    path: str | Path,
    metric: str = "ndcg_cut_10",
    paper: dict[tuple[str, str], float] | None = None,
    paper_name: str = "paper",
    not_comparable: dict[tuple[str, str], str] | None = None,
) -> FigureStatus:
    """Retriever × dataset heatmap: value, n queries and Δ to the paper in every cell.

    Datasets without a retrieval cell and cells with nothing to evaluate are dashes (the reason
    under the plot), never dropped; a cell not run is blank grey. A cell the paper table marks
    "not comparable" (`not_comparable`, from `heatmap_not_comparable`) shows "not comparable [i]"
    instead of a Δ, its reason numbered under the plot. Text is black or white by the WCAG
    contrast against its cell, so it stays readable on viridis' yellow and purple.
    """
    name = metric_name(metric)
    title = f"{name} of each retriever on each dataset ({UNIT_LABEL})"
    cells = heatmap_cells(metrics, metric, paper, not_comparable)
    if cells.empty:
        return _empty(path, title, "no retrieval cells yet")
    retrievers = list(dict.fromkeys(cells["retriever"]))
    datasets = list(dict.fromkeys(cells["dataset"]))
    values = (
        cells.pivot(index="retriever", columns="dataset", values="value")
        .reindex(index=retrievers, columns=datasets)
        .to_numpy(dtype=float)
    )
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#eeeeee")
    norm = matplotlib.colors.Normalize(vmin=0.0, vmax=1.0)
    fig, ax = plt.subplots(figsize=(1.45 * len(datasets) + 3.2, 0.85 * len(retrievers) + 2.6), layout="constrained")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, aspect="auto")
    ax.set_xticks(range(len(datasets)), datasets, rotation=30, ha="right")
    ax.set_yticks(range(len(retrievers)), retrievers)
    notes = []
    apart: list[str] = []  # the distinct not-comparable reasons, footnote i is apart[i - 1]
    for record in cells.to_dict("records"):
        i, j = retrievers.index(record["retriever"]), datasets.index(record["dataset"])
        v = record["value"]
        if np.isnan(v):
            if isinstance(record["reason"], str):
                ax.text(j, i, "–", ha="center", va="center", color="black", fontsize=12)
                notes.append(f"{record['dataset']}: {record['reason']}")
            continue
        lines = [f"{v:.3f}"]
        if record["n"] is not None and not pd.isna(record["n"]):
            lines.append(f"n={int(record['n'])}")
        if record["delta"] is not None and not pd.isna(record["delta"]):
            lines.append(f"Δ{record['delta']:+.3f}")
        elif isinstance(record["not_comparable"], str) and not pd.isna(record["paper"]):
            if record["not_comparable"] not in apart:
                apart.append(record["not_comparable"])
            lines.append(f"n.c. [{apart.index(record['not_comparable']) + 1}]")
        ax.text(
            j,
            i,
            "\n".join(lines),
            ha="center",
            va="center",
            color=text_colour(cmap(norm(v))),
            fontsize=10,
            linespacing=1.15,
        )
    fig.colorbar(image, ax=ax, label=f"{name} ({UNIT_LABEL})")
    ax.set_title(
        title
        + "\ncell: our value, n = queries evaluated, Δ = ours − "
        + paper_name
        + (", n.c. = not comparable with " + paper_name + " (no Δ; why below)" if apart else ""),
        fontsize=10,
    )
    legend = "– = nothing to evaluate or not searched (reason below); blank = not run"
    if notes:
        legend += "\n" + "\n".join(f"– {n}" for n in dict.fromkeys(notes))
    if apart:
        legend += "\n" + "\n".join(
            textwrap.fill(f"[{i}] not comparable with {paper_name}: {why}", 150) for i, why in enumerate(apart, 1)
        )
    ax.set_xlabel(legend, fontsize=7, loc="left")
    _save(fig, path)
    if cells["value"].isna().all():
        return FigureStatus(False, f"no retriever has a {name} value on any dataset (every cell n/a or not run)")
    return FigureStatus(True)


NO_SKILL = "(no skill annotated)"


def skill_data(per_question: pd.DataFrame, dataset: str = "tanq", metric: str = "rms_f1") -> pd.DataFrame:
    """Mean score (fraction) per (skill, cell series): a question with several skills counts for each;
    a question without a skill annotation is the row NO_SKILL."""
    part = _skill_rows(per_question, dataset, metric)
    if part.empty:
        return pd.DataFrame()
    return part.pivot_table(index="skill", columns="series", values="value", aggfunc="mean")


def _skill_rows(per_question: pd.DataFrame, dataset: str, metric: str) -> pd.DataFrame:
    need = {"dataset", "metric", "value", "skills"}
    if per_question.empty or not need <= set(per_question.columns):
        return pd.DataFrame()
    part = per_question[(per_question["dataset"] == dataset) & (per_question["metric"] == metric)].copy()
    # a metric scored in several variants (TANQ RMS: official, cqabench_parse) is plotted in the
    # dataset's primary one (scoring.PRIMARY), never averaged across them
    variant = dict(PRIMARY.get(dataset, ())).get(metric)
    if variant is not None and "variant" in part.columns:
        part = part[part["variant"].astype("string") == variant]
    if part.empty:
        return pd.DataFrame()
    part["skill"] = part["skills"].map(
        lambda s: (json.loads(s) or [NO_SKILL]) if isinstance(s, str) and s else [NO_SKILL]
    )
    part = part.explode("skill")
    parts = [c for c in ("llm", "prompt", "setting") if c in part.columns]
    part["series"] = part[parts].astype(str).agg(" / ".join, axis=1) if parts else "all"
    return part


def plot_skills(
    per_question: pd.DataFrame, path: str | Path, dataset: str = "tanq", metric: str = "rms_f1"
) -> FigureStatus:
    """TANQ RMS F1 by skill, one bar per (LLM / prompt / setting). No chart when no question
    scored carries a skill: a bar "(no skill annotated)" alone says nothing about skills, so the
    image and the returned status say why there is none instead."""
    grid = skill_data(per_question, dataset, metric)
    title = f"{dataset}: mean per-question {metric} by skill ({UNIT_LABEL})"
    if grid.empty:
        return _empty(path, title, f"no per-question {metric} scores for {dataset} in this run")
    if list(grid.index) == [NO_SKILL]:
        questions = _skill_rows(per_question, dataset, metric)
        n = questions["qid"].nunique() if "qid" in questions.columns else len(questions)
        return _empty(
            path,
            title,
            f"none of the {n} {dataset} questions scored in this run carries a skill "
            f"annotation (their 'skills' list is empty), so there is no breakdown by skill",
        )
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * grid.shape[0] + 3), 4.2), layout="constrained")
    grid.plot.bar(ax=ax, legend=False)
    for (i, j), v in np.ndenumerate(grid.to_numpy(dtype=float)):
        if np.isnan(v):  # a series without questions of this skill
            width = 0.5 / max(1, grid.shape[1])
            ax.text(i - 0.25 + width * (j + 0.5), 0.01, "n/a", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"{metric} ({UNIT_LABEL})")
    ax.set_xlabel("skill (a question with several skills counts for each)")
    ax.tick_params(axis="x", rotation=30)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    fig.legend(
        loc="outside lower center",
        fontsize=7,
        title="llm / prompt / setting",
        title_fontsize=7,
        ncols=min(3, grid.shape[1]),
        frameon=False,
    )
    _save(fig, path)
    if np.isnan(grid.to_numpy(dtype=float)).all():
        return FigureStatus(False, f"every {metric} by skill is n/a")
    return FigureStatus(True)
