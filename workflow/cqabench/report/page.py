"""The report page: one self-contained HTML file a researcher can publish as it is.

`snakemake --report` bundles files with their captions but opens on the rule graph and says
nothing about what was run; the parts (paper tables, plots, answers by setting) live in separate
files. This page puts them in one order a reader follows: what was run (configuration name and
hash, data, models, date, git commit), the paper tables, DEXTER's Figure 2, the retriever ×
dataset heatmap (with n and Δ to the paper as a table too, so the numbers are text, not only
pixels), the retrieval significance table (each run vs BM25, Holm-corrected), the retrieval
pipelines table (fused and reranked runs vs BM25, nDCG@10 and Recall@100), the TANQ breakdowns
beside the paper's values, parse rates, answers by setting, per-rule wall time and peak memory
from Snakemake's `benchmark:` files, and links to the fact table as CSV and HTML. Images are
embedded as data URIs so the page is one file (Figure 2 as SVG); a figure with nothing to draw
(figures.json, written by report-plots) is a sentence saying why, never an empty image. The fact
table views are written beside it (`cqabench.report.fact_views`) and linked.

Everything here reads files the other report rules wrote; nothing is recomputed except the
heatmap's table (from the fact table and the paper YAML) and the benchmark summary.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import math
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from cqabench.common import provenance
from cqabench.common.io import write_text
from cqabench.common.job_memory import peak_with_log
from cqabench.common.layout import results_dir
from cqabench.report.comparability import RunContext, describe
from cqabench.report.environments import environments
from cqabench.report.fact_views import write_fact_table_views  # noqa: F401  (the CLI's import)
from cqabench.report.model_limits import limits_html
from cqabench.report.plots import heatmap_cells, heatmap_not_comparable, heatmap_paper, metric_name, read_manifest

esc = html.escape

# Snakemake benchmark columns kept on the page: wall seconds and peak resident memory (MB).
BENCHMARK_COLUMNS = ("s", "max_rss")
TANQ_PREFIX = "tanq_"

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; max-width: 1250px;
       padding: 0 1.5rem 4rem; color: #1b1b1b; line-height: 1.45; }
h1 { margin-top: 1.5rem; } h2 { border-bottom: 2px solid #ddd; padding-bottom: .2rem; margin-top: 2.5rem; }
table { border-collapse: collapse; font-size: 0.85rem; margin: .6rem 0; }
th, td { border: 1px solid #bbb; padding: 3px 6px; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
.caption p, p.caption { font-size: 0.85rem; color: #333; margin: .25rem 0; }
.run th { width: 13rem; }
nav ol { columns: 2; font-size: 0.95rem; }
figure { margin: 1rem 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85rem; color: #333; }
.warn { background: #fff4d6; padding: .5rem .8rem; border-left: 4px solid #e0a800; }
.no-figure { font-size: 0.9rem; color: #333; background: #f5f5f5; padding: .5rem .8rem; border-left: 4px solid #999; }
table.part { margin-top: .2rem; }
"""


@dataclass
class Section:
    """One numbered section of the page: its anchor id, heading and HTML body."""

    id: str
    title: str
    body: str
    children: list[str] = field(default_factory=list)  # ids of the tables it holds, for tests / links


MIME = {".png": "image/png", ".svg": "image/svg+xml"}


def data_uri(path: str | Path) -> str | None:
    """A PNG or SVG as a data: URI (the page stays one file); None when the file is absent or empty."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    return f"data:{MIME.get(path.suffix, 'image/png')};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def html_fragment(path: str | Path) -> str | None:
    """The body of one of our HTML tables (its doctype / meta line dropped), None when absent."""
    path = Path(path)
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    return re.sub(r"^<!DOCTYPE html>(<meta[^>]*>)?\s*", "", text, flags=re.IGNORECASE)


def _figure(
    path: str | Path, alt: str, caption: str, status: dict[str, Any] | None = None, also: str | Path | None = None
) -> str:
    """The figure as an embedded image, or, when report-plots drew nothing (`status`: figures.json),
    a sentence saying why there is none. `also`: the same figure in another format, linked."""
    if status is not None and not status.get("drawn", True):
        return f'<p class="no-figure">No figure: {esc(str(status.get("reason") or "nothing to draw"))}.</p>'
    uri = data_uri(path)
    if uri is None:
        return f'<p class="warn">{esc(alt)}: {esc(str(path))} is missing.</p>'
    kind = Path(path).suffix.lstrip(".").upper()
    extra = f" Also as {Path(also).suffix.lstrip('.').upper()}: {esc(Path(also).name)}." if also else ""
    width = svg_width_px(path) if kind == "SVG" else None
    size = f' width="{width}"' if width else ""
    return (
        f'<figure><img src="{uri}" alt="{esc(alt)}" data-format="{esc(kind)}"{size}>'
        f"<figcaption>{esc(caption)}{extra}</figcaption></figure>"
    )


def svg_width_px(path: str | Path, dpi: int = 120) -> int | None:
    """Display width of a matplotlib SVG at the PNGs' resolution (its width is in points, which a
    browser shows at 96 dpi, a fifth smaller than the 120-dpi PNG beside it)."""
    head = Path(path).read_text(encoding="utf-8", errors="replace")[:2000]
    found = re.search(r'<svg[^>]*\bwidth="([0-9.]+)pt"', head)
    return round(float(found.group(1)) * dpi / 72) if found else None


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(frame: pd.DataFrame, numeric: set[str] | None = None, table_id: str | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{esc(str(c))}</th>" for c in frame.columns)
    rows = []
    for record in frame.to_dict("records"):
        cells = "".join(
            f'<td class="num">{esc(_fmt(record[c]))}</td>' if c in numeric else f"<td>{esc(_fmt(record[c]))}</td>"
            for c in frame.columns
        )
        rows.append(f"<tr>{cells}</tr>")
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f'<div class="scroll"><table{ident}><tr>{head}</tr>{"".join(rows)}</table></div>'


# ---- what was run ----


def run_facts(
    config: dict[str, Any],
    metrics: pd.DataFrame,
    repo: str | Path = ".",
    now: dt.datetime | None = None,
    results_at: dt.datetime | None = None,
) -> list[tuple[str, str]]:
    """(label, text) rows of "what was run": configuration, data, models, date, commit, versions.

    The config hash and commit are computed here (provenance.config_hash / git_commit) so the
    page states them even when the fact table's provenance columns are null; commits recorded in
    the fact table are listed too when they differ from the checkout's.
    """
    now = now or dt.datetime.now(dt.UTC)
    facts = [("Configuration", f"{config.get('name', 'unnamed')} (sha256 {provenance.config_hash(config)[:16]}…)")]
    sizes = _dataset_sizes(metrics)
    data = []
    for name, spec in (config.get("datasets") or {}).items():
        split_text = ", ".join(str(s) for s in spec.get("splits", []))
        n = sizes.get(name)
        data.append(f"{name} ({split_text}{'; ' + n if n else ''})")
    facts.append(("Data", "; ".join(data) or "none configured"))
    retrieval = config.get("retrieval") or {}
    retrievers = config.get("retrievers") or {}
    shown = []
    for name in retrieval.get("retrievers", []):
        settings = retrievers.get(name, {})
        model = settings.get("model")
        shown.append(f"{name} ({settings.get('type', '?')}{', ' + str(model) if model else ''})")
    facts.append(("Retrievers", ", ".join(shown) or "none"))
    llms = config.get("llms") or {}
    generation = config.get("generation") or {}
    models = [
        f"{n} ({llms.get(n, {}).get('backend', '?')}: {llms.get(n, {}).get('source') or llms.get(n, {}).get('model', '?')})"
        for n in generation.get("llms", [])
    ]
    facts.append(("LLMs", ", ".join(models) or "none"))
    listed = {key: ", ".join(str(v) for v in generation.get(key, [])) or "-" for key in ("prompts", "settings", "k")}
    sampling = json.dumps(generation.get("sampling", {}), sort_keys=True)
    run = f"prompts {listed['prompts']}; settings {listed['settings']}; k = {listed['k']}; sampling {sampling}"
    facts.append(("Generation", run))
    commit = provenance.git_commit(repo)
    recorded = sorted({str(c) for c in metrics.get("git_commit", pd.Series(dtype=object)).dropna()} - {commit or ""})
    facts.append(
        (
            "Git commit",
            (commit or "unknown (not a git checkout)")
            + (f"; fact-table rows also from {', '.join(recorded)}" if recorded else ""),
        )
    )
    date = now.strftime("%Y-%m-%d %H:%M UTC") + " (this page)"
    if results_at is not None:
        date = results_at.strftime("%Y-%m-%d %H:%M UTC") + " (fact table written); " + date
    facts.append(("Date", date))
    versions = provenance.package_versions(("cqabench", "snakemake", "pandas", "pyarrow", "scipy", "matplotlib"))
    software = {
        k: v for k, v in versions.items() if k in ("cqabench", "snakemake", "pandas", "pyarrow", "scipy", "matplotlib")
    }
    facts.append(
        (
            "Software: this page (report job)",
            f"Python {platform.python_version()}; " + ", ".join(f"{k} {v}" for k, v in software.items()),
        )
    )
    facts += environments(metrics) or [("Software: numbers", "no fact-table row records its environment")]
    facts.append(("Fact table", f"{len(metrics)} rows × {len(metrics.columns)} columns"))
    return facts


def dataset_setup(config: dict[str, Any], metrics: pd.DataFrame) -> pd.DataFrame:
    """Per configured dataset: split, relevance mode, question selection, corpus and n, the
    fields a paper cell's comparability is judged on (cqabench.report.comparability)."""
    run, sizes = RunContext.of(config), _dataset_sizes(metrics)
    rows = [
        {"dataset": name, **describe(run, name), "n": sizes.get(name, "")} for name in (config.get("datasets") or {})
    ]
    return pd.DataFrame(rows, columns=["dataset", "split", "relevance", "questions", "corpus", "n"])


def _dataset_sizes(metrics: pd.DataFrame) -> dict[str, str]:
    """dataset -> "retrieval n=100, generation n=30": the most queries / questions a cell of each
    stage was evaluated on (the fact table's `n`; a metric with nothing to evaluate has n=0)."""
    if metrics.empty or not {"dataset", "n", "stage"} <= set(metrics.columns):
        return {}
    out: dict[str, list[str]] = {}
    values = metrics.assign(n=pd.to_numeric(metrics["n"], errors="coerce")).dropna(subset=["n"])
    for (dataset, stage), part in values.groupby(["dataset", "stage"], sort=True):
        out.setdefault(str(dataset), []).append(f"{stage} n={int(part['n'].max())}")
    return {k: ", ".join(v) for k, v in out.items()}


# ---- benchmarks ----


def read_benchmarks(root: str | Path) -> pd.DataFrame:
    """Every Snakemake benchmark TSV under `root` as rows: rule, job (path), s, max_rss (MB).

    The rule is the first path part under `root` (results/<name>/benchmarks/<rule>/...tsv, or
    <rule>.tsv for rules without wildcards). A file with repeated measurements contributes each;
    the last one's max_rss is at least the kernel peak the job's log states (logs/ beside
    `root`: cqabench.estimate.measured).
    """
    root = Path(root)
    rows = []
    for path in sorted(root.rglob("*.tsv")) if root.is_dir() else []:
        rel = path.relative_to(root)
        rule = rel.parts[0].removesuffix(".tsv")
        try:
            frame = pd.read_csv(path, sep="\t")
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
            continue
        records = frame.to_dict("records")
        for i, record in enumerate(records):
            row = {c: pd.to_numeric(record.get(c), errors="coerce") for c in BENCHMARK_COLUMNS}
            if i == len(records) - 1:  # the log is the last run's
                row["max_rss"] = peak_with_log(float(row["max_rss"]), (root.parent / "logs" / rel).with_suffix(".log"))
            rows.append({"rule": rule, "job": str(rel.with_suffix("")), **row})
    return pd.DataFrame(rows, columns=["rule", "job", *BENCHMARK_COLUMNS])


_STAMP = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def read_run_logs(log_dir: str | Path) -> pd.DataFrame:
    """Wall time per finished job from Snakemake's own run logs (.snakemake/log/*.snakemake.log).

    The fallback for jobs that ran before their rule declared `benchmark:`: a job's start is the
    timestamp above its "rule X:" block, its end the one above "Finished jobid: N (Rule: X)"
    (one-second resolution; no memory). Per rule only the newest log that finished one of its
    jobs counts, so a rerun does not add to an older run. Rows: rule, job (log name), s.
    """
    log_dir = Path(log_dir)
    rows: list[dict[str, Any]] = []
    for path in sorted(log_dir.glob("*.snakemake.log")) if log_dir.is_dir() else []:
        stamp: dt.datetime | None = None
        pending: str | None = None
        started: dict[str, tuple[str, dt.datetime]] = {}
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if m := _STAMP.match(line):
                stamp = dt.datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
            elif m := _RULE.match(line):
                pending = m.group(1)
            elif (m := _JOBID.match(line)) and pending and stamp:
                started[m.group(1)] = (pending, stamp)
                pending = None
            elif (m := _FINISHED.match(line)) and stamp and m.group(1) in started:
                rule, begin = started.pop(m.group(1))
                rows.append({"rule": rule, "job": path.name, "s": (stamp - begin).total_seconds()})
    frame = pd.DataFrame(rows, columns=["rule", "job", "s"])
    if frame.empty:
        return frame
    newest = frame.groupby("rule")["job"].transform("max")
    return frame[frame["job"] == newest].reset_index(drop=True)


def benchmark_summary(
    benchmarks: pd.DataFrame, rules: list[str] | None = None, run_logs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per rule: jobs, total and longest wall time (s), peak RSS (MB) of its largest job.

    A rule without benchmark files takes its wall times from `run_logs` (read_run_logs; no
    RSS there); rules named in `rules` with neither are kept as rows with 0 jobs, so the page
    says which rules have not run or left no record.
    """
    columns = ["rule", "jobs", "wall s (total)", "wall s (longest job)", "peak RSS MB (largest job)", "largest job"]
    out = []
    for rule, part in benchmarks.groupby("rule", sort=True) if not benchmarks.empty else []:
        rss = part["max_rss"]
        biggest = part.loc[rss.idxmax(), "job"] if rss.notna().any() else ""
        out.append(
            {
                "rule": rule,
                "jobs": len(part),
                "wall s (total)": float(part["s"].sum()),
                "wall s (longest job)": float(part["s"].max()),
                "peak RSS MB (largest job)": float(rss.max()) if rss.notna().any() else math.nan,
                "largest job": biggest,
            }
        )
    seen = {r["rule"] for r in out}
    for rule, part in run_logs.groupby("rule", sort=True) if run_logs is not None and not run_logs.empty else []:
        if rule in seen or (rules and rule not in rules):  # e.g. the target rule `all`
            continue
        out.append(
            {
                "rule": rule,
                "jobs": len(part),
                "wall s (total)": float(part["s"].sum()),
                "wall s (longest job)": float(part["s"].max()),
                "peak RSS MB (largest job)": math.nan,
                "largest job": f"wall time from Snakemake's log {part['job'].iloc[0]} (no RSS: no benchmark file)",
            }
        )
        seen.add(rule)
    out.sort(key=lambda r: r["rule"])
    out += [
        {
            "rule": r,
            "jobs": 0,
            "wall s (total)": math.nan,
            "wall s (longest job)": math.nan,
            "peak RSS MB (largest job)": math.nan,
            "largest job": "no benchmark file and not in a Snakemake log",
        }
        for r in rules or []
        if r not in seen
    ]
    return pd.DataFrame(out, columns=columns)


# ---- parse rates ----


def parse_rates(answers: dict[str, Any]) -> pd.DataFrame:
    """One row per (dataset, split, llm / prompt), one column per setting (retriever@k): the share
    of questions whose final answer could be extracted, from answers_by_setting.json."""
    cells = pd.DataFrame(answers.get("cells", []))
    if cells.empty or "parse_rate" not in cells.columns:
        return pd.DataFrame()
    cells = cells.drop_duplicates("cell_id")
    cells["setting"] = [
        s if s != "rag" else f"rag {r}@{int(k)}" for s, r, k in zip(cells["setting"], cells["retriever"], cells["k"])
    ]
    cells["group"] = cells["llm"].astype(str) + " / " + cells["prompt"].astype(str)
    order = sorted(cells["setting"].unique(), key=lambda s: (0 if s == "closed" else 2 if s == "oracle" else 1, s))
    table = cells.pivot_table(
        index=["dataset", "split", "group"], columns="setting", values="parse_rate", aggfunc="first"
    )
    table = table.reindex(columns=order).reset_index()
    table.columns.name = None
    return table.rename(columns={"group": "llm / prompt"})


# ---- the page ----


def heatmap_table(
    metrics: pd.DataFrame, specs: list, metric: str = "ndcg_cut_10", run: RunContext | None = None
) -> str:
    """The heatmap's numbers as text: ours, n, the paper's and Δ per (retriever, dataset); a cell
    the paper table marks not comparable (judged with `run`, as the table does) reads "not
    comparable [i]" instead of a Δ, its reason numbered under the table."""
    paper, name = heatmap_paper(specs, metric)
    cells = heatmap_cells(metrics, metric, paper, heatmap_not_comparable(metrics, specs, metric, run))
    if cells.empty:
        return "<p>No retrieval cells.</p>"
    apart = list(
        dict.fromkeys(
            r for r, p in zip(cells["not_comparable"], cells["paper"]) if isinstance(r, str) and not pd.isna(p)
        )
    )
    shown = cells.assign(
        ours=[
            ("–" if isinstance(r, str) else "") if math.isnan(v) else f"{v:.3f}"
            for v, r in zip(cells["value"], cells["reason"])
        ],
        n=[_fmt(int(n)) if not pd.isna(n) else "" for n in cells["n"]],
        paper=[_fmt(p) for p in cells["paper"]],
        delta=[
            f"{d:+.3f}"
            if not pd.isna(d)
            else f"not comparable [{apart.index(why) + 1}]"
            if isinstance(why, str) and why in apart
            else ""
            for d, why in zip(cells["delta"], cells["not_comparable"])
        ],
    )
    shown = shown[(shown["ours"] != "") | (shown["paper"] != "")]
    shown = shown.rename(columns={"ours": metric_name(metric), "paper": f"paper ({name})", "delta": "Δ"})
    notes = "".join(
        f'<p class="caption">[{i}] not comparable with {esc(name)}: {esc(why)}</p>' for i, why in enumerate(apart, 1)
    )
    return (
        _table(
            shown[["retriever", "dataset", metric_name(metric), "n", f"paper ({name})", "Δ", "reason"]],
            numeric={metric_name(metric), "n", f"paper ({name})", "Δ"},
            table_id="heatmap-numbers",
        )
        + notes
    )


def build_sections(
    *,
    config: dict[str, Any],
    metrics: pd.DataFrame,
    tables_dir: str | Path,
    plots_dir: str | Path,
    table_ids: list[str],
    specs: list,
    benchmarks_dir: str | Path,
    rules: list[str],
    fact_csv: str,
    fact_html: str,
    repo: str | Path = ".",
    snakemake_logs: str | Path | None = None,
    now: dt.datetime | None = None,
    results_at: dt.datetime | None = None,
    estimate_dir: str | Path | None = None,
    estimate_comparison: pd.DataFrame | None = None,
) -> list[Section]:
    """The page's sections in reading order (see the module docstring)."""
    tables_dir, plots_dir = Path(tables_dir), Path(plots_dir)
    tree = results_dir(str(config.get("name", "unnamed")))  # the config's results tree (cqabench.common.layout)
    sections = []
    facts = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in run_facts(config, metrics, repo, now, results_at)
    )
    paper_data = bool((config.get("report") or {}).get("paper_data"))
    caveat = (
        ""
        if paper_data
        else (
            '<p class="warn">This run is on the configuration\'s own questions (the bundled sample for '
            "config/config.yaml), not the papers' data: n is small and Δ to the paper measures the sample, "
            "not the method's fidelity. config/dexter.yaml and config/tanq.yaml are the full reproductions.</p>"
        )
    )
    setup = dataset_setup(config, metrics)
    setup_html = (
        (
            '<p class="caption">Per dataset: the evaluated split, the relevance mode (qrels and oracle '
            "documents; datasets.&lt;ds&gt;.relevance, default paper), the question selection, the corpus "
            "searched and the splits it is built from, and the most questions a cell was evaluated on. A "
            "paper-table cell is judged OK / FAIL only where these are the paper's.</p>"
            + _table(setup, table_id="dataset-setup")
        )
        if not setup.empty
        else ""
    )
    sections.append(Section("run", "What was run", f'<table class="run">{facts}</table>{setup_html}{caveat}'))

    def tables(ids: list[str]) -> tuple[str, list[str]]:
        parts, found = [], []
        for table_id in ids:
            fragment = html_fragment(tables_dir / f"{table_id}.html")
            if fragment is None:
                parts.append(f'<p class="warn">{esc(table_id)}: table not written.</p>')
                continue
            found.append(table_id)
            parts.append(
                f'<section class="paper-table-section" id="section-{esc(table_id)}">'
                f'<div class="scroll">{fragment}</div></section>'
            )
        return "".join(parts), found

    dexter_ids = [t for t in table_ids if not t.startswith(TANQ_PREFIX)]
    tanq_ids = [t for t in table_ids if t.startswith(TANQ_PREFIX)]
    body, found = tables(dexter_ids)
    sections.append(
        Section(
            "paper-tables",
            "Paper tables (DEXTER, StrategyQA)",
            '<p class="caption">Each table\'s caption (under it) says what it compares, our n and '
            "split, the unit and how to read its cells.</p>" + body,
            found,
        )
    )
    figures = read_manifest(plots_dir / "figures.json")
    k_effect = figures.get("k_effect") or {}
    panels = "; ".join(f"{p['dataset']} ({p['series']}): {p['n']}" for p in k_effect.get("panels", []))
    svg = plots_dir / "k_effect.svg"
    sections.append(
        Section(
            "k-effect",
            "Figure 2: effect of k on answer quality",
            _figure(
                svg if svg.is_file() else plots_dir / "k_effect.png",
                "DEXTER Figure 2: answer quality against k",
                "The layout of DEXTER's Figure 2: per dataset, the primary answer metric (fraction 0–1) against k, one "
                "line per retriever with 95 % bootstrap error bars; closed-book (dashed) and oracle (dotted) as "
                "horizontal reference lines (a line at 0 is drawn above the x axis)."
                + (f" Questions per panel: {panels}." if panels else ""),
                k_effect or None,
                also=plots_dir / "k_effect.png" if svg.is_file() else None,
            ),
        )
    )
    sections.append(
        Section(
            "heatmap",
            "Retriever × dataset",
            _figure(
                plots_dir / "retriever_heatmap.png",
                "nDCG@10 of each retriever on each dataset",
                "nDCG@10 (fraction 0–1) of each retriever on each dataset; each cell gives n (queries) and Δ to "
                'DEXTER Table 2, or "n.c." where Table 2 marks the cell not comparable (the reason under the figure); '
                "a dash is a dataset without qrels or corpus. The same numbers as text:",
                figures.get("retriever_heatmap"),
            )
            + heatmap_table(metrics, specs, run=RunContext.of(config)),
        )
    )
    fragment = html_fragment(tables_dir / "retrieval_vs_baseline.html")
    if fragment:  # its own <h2> repeats the section heading
        fragment = re.sub(r"^\s*<h2>.*?</h2>", "", fragment, count=1, flags=re.DOTALL)
    sections.append(
        Section(
            "retrieval-significance",
            "Retrieval significance: each run vs the baseline (Holm)",
            f'<div class="scroll" id="retrieval-significance-table">{fragment}</div>'
            if fragment
            else '<p class="warn">retrieval_vs_baseline.html not written.</p>',
            ["retrieval_vs_baseline"] if fragment else [],
        )
    )
    fragment = html_fragment(tables_dir / "retrieval_pipelines.html")
    if fragment:
        fragment = re.sub(r"^\s*<h2>.*?</h2>", "", fragment, count=1, flags=re.DOTALL)
    sections.append(
        Section(
            "retrieval-pipelines",
            "Retrieval pipelines: fused and reranked runs vs the baseline",
            f'<div class="scroll" id="retrieval-pipelines-table">{fragment}</div>'
            if fragment
            else '<p class="warn">retrieval_pipelines.html not written.</p>',
            ["retrieval_pipelines"] if fragment else [],
        )
    )
    body, found = tables(tanq_ids)
    sections.append(
        Section(
            "tanq",
            "TANQ breakdowns and failure types (paper Tables 5–10)",
            body
            + _figure(
                plots_dir / "tanq_skills.png",
                "TANQ RMS F1 by skill",
                "TANQ: mean per-question RMS F1 (fraction 0–1) by reasoning skill, one bar per (LLM / prompt / setting).",
                figures.get("tanq_skills"),
            ),
            found,
        )
    )
    answers_path = tables_dir / "answers_by_setting.json"
    answers = json.loads(answers_path.read_text(encoding="utf-8")) if answers_path.is_file() else {}
    rates = parse_rates(answers)
    sections.append(
        Section(
            "parse-rates",
            "Parse rates of generation cells",
            '<p class="caption">Share of a cell\'s questions whose final answer could be extracted '
            "(fraction 0–1), per dataset and setting; a low rate means the score counts unparsed "
            "answers as wrong. A blank cell is a setting not planned for that dataset (e.g. no "
            "oracle without gold evidence, no RAG without a corpus).</p>"
            + (
                _table(
                    rates,
                    numeric=set(rates.columns) - {"dataset", "split", "llm / prompt"},
                    table_id="parse-rate-table",
                )
                if not rates.empty
                else "<p>No generation cells.</p>"
            ),
        )
    )
    fragment = html_fragment(tables_dir / "answers_by_setting.html")
    if fragment:  # its own <h2> repeats the section heading
        fragment = re.sub(r"^\s*<h2>.*?</h2>", "", fragment, count=1, flags=re.DOTALL)
    sections.append(
        Section(
            "answers",
            "Answers by setting: closed-book, RAG@k, oracle",
            limits_html(answers, paper_data)
            + (
                f'<div class="scroll">{fragment}</div>'
                if fragment
                else '<p class="warn">answers_by_setting.html not written.</p>'
            ),
        )
    )
    logs = read_run_logs(snakemake_logs) if snakemake_logs else None
    summary = benchmark_summary(read_benchmarks(benchmarks_dir), rules, logs)
    sections.append(
        Section(
            "resources",
            "Wall time and peak memory per rule",
            '<p class="caption">From Snakemake\'s <code>benchmark:</code> files '
            f"({esc(tree)}/benchmarks/): wall-clock seconds summed over a rule's jobs and of its longest "
            "job, and the peak resident set size (MB) of its largest job. A rule whose jobs ran "
            "before it declared benchmark: has its wall times from Snakemake's run log "
            "(.snakemake/log, newest run of that rule; whole seconds, no memory); 0 jobs: not "
            "run.</p>"
            + _table(
                summary,
                numeric={"jobs", "wall s (total)", "wall s (longest job)", "peak RSS MB (largest job)"},
                table_id="benchmark-table",
            ),
        )
    )
    if estimate_dir is not None:  # the run's own estimate beside its measurements (cqabench.report.page_costs)
        from cqabench.report.page_costs import section_body, this_machine

        sections.append(
            Section(
                "estimate",
                "Estimated cost beside the measured",
                section_body(estimate_dir, estimate_comparison, this_machine(snakemake_logs)),
            )
        )
    sections.append(
        Section(
            "fact-table",
            "Fact table",
            f"<p>{esc(tree)}/metrics.parquet: {len(metrics)} rows × {len(metrics.columns)} columns, one "
            "row per (cell, metric), every value a fraction 0–1 with its reason when null. "
            f'Views: <a href="{esc(fact_csv)}">CSV</a> · <a href="{esc(fact_html)}">HTML table</a>. '
            "Columns are documented in docs/report.md.</p>",
        )
    )
    return sections


def render_page(sections: list[Section], title: str) -> str:
    """The sections as one HTML document with a numbered table of contents."""
    nav = "".join(f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a></li>' for s in sections)
    body = "".join(
        f'<section id="{esc(s.id)}"><h2>{i}. {esc(s.title)}</h2>{s.body}</section>' for i, s in enumerate(sections, 1)
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1><nav><ol>{nav}</ol></nav>{body}"
        "</body></html>\n"
    )


def write_page(path: str | Path, **kwargs: Any) -> list[Section]:
    """Build the sections (`build_sections` keywords) and write the page; returns the sections."""
    sections = build_sections(**kwargs)
    name = kwargs["config"].get("name", "unnamed")
    write_text(render_page(sections, f"cqabench report: configuration '{name}'"), path)
    return sections
