"""The estimate beside what a run measured: Snakemake's `benchmark:` files, per rule family.

Each rule writes `results/<name>/benchmarks/<rule>/<wildcards>.tsv` (`s`: wall seconds,
`max_rss`: peak resident MB, `cpu_time`: CPU seconds of the job's processes). `job_of` maps such
a file back to the job's wildcards, so the comparison covers exactly the jobs that ran: per rule,
the estimated and measured wall time and CPU time summed over those jobs and the largest peak,
and their ratios. On a shared machine the wall time grows with the load and the CPU time does
not, so the CPU ratio is the one that checks the cost model; the wall ratio checks the machine.
(Snakemake samples a job every second for its first 30 s, then every 30 s: CPU time and peak
of a long job can miss its last seconds. The peak is therefore the larger of the sampled one and
the one the job's log states, `results/<name>/logs/<rule>/<wildcards>.log`: the kernel's peak RSS
of its process, cqabench.common.job_memory.) A rule with no benchmark file is
left out (not run); a rule the estimate does not plan is reported as measured only.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from cqabench.common.job_memory import peak_with_log
from cqabench.estimate.dag import TABLE_PREFIX, job_id, rule_family
from cqabench.generation.cell import CELL_FIELDS, Cell

# The wildcards of each rule's benchmark path, in order (workflow/rules/*.smk).
PATHS: dict[str, tuple[str, ...]] = {
    "download": ("path",),
    "prepare": ("dataset", "split"),
    "pool_corpus": ("corpus",),
    "export_beir": ("dataset", "serialization", "split"),
    "index": ("corpus", "serialization", "retriever"),
    "colbert_codec": ("corpus", "serialization", "retriever"),
    "gather_index": ("corpus", "serialization", "retriever"),
    "encode_part": ("corpus", "serialization", "retriever", "part-of"),
    "search": ("dataset", "split", "serialization", "retriever"),
    "decompose_search": ("dataset", "split", "serialization", "retriever-kind"),
    "import_run": ("dataset", "split", "serialization", "name"),
    "fuse_runs": ("dataset", "split", "serialization", "name"),
    "rerank_run": ("dataset", "split", "serialization", "name"),
    "evaluate_retrieval": ("dataset", "split", "serialization", "run"),
    "convert_model": ("llm",),
    "generate_batch": ("llm",),
    "generate_batch_share": ("llm", "share"),
    "generate": CELL_FIELDS,
    "evaluate_generation": CELL_FIELDS,
    "aggregate": (),
    "report_tables": (),
    "report_plots": (),
    "report_page": (),
    "estimate": (),
}
KINDS = ("ird-gold", "ird-pred", "irq")
COLUMNS = [
    "rule",
    "jobs",
    "estimated_s",
    "measured_s",
    "time_ratio",
    "estimated_cpu_s",
    "measured_cpu_s",
    "cpu_ratio",
    "estimated_peak_mb",
    "measured_peak_mb",
    "memory_ratio",
]


def compare_dir(estimate_dir: str | Path, benchmarks_dir: str | Path) -> pd.DataFrame | None:
    """`compare` of an estimate's folder (rule `estimate`) with a run's benchmark files; None
    when the estimate was not written."""
    jobs_file = Path(estimate_dir) / "estimate_jobs.parquet"
    if not jobs_file.is_file():
        return None
    jobs = pd.read_parquet(jobs_file, columns=["rule", "job", "wall_s", "cpu_s", "peak_mb"])
    return compare(jobs, read(benchmarks_dir))


def job_of(rule: str, rel: Path) -> dict[str, str] | None:
    """The wildcards of the benchmark file `rel` (relative to benchmarks/<rule>/ or benchmarks/)."""
    names = () if rule.startswith(TABLE_PREFIX) else PATHS.get(rule)  # table_<id>.tsv: one job per table
    if names is None:
        return None
    if not names:
        return {}
    parts = list(rel.with_suffix("").parts)
    if rule == "download":
        return {"path": "/".join(parts)}
    if names == CELL_FIELDS:
        return Cell.parse("/".join(parts))
    if len(parts) != len(names):
        return None
    out = dict(zip(names, parts))
    if "part-of" in out:
        part, _, of = out.pop("part-of").partition("-of-")
        out.update(part=part, parts=of)
    if "retriever-kind" in out:
        value = out.pop("retriever-kind")
        kind = next((k for k in KINDS if value.endswith("-" + k)), None)
        if kind is None:
            return None
        out.update(retriever=value[: -len(kind) - 1], kind=kind)
    return out


def read(benchmarks_dir: str | Path, logs_dir: str | Path | None = None) -> pd.DataFrame:
    """Rows (rule, job id, s, max_rss) of every benchmark file; a file's last measurement counts.
    max_rss is at least the peak the job's log (under `logs_dir`, default the results tree's
    logs/ beside benchmarks/) states (module docstring)."""
    root = Path(benchmarks_dir)
    logs = root.parent / "logs" if logs_dir is None else Path(logs_dir)
    rows = []
    for path in sorted(root.rglob("*.tsv")) if root.is_dir() else []:
        rel = path.relative_to(root)
        rule = rel.parts[0].removesuffix(".tsv")
        wildcards = job_of(rule, Path(*rel.parts[1:]) if len(rel.parts) > 1 else Path())
        if wildcards is None:
            continue
        try:
            frame = pd.read_csv(path, sep="\t")
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError):
            continue
        if frame.empty:
            continue
        last = frame.iloc[-1]
        row = {c: float(pd.to_numeric(last.get(c), errors="coerce")) for c in ("s", "max_rss", "cpu_time")}
        row["max_rss"] = peak_with_log(row["max_rss"], (logs / rel).with_suffix(".log"))
        rows.append({"rule": rule, "job": job_id(rule, wildcards), "wildcards": wildcards, **row})
    return pd.DataFrame(rows, columns=["rule", "job", "wildcards", "s", "max_rss", "cpu_time"])


def compare(estimate_jobs: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Per rule: the estimate (a per-job frame with rule, job, wall_s, cpu_s, peak_mb:
    estimate_jobs.parquet) and the measurement, over the jobs that ran (module docstring)."""
    from cqabench.estimate.dag import RULES

    est = estimate_jobs.set_index("job") if not estimate_jobs.empty else estimate_jobs

    def ratio(a: float, b: float) -> float:
        return a / b if b and not math.isnan(b) else math.nan

    out = []
    for rule, part in measured.groupby("rule", sort=False):
        known = part[part["job"].isin(est.index)] if not est.empty else part.iloc[0:0]
        used = known if not known.empty else part
        meas = {
            "measured_s": float(used["s"].sum()),
            "measured_cpu_s": float(used["cpu_time"].sum(min_count=1)),
            "measured_peak_mb": float(used["max_rss"].max()),
        }
        if known.empty:
            out.append(
                {
                    "rule": rule,
                    "jobs": len(part),
                    **meas,
                    "estimated_s": math.nan,
                    "estimated_cpu_s": math.nan,
                    "estimated_peak_mb": math.nan,
                    "time_ratio": math.nan,
                    "cpu_ratio": math.nan,
                    "memory_ratio": math.nan,
                }
            )
            continue
        rows = est.loc[known["job"]]
        e = {
            "estimated_s": float(rows["wall_s"].sum()),
            "estimated_cpu_s": float(rows["cpu_s"].sum()),
            "estimated_peak_mb": float(rows["peak_mb"].max()),
        }
        out.append(
            {
                "rule": rule,
                "jobs": len(known),
                **e,
                **meas,
                "time_ratio": ratio(e["estimated_s"], meas["measured_s"]),
                "cpu_ratio": ratio(e["estimated_cpu_s"], meas["measured_cpu_s"]),
                "memory_ratio": ratio(e["estimated_peak_mb"], meas["measured_peak_mb"]),
            }
        )
    frame = pd.DataFrame(out, columns=COLUMNS)
    order = frame["rule"].map(lambda r: RULES.index(rule_family(r)) if rule_family(r) in RULES else len(RULES))
    return frame.iloc[order.argsort(kind="stable")].reset_index(drop=True)
