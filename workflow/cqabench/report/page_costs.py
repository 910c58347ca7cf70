"""The report page's cost section: the run's own estimate (rule `estimate`, cqabench.estimate)
beside what its jobs measured (Snakemake's `benchmark:` files), per rule family; the comparison
itself is cqabench.estimate.measured's, made by the report-page command and passed in.

Its body is HTML for `cqabench.report.page`: the machine the run used (`Machine`: the cores
Snakemake was given, from its own run log, the processor and the GPUs) and the estimate's least
time on it, the estimate's totals and its makespan on the reference node (said to be that node,
not this machine), then one row per rule with the estimated and measured wall time summed over the jobs that ran, the
largest peak memory of each, and their ratios (estimate / measured: above 1 the estimate is
generous), then how many rates of the estimate are measurements and which are assumptions.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
from dataclasses import dataclass
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
        names = [
            ln.split(":", 1)[1].strip() for ln in Path(cpuinfo).read_text().splitlines() if ln.startswith("model name")
        ]
    except OSError:
        names = []
    return f"{names[0] if names else 'an unknown processor'}, {os.cpu_count() or '?'} CPUs"


_PROVIDED = re.compile(r"^Provided (cores|remote nodes): (\d+)")


@dataclass(frozen=True)
class Machine:
    """The machine a run used, as far as the page can know it."""

    processor: str  # cpu_model(): the processor the page was built on, with its CPU count
    gpus: int  # GPUs visible where the page was built (nvidia-smi -L)
    cores: int | None = None  # Snakemake's --cores of the run ("Provided cores: N" in its log)
    remote_jobs: int | None = None  # a cluster executor's job limit ("Provided remote nodes: N")


def provided(log_dir: str | Path | None) -> tuple[int | None, int | None]:
    """(cores, remote jobs) the newest Snakemake run log (.snakemake/log/*.snakemake.log) states:
    the run that is building this page; (None, None) without one."""
    logs = sorted(Path(log_dir).glob("*.snakemake.log")) if log_dir and Path(log_dir).is_dir() else []
    for path in reversed(logs):
        found = {}
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:60]:
            if m := _PROVIDED.match(line):
                found[m.group(1)] = int(m.group(2))
        if found:
            return found.get("cores"), found.get("remote nodes")
    return None, None


def visible_gpus() -> int:
    """NVIDIA GPUs this process sees (`nvidia-smi -L`, one line each); 0 without the tool."""
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def this_machine(log_dir: str | Path | None = None, cpuinfo: str | Path = "/proc/cpuinfo") -> Machine:
    """The run's machine: the processor and GPUs here, the cores its Snakemake log states."""
    cores, remote = provided(log_dir)
    return Machine(cpu_model(cpuinfo), visible_gpus(), cores, remote)


def _on_machine(machine: Machine, jobs: pd.DataFrame, critical_path_h: float) -> str:
    """What the run's machine was and the least time the estimated jobs take on it: no schedule
    beats max(core-seconds / cores, GPU-seconds / GPUs, critical path) (cqabench.estimate.schedule)."""
    gpus = f"{machine.gpus} GPU{'s' if machine.gpus != 1 else ''}" if machine.gpus else "no GPU"
    if machine.remote_jobs is not None:
        return (
            f"This run: a cluster executor with up to {machine.remote_jobs} jobs at once (Snakemake's log); "
            f"this page was built on {esc(machine.processor)}, {gpus}. "
        )
    if machine.cores is None:
        return f"This run's cores are not in a Snakemake log; this page was built on {esc(machine.processor)}, {gpus}. "
    cores = machine.cores
    core_s = float((jobs["wall_s"] * jobs["threads"].clip(upper=cores)).sum()) if not jobs.empty else 0.0
    gpu_s = float(jobs["gpu_s"].sum()) if not jobs.empty else 0.0
    text = (
        f"This run: Snakemake with {cores} core{'s' if cores != 1 else ''} (its log: Provided cores) on "
        f"{esc(machine.processor)}, {gpus}. "
    )
    if gpu_s and not machine.gpus:
        return text + (f"Its plan has {gpu_s / 3600:.2f} GPU-hours of jobs, which this machine has no GPU for. ")
    bound = max(core_s / cores, gpu_s / machine.gpus if machine.gpus else 0.0, critical_path_h * 3600)
    return text + (
        f"On it the estimated jobs take at least {bound / 3600:.2f} h (they hold cores for "
        f"{core_s / 3600:.2f} core-hours, wall time × threads, shared by {cores} core{'s' if cores != 1 else ''}; "
        f"critical path {critical_path_h:.2f} h). "
    )


def section_body(estimate_dir: str | Path, frame: pd.DataFrame | None, machine: Machine | None = None) -> str:
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
    head = [
        "rule",
        "jobs",
        "estimated wall s",
        "measured wall s",
        "ratio",
        "estimated CPU s",
        "measured CPU s",
        "ratio",
        "estimated peak MB",
        "measured peak MB",
        "ratio",
    ]
    rows = []
    for r in [] if frame is None else frame.to_dict("records"):
        cells = [
            esc(r["rule"]),
            str(r["jobs"]),
            _num(r["estimated_s"]),
            _num(r["measured_s"]),
            _num(r["time_ratio"], 2),
            _num(r["estimated_cpu_s"]),
            _num(r["measured_cpu_s"]),
            _num(r["cpu_ratio"], 2),
            _num(r["estimated_peak_mb"], 0),
            _num(r["measured_peak_mb"], 0),
            _num(r["memory_ratio"], 2),
        ]
        rows.append(
            "<tr>"
            + "".join(f'<td class="num">{c}</td>' if i else f"<td>{c}</td>" for i, c in enumerate(cells))
            + "</tr>"
        )
    table = (
        (
            '<div class="scroll"><table id="estimate-table"><tr>'
            + "".join(f"<th>{esc(h)}</th>" for h in head)
            + "</tr>"
            + "".join(rows)
            + "</table></div>"
        )
        if rows
        else "<p>No benchmark files yet: nothing to compare.</p>"
    )
    listed = "".join(f"<li><code>{esc(k)}</code>: {esc(str(rates[k].get('source', '')))}</li>" for k in assumed)
    machine = machine or this_machine()
    jobs = pd.read_parquet(estimate_dir / "estimate_jobs.parquet", columns=["wall_s", "threads", "gpu_s"])
    return (
        f'<p class="caption">{_on_machine(machine, jobs, m["critical_path_h"])}'
        f"The estimate of this configuration before it ran (<code>cqabench estimate</code>, "
        f"benchmarks/rates.yaml × the configuration's items; estimate.csv beside this page): {t['jobs']} jobs, "
        f"{t['cpu_h']:.2f} CPU-hours, {t['gpu_h']:.2f} GPU-hours, {t['disk_gb']:.2f} GB written; on the "
        f"reference node it also states (the papers' server class, not this run's machine: "
        f"{m['gpus']} GPU(s) {esc(summary.get('gpu_class', ''))} and {m['cores']} cores) at least "
        f"{m['lower_bound_h']:.2f} h (critical path {m['critical_path_h']:.2f} h), a greedy schedule "
        f"{m['list_schedule_h']:.2f} h. Below, per rule, the estimate of the jobs that ran beside their "
        "benchmark: files (wall and CPU seconds summed over the jobs, the largest peak resident memory: the larger of "
        "the benchmark's sample and the kernel's peak that the job's log states; ratio = "
        "estimate / measured, above 1: the estimate, and what the rule asks for, is generous). The rates are "
        "those of an unloaded machine: on a shared one the wall time grows with the load, the CPU time does not, "
        "so the CPU ratio checks the cost model and the wall ratio the machine. A faster or slower processor than "
        "the rates' (each rate names its machine in benchmarks/rates.yaml) moves every CPU row by about the same "
        f"factor; this page was built on {esc(machine.processor)}.</p>{table}"
        f'<p class="caption">{len(rates) - len(assumed)} of the {len(rates)} rates behind this estimate are '
        f"measurements; {len(assumed)} {'is an assumption' if len(assumed) == 1 else 'are assumptions'} "
        "(GPU throughput and what no benchmark here could "
        f"measure):</p><ul>{listed}</ul>"
    )
