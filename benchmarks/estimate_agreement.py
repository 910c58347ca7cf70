"""The estimate against reality: a small real run of the families that dominate the default run.

A calibration, not a test: it measures the machine as much as the cost model (this project's
2-core machines differ by 2.7-5.5x on a small job), so it lives here and is run by hand
(`make benchmarks`), not by the suite. It was tests/estimate/test_estimate_measured.py.

Snakemake runs, in a throw-away folder, the bundled sample's TAT-QA split through BM25 indexing,
MiniLM encoding (the dense index) and SmolLM2-135M generation on vLLM's CPU build (one engine
batch: 8 questions closed-book and with the BM25 top-1); then each of those jobs' estimate
(`cqabench estimate` over the same config) is set beside its `benchmark:` file. The rates come
from benchmarks/rates.yaml, not from this run, so agreement is a check of the rates.

Stated agreement (docs/costs.md): wall time within a factor of FACTOR_TIME either way, peak
memory within FACTOR_MEMORY; each family is printed with its ratios and OK or FAIL, and the exit
status is 1 when any family fails. Most CPU rates were measured on a 2-core AMD EPYC; the same
jobs run 2.7-3.5x faster on the 2-core Intel Xeon machines (BM25's index job, whose fixed cost
is the EPYC's, 5.5x on a quiet Xeon), and vLLM's CPU rates are the Xeon's. A factor of 6 still
catches a cost model off by an order of magnitude (a per-item rate applied per million, a
missing engine start, decode steps counted one by one instead of in batches of 16).

    python benchmarks/estimate_agreement.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

FACTOR_TIME = 6.0
FACTOR_MEMORY = 2.0
# The measured peak is the larger of Snakemake's sample and the kernel's peak RSS that the job's
# log states (cqabench.estimate.measured): the sample alone missed the generation job's peak.
LLM = "smollm2-135m"
FAMILIES = ("generation", "bm25 index", "minilm index")


def small_config() -> dict:
    """The default config cut to TAT-QA, BM25 and MiniLM, and one 8-question engine batch."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["datasets"] = {"tatqa": config["datasets"]["tatqa"]}
    config.pop("corpora")
    config["retrieval"] = {"retrievers": ["bm25", "minilm"], "datasets": ["tatqa"], "k": 100}
    g = config["generation"]
    g.pop("open_book")
    g.pop("oracle_context")  # StrategyQA is not configured here
    g.update(
        llms=[LLM],
        batch_llms=[LLM],
        prompts=["few-shot"],
        settings=["closed", "rag"],
        rag_retrievers=["bm25"],
        k=[1],
        max_questions=8,
        sampling={"temperature": 0, "max_new_tokens": 16},
    )
    return config


def workdir(parent: Path) -> Path:
    """A folder that runs this checkout's workflow with its own results/ and .snakemake/."""
    work = parent / "work"
    work.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "resources", "envs"):
        (work / name).symlink_to(REPO / name)
    return work


def run(parent: Path) -> int:
    from cqabench.estimate import measured, tables
    from cqabench.estimate import run as estimate_run
    from cqabench.generation.llm.convert import DEFAULT_SOURCE, ensure_converted

    vllm_python = os.environ.get("CQABENCH_VLLM_PYTHON") or str(REPO / ".venv-vllm/bin/python")
    if not Path(vllm_python).exists():
        print(f"the vLLM environment ({vllm_python}) is not built: make setup", file=sys.stderr)
        return 2
    work = workdir(parent)
    config = small_config()
    config_path = parent / "small.yaml"
    config_path.write_text(yaml.safe_dump(config))
    results = f"results/{config['name']}"
    # the model is converted before the run: its conversion is not a family measured here
    ensure_converted(DEFAULT_SOURCE, work / results / "models" / LLM)
    targets = [f"{results}/index/tatqa/pipe/minilm", f"{results}/generation/_batches/{LLM}.json"]
    env = {
        **os.environ,
        "CQABENCH_VLLM_PYTHON": vllm_python,
        "HF_HUB_OFFLINE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    # the targets before --configfile, which takes every word after it as a config file
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *targets, "--configfile", str(config_path)],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        check=False,
    )
    if done.returncode != 0:
        print(done.stdout[-4000:] + done.stderr[-4000:], file=sys.stderr)
        return 2
    est = estimate_run.estimate(yaml.safe_load(config_path.read_text()), 8, 64, root=work)
    jobs = measured.read(work / results / "benchmarks").set_index("job")
    compared = measured.compare(tables.jobs_frame(est), measured.read(work / results / "benchmarks")).set_index("rule")
    by_job = {c.id: c for c in est.costs}
    failed, seen = False, set()
    print(
        f"{'family':<14} {'est s':>8} {'run s':>8} {'ratio':>6} {'est MB':>8} {'run MB':>8} {'ratio':>6}  "
        f"(time within {FACTOR_TIME}x, memory within {FACTOR_MEMORY}x)"
    )
    for job, row in jobs.iterrows():
        c = by_job[job]
        family = {"generate_batch": "generation"}.get(c.rule) or (f"{c.model} index" if c.rule == "index" else None)
        if family is None:
            continue
        seen.add(family)
        time_ratio, memory_ratio = c.wall_s / row["s"], c.peak_mb / row["max_rss"]
        ok = (1 / FACTOR_TIME <= time_ratio <= FACTOR_TIME) and (1 / FACTOR_MEMORY <= memory_ratio <= FACTOR_MEMORY)
        failed |= not ok
        print(
            f"{family:<14} {c.wall_s:>8.1f} {row['s']:>8.1f} {time_ratio:>6.2f} {c.peak_mb:>8.0f} "
            f"{row['max_rss']:>8.0f} {memory_ratio:>6.2f}  {'OK' if ok else 'FAIL'}"
        )
    if seen != set(FAMILIES) or compared.loc["generate_batch", "jobs"] != 1:
        print(f"FAIL: the run measured {sorted(seen)}, expected {list(FAMILIES)} and one engine batch", file=sys.stderr)
        return 1
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="run in this (new) folder and keep it, instead of a temporary one")
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True)
        return run(args.keep)
    parent = Path(tempfile.mkdtemp(prefix="estimate-agreement-"))
    try:
        return run(parent)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
