"""The report page's cost section: the run's own estimate (rule `estimate`, cqabench.estimate)
beside what its jobs measured (Snakemake's `benchmark:` files), per rule family; the comparison
itself is cqabench.estimate.measured's, made by the report-page command and passed in.

Its body is HTML for `cqabench.report.page`: totals and the makespan bound of the estimate, then
one row per rule with the estimated and measured wall time summed over the jobs that ran, the
largest peak memory of each, and their ratios (estimate / measured: above 1 the estimate is
generous), then how many rates of the estimate are measurements and which are assumptions.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

esc = html.escape


def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:,.{digits}f}"


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The processor this page was built on (Linux), with its CPU count: the rates' ratios to the
    measured depend on it (the same jobs ran 3x faster on an Intel Xeon than on the AMD EPYC that
    measured most CPU rates; vLLM's CPU rates are the Xeon's)."""
    import os

    try:
        names = [ln.split(":", 1)[1].strip() for ln in Path(cpuinfo).read_text().splitlines() if ln.startswith("model name")]
    except OSError:
        names = []
    return f"{names[0] if names else 'an unknown processor'}, {os.cpu_count() or '?'} CPUs"


def section_body(estimate_dir: str | Path, frame: pd.DataFrame | None) -> str:
    """The section's HTML from the estimate's summary and its comparison with the run's benchmark
    files (`frame`: cqabench.estimate.measured.compare_dir, made by the report-page command);
    a warning paragraph when the estimate was not written."""
    estimate_dir = Path(estimate_dir)
    if not (estimate_dir / "estimate.json").is_file() or not (estimate_dir / "estimate_jobs.parquet").is_file():
        return f'<p class="warn">The estimate was not written ({esc(str(estimate_dir))}/estimate.json).</p>'
    summary = json.loads((estimate_dir / "estimate.json").read_text(encoding="utf-8"))
    t, m = summary["totals"], summary["makespan"]
    rates = summary.get("rates") or {}
    assumed = sorted(k for k, r in rates.items() if r.get("kind") == "assumed")
    head = ["rule", "jobs", "estimated wall s", "measured wall s", "ratio", "estimated CPU s", "measured CPU s", "ratio",
            "estimated peak MB", "measured peak MB", "ratio"]
    rows = []
    for r in ([] if frame is None else frame.to_dict("records")):
        cells = [esc(r["rule"]), str(r["jobs"]), _num(r["estimated_s"]), _num(r["measured_s"]), _num(r["time_ratio"], 2),
                 _num(r["estimated_cpu_s"]), _num(r["measured_cpu_s"]), _num(r["cpu_ratio"], 2),
                 _num(r["estimated_peak_mb"], 0), _num(r["measured_peak_mb"], 0), _num(r["memory_ratio"], 2)]
        rows.append("<tr>" + "".join(f'<td class="num">{c}</td>' if i else f"<td>{c}</td>" for i, c in enumerate(cells)) + "</tr>")
    table = ('<div class="scroll"><table id="estimate-table"><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"
             + "".join(rows) + "</table></div>") if rows else "<p>No benchmark files yet: nothing to compare.</p>"
    listed = "".join(f"<li><code>{esc(k)}</code>: {esc(str(rates[k].get('source', '')))}</li>" for k in assumed)
    return (f'<p class="caption">The estimate of this configuration before it ran (<code>cqabench estimate</code>, '
            f"benchmarks/rates.yaml × the configuration's items; estimate.csv beside this page): {t['jobs']} jobs, "
            f"{t['cpu_h']:.2f} CPU-hours, {t['gpu_h']:.2f} GPU-hours, {t['disk_gb']:.2f} GB written; on "
            f"{m['gpus']} GPU(s) ({esc(summary.get('gpu_class', ''))}) and {m['cores']} cores at least "
            f"{m['lower_bound_h']:.2f} h (critical path {m['critical_path_h']:.2f} h), a greedy schedule "
            f"{m['list_schedule_h']:.2f} h. Below, per rule, the estimate of the jobs that ran beside their "
            "benchmark: files (wall and CPU seconds summed over the jobs, the largest peak resident memory: the larger of "
            "the benchmark's sample and the kernel's peak that the job's log states; ratio = "
            "estimate / measured, above 1: the estimate, and what the rule asks for, is generous). The rates are "
            "those of an unloaded machine: on a shared one the wall time grows with the load, the CPU time does not, "
            "so the CPU ratio checks the cost model and the wall ratio the machine. A faster or slower processor than "
            "the rates' (each rate names its machine in benchmarks/rates.yaml) moves every CPU row by about the same "
            f"factor; this page was built on {esc(cpu_model())}.</p>{table}"
            f'<p class="caption">{len(rates) - len(assumed)} of the {len(rates)} rates behind this estimate are '
            f"measurements; {len(assumed)} {'is an assumption' if len(assumed) == 1 else 'are assumptions'} "
            "(GPU throughput and what no benchmark here could "
            f"measure):</p><ul>{listed}</ul>")
