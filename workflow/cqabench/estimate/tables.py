"""The estimate as tables: one row per job (Parquet), one per (rule, model, device) (CSV / Parquet,
the printed table and docs/costs.md), totals, the makespan and the rates behind them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from cqabench.estimate.dag import RULES, rule_family
from cqabench.estimate.model import Cost, JobCosts
from cqabench.estimate.rates import Rate
from cqabench.estimate.schedule import Makespan, critical_path, makespan
from cqabench.estimate.spread import End, Money, at_end, money

SUMMARY_COLUMNS = [
    "rule",
    "model",
    "device",
    "jobs",
    "work",
    "wall_s_per_job",
    "wall_s_max",
    "cpu_h",
    "gpu_h",
    "gpu_h_fast",
    "gpu_h_slow",
    "peak_mb_max",
    "disk_gb",
    "mem_mb_request_max",
    "runtime_min_request_max",
    "assumed_rates",
]


@dataclass
class Estimate:
    """Everything `cqabench estimate` reports for one config."""

    name: str
    costs: list[Cost]
    requests: list[dict[str, int]]
    span: Makespan
    rates: dict[str, Rate]
    corpora: list[dict[str, Any]]
    splits: list[dict[str, Any]]
    gpu_class: str
    ends: dict[str, End]  # the range: "fast" (every rate at its faster bound) and "slow"
    path: list[tuple[str, float]]  # the critical path: (job id, estimated wall s), first job first
    money: list[Money]  # API models: tokens and their price, where one is given
    machine: str = ""  # the node the makespan assumes, in words

    @property
    def totals(self) -> dict[str, float]:
        return {
            "jobs": len(self.costs),
            "cpu_h": sum(c.cpu_s for c in self.costs) / 3600,
            "gpu_h": sum(c.gpu_s for c in self.costs) / 3600,
            "disk_gb": sum(c.disk_mb for c in self.costs) / 1000,
            "peak_mb_max": max((c.peak_mb for c in self.costs), default=0.0),
        }


def build(costs: JobCosts, gpus: int, cores: int, prices: dict[str, tuple[float, float]] | None = None) -> Estimate:
    """The estimate at the rates' values, its range (`ends`), critical path and API money;
    `prices`: model -> (USD per million input tokens, per million output tokens), over the config's
    llms.<name>.price_per_mtok."""
    all_costs = costs.all()
    requests = [costs.request(c.rule, c.wildcards) for c in all_costs]
    span = makespan(costs.jobs, all_costs, gpus, cores)
    plan, sizes = costs.plan, costs.sizes
    corpora = sorted(
        {plan.corpus_of(ds) for ds in plan.datasets if ds in plan.retrieval_datasets}
        | {j.wildcards["corpus"] for j in costs.jobs if j.rule == "pool_corpus"}
    )
    corpus_rows = [
        {"corpus": c, "documents": sizes.corpus_documents(c), "source": sizes.corpus_source(c)} for c in corpora
    ]
    split_rows = []
    for ds in plan.datasets:
        for sp in dict.fromkeys(plan.splits(ds) + plan.corpus_splits(ds)):
            s = sizes.split(ds, sp)
            split_rows.append(
                {
                    "dataset": ds,
                    "split": sp,
                    "questions": s.questions,
                    "selected": s.selected,
                    "documents": s.documents,
                    "source": s.source,
                    "counted": s.counted,
                    "upper_bound": s.upper_bound,
                }
            )
    ends = {b: at_end(costs, b, gpus, cores) for b in ("fast", "slow")}
    used = {k: costs.rates.used[k] for k in sorted({k for c in all_costs for k in c.rates})}
    classes = costs.rates.device_classes
    machine = (
        f"{gpus} x {costs.gpu_class} ({classes.get(costs.gpu_class, '?')}) and {cores} CPU cores "
        f"({classes.get('cpu', '?')})"
    )
    return Estimate(
        str(plan.config.get("name", "unnamed")),
        all_costs,
        requests,
        span,
        used,
        corpus_rows,
        split_rows,
        costs.gpu_class,
        ends,
        critical_path(costs.jobs, all_costs),
        money(plan, {"value": all_costs, **{b: e.costs for b, e in ends.items()}}, prices or {}),
        machine,
    )


# ---- frames ----


def jobs_frame(est: Estimate) -> pd.DataFrame:
    rows = []
    for c, req in zip(est.costs, est.requests, strict=True):
        rows.append(
            {
                "rule": c.rule,
                "job": c.id,
                "model": c.model,
                "device": c.device,
                "gpus": c.gpus,
                "threads": c.threads,
                "wall_s": c.wall_s,
                "cpu_s": c.cpu_s,
                "gpu_s": c.gpu_s,
                "peak_mb": c.peak_mb,
                "disk_mb": c.disk_mb,
                "mem_mb_request": req["mem_mb"],
                "runtime_min_request": req["runtime"],
                "items": json.dumps(c.items, sort_keys=True),
                "assumed_rates": sum(1 for k in c.rates if est.rates[k].assumed),
                "rates": sorted(c.rates),
            }
        )
    return pd.DataFrame(rows)


def _work(costs: Sequence[Cost]) -> str:
    totals: dict[str, float] = {}
    for c in costs:
        for k, v in c.items.items():
            if k in ("max new tokens", "concurrency"):
                continue
            totals[k] = totals.get(k, 0.0) + float(v)
    return "; ".join(f"{k} {human(v)}" for k, v in totals.items())


def summary_frame(est: Estimate) -> pd.DataFrame:
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, c in enumerate(est.costs):
        groups.setdefault((rule_family(c.rule), c.model, c.device), []).append(i)
    rows = []
    for (rule, model, device), idx in sorted(
        groups.items(), key=lambda kv: (RULES.index(kv[0][0]), kv[0][1], kv[0][2])
    ):
        cs = [est.costs[i] for i in idx]
        rq = [est.requests[i] for i in idx]
        rows.append(
            {
                "rule": rule,
                "model": model,
                "device": device,
                "jobs": len(cs),
                "work": _work(cs),
                "wall_s_per_job": sum(c.wall_s for c in cs) / len(cs),
                "wall_s_max": max(c.wall_s for c in cs),
                "cpu_h": sum(c.cpu_s for c in cs) / 3600,
                "gpu_h": sum(c.gpu_s for c in cs) / 3600,
                "gpu_h_fast": sum(est.ends["fast"].costs[i].gpu_s for i in idx) / 3600,
                "gpu_h_slow": sum(est.ends["slow"].costs[i].gpu_s for i in idx) / 3600,
                "peak_mb_max": max(c.peak_mb for c in cs),
                "disk_gb": sum(c.disk_mb for c in cs) / 1000,
                "mem_mb_request_max": max(r["mem_mb"] for r in rq),
                "runtime_min_request_max": max(r["runtime"] for r in rq),
                "assumed_rates": len({k for c in cs for k in c.rates if est.rates[k].assumed}),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def family_frame(est: Estimate) -> pd.DataFrame:
    """Per rule: jobs, total and longest wall time, largest peak (what `measured` compares)."""
    rows = []
    for rule in RULES:
        cs = [c for c in est.costs if rule_family(c.rule) == rule]
        if cs:
            rows.append(
                {
                    "rule": rule,
                    "jobs": len(cs),
                    "wall_s_total": sum(c.wall_s for c in cs),
                    "wall_s_max": max(c.wall_s for c in cs),
                    "peak_mb_max": max(c.peak_mb for c in cs),
                }
            )
    return pd.DataFrame(rows)


def write(est: Estimate, out_dir: str | Path) -> dict[str, Path]:
    """estimate.csv and estimate.parquet (per rule, model, device), estimate_jobs.parquet (per job),
    estimate.json (totals, makespan, rates); each written atomically."""
    import pyarrow as pa

    from cqabench.common.io import write_json, write_parquet, write_text

    out = Path(out_dir)
    paths = {
        "csv": out / "estimate.csv",
        "parquet": out / "estimate.parquet",
        "jobs": out / "estimate_jobs.parquet",
        "json": out / "estimate.json",
    }
    summary = summary_frame(est)
    write_text(summary.to_csv(index=False), paths["csv"])
    write_parquet(pa.Table.from_pandas(summary, preserve_index=False), paths["parquet"])
    write_parquet(pa.Table.from_pandas(jobs_frame(est), preserve_index=False), paths["jobs"])
    write_json(summary_json(est), paths["json"])
    return paths


def summary_json(est: Estimate) -> dict[str, Any]:
    s = est.span
    return {
        "config": est.name,
        "gpu_class": est.gpu_class,
        "totals": est.totals,
        "makespan": {
            "gpus": s.gpus,
            "cores": s.cores,
            "lower_bound_h": s.lower_bound_s / 3600,
            "critical_path_h": s.critical_path_s / 3600,
            "list_schedule_h": s.list_schedule_s / 3600,
            "gpu_bound_h": s.gpu_bound_s / 3600,
            "cpu_bound_h": s.cpu_bound_s / 3600,
        },
        "range": {
            b: {
                "gpu_h": e.gpu_h,
                "cpu_h": e.cpu_h,
                "lower_bound_h": e.span.lower_bound_s / 3600,
                "list_schedule_h": e.span.list_schedule_s / 3600,
            }
            for b, e in est.ends.items()
        },
        "critical_path": [{"job": j, "wall_s": w} for j, w in est.path],
        "money": [
            {
                "llm": m.llm,
                "input_tokens": m.input_tokens,
                "output_tokens": m.output_tokens,
                "usd": {b: m.usd(b) for b in m.output_tokens},
            }
            for m in est.money
        ],
        "machine": est.machine,
        "families": family_frame(est).to_dict("records"),
        "corpora": est.corpora,
        "splits": est.splits,
        "rates": {
            k: {"value": r.value, "unit": r.unit, "kind": r.kind, **dict(r.provenance)} for k, r in est.rates.items()
        },
    }


# ---- text ----


def human(value: float) -> str:
    """1234 -> 1.2k, 2.5e6 -> 2.5M: counts as a reader compares them."""
    v = float(value)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}" if v == int(v) else f"{v:.1f}"


def duration(seconds: float) -> str:
    s = float(seconds)
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.0f} s"


def _rows_text(frame: pd.DataFrame) -> list[list[str]]:
    return [
        [
            r.rule,
            r.model or "-",
            r.device,
            str(r.jobs),
            duration(r.wall_s_per_job),
            duration(r.wall_s_max),
            f"{r.cpu_h:.2f}",
            _gpu_range(r.gpu_h, r.gpu_h_fast, r.gpu_h_slow),
            f"{r.peak_mb_max / 1000:.1f}",
            f"{r.disk_gb:.1f}",
            f"{r.mem_mb_request_max / 1000:.1f}",
            duration(r.runtime_min_request_max * 60),
            r.work,
        ]
        for r in frame.itertuples()
    ]


def _gpu_range(value: float, fast: float, slow: float) -> str:
    """GPU-hours as value (fast-slow) where the range is wider than the rounding."""
    if not value and not slow:
        return "0.00"
    return f"{value:.2f}" if f"{fast:.1f}" == f"{slow:.1f}" else f"{value:.2f} ({fast:.1f}-{slow:.1f})"


HEAD = [
    "rule",
    "model",
    "device",
    "jobs",
    "wall/job",
    "longest",
    "CPU-h",
    "GPU-h (range)",
    "peak GB/job",
    "disk GB",
    "asks GB",
    "asks time",
    "work items",
]


def render_text(est: Estimate) -> str:
    frame = summary_frame(est)
    rows = [HEAD, *_rows_text(frame)]
    t = est.totals
    rows.append(
        [
            "total",
            "",
            "",
            str(t["jobs"]),
            "",
            "",
            f"{t['cpu_h']:.2f}",
            _gpu_range(t["gpu_h"], est.ends["fast"].gpu_h, est.ends["slow"].gpu_h),
            f"{t['peak_mb_max'] / 1000:.1f}",
            f"{t['disk_gb']:.1f}",
            "",
            "",
            "",
        ]
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD) - 1)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:-1])) + "  " + r[-1] for r in rows]
    return (
        "\n".join([f"cqabench estimate: configuration {est.name!r}, {t['jobs']} jobs", *lines, "", *_footer(est)])
        + "\n"
    )


def _split_counts(est: Estimate) -> list[tuple[str, str]]:
    """(what was counted, where from) per split: the text and the Markdown tables say it alike."""
    return [(f"{row['dataset']}/{row['split']}: {row['selected']:,} of {row['questions']:,} questions, "
             f"{row['documents']:,} documents{' (upper bound)' if row['upper_bound'] else ''}", row["source"])
            for row in est.splits]  # fmt: skip


def _footer(est: Estimate) -> list[str]:
    out = [*summary_lines(est), "", "item counts:"]
    out += [f"  {label}; {source}" for label, source in _split_counts(est)]
    for row in est.corpora:
        out.append(f"  corpus {row['corpus']}: {row['documents']:,} documents ({row['source']})")
    measured = [r for r in est.rates.values() if not r.assumed]
    assumed = [r for r in est.rates.values() if r.assumed]
    out += ["", f"rates used (benchmarks/rates.yaml): {len(measured)} measured, {len(assumed)} assumed"]
    out += [f"  ASSUMED {r.describe()}" for r in assumed]
    out += [f"  measured {r.describe()}" for r in measured]
    return out


def summary_lines(est: Estimate) -> list[str]:
    """The range, the machine, the critical path and the money: what the text and the page open with."""
    s, fast, slow = est.span, est.ends["fast"], est.ends["slow"]
    out = [
        f"GPU-hours: {fast.gpu_h:,.0f} to {slow.gpu_h:,.0f} (at the rates' values {est.totals['gpu_h']:,.0f}); "
        f"CPU-hours: {fast.cpu_h:,.0f} to {slow.cpu_h:,.0f}",
        f"makespan: {duration(fast.span.list_schedule_s)} to {duration(slow.span.list_schedule_s)} "
        f"(greedy list schedule; never below {duration(fast.span.lower_bound_s)} to "
        f"{duration(slow.span.lower_bound_s)}: max of GPU work / GPUs, CPU work / cores, critical path)",
        f"machine assumed: {est.machine}",
        f"at the rates' values: at least {duration(s.lower_bound_s)} (critical path {duration(s.critical_path_s)}, "
        f"GPU work / {s.gpus}: {duration(s.gpu_bound_s)}, CPU work / {s.cores}: {duration(s.cpu_bound_s)}); "
        f"greedy list schedule: {duration(s.list_schedule_s)}",
        "critical path: " + " -> ".join(f"{job} {duration(wall)}" for job, wall in est.path),
    ]
    out += [f"API: {m.line()}" for m in est.money] or ["API: no API model in this config"]
    return out


def render_markdown(est: Estimate) -> str:
    """The per-rule table, totals and makespan as Markdown (docs/costs.md)."""
    frame = summary_frame(est)
    head = [
        "rule",
        "model",
        "device",
        "jobs",
        "wall / job",
        "longest job",
        "CPU-h",
        "GPU-h (range)",
        "peak GB / job",
        "disk GB",
        "asks GB",
        "asks time",
        "work items",
    ]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i in (0, 1, 2, 12) else "---:" for i in range(len(head))) + "|",
    ]
    for r in _rows_text(frame):
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in r) + " |")
    t = est.totals
    gpu = _gpu_range(t["gpu_h"], est.ends["fast"].gpu_h, est.ends["slow"].gpu_h)
    lines.append(
        f"| **total** | | | {t['jobs']} | | | **{t['cpu_h']:.1f}** | **{gpu}** | "
        f"{t['peak_mb_max'] / 1000:.1f} | **{t['disk_gb']:.1f}** | | | |"
    )
    lines += ["", *(f"- {line}" for line in summary_lines(est)), "", "Item counts:", ""]
    lines += [f"- {label} — {source}" for label, source in _split_counts(est)]
    for row in est.corpora:
        lines.append(f"- corpus `{row['corpus']}`: {row['documents']:,} documents ({row['source']})")
    return "\n".join(lines) + "\n"


def render_rates_markdown(rates: dict[str, Rate]) -> str:
    lines = ["| rate | value | low – high | unit | kind | source |", "|---|---:|---|---|---|---|"]
    for key in sorted(rates, key=lambda k: (not rates[k].assumed, k)):
        r = rates[key]
        p = r.provenance
        src = p.get("source", "") if r.assumed else f"{p.get('date')} on {p.get('machine')}: `{p.get('command')}`"
        if p.get("note"):
            src += f" ({p['note']})"
        low, high = r.spread
        span = "" if low == high else f"{low:g} – {high:g}" + (" (guess)" if r.low is None else "")
        lines.append(
            f"| `{key}` | {r.value:g} | {span} | {r.unit} | {'**assumed**' if r.assumed else 'measured'} | "
            f"{str(src).replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"
