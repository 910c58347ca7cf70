"""What a retrieval job uses, for the scheduler to give exactly that: the device its code runs on
(`job_device`, read by the cost function that decides each rule's `gpu`) and the CPU threads it
declares (`threads:` in workflow/rules/retrieval.smk) with the settings its command is given, so
that the scheduler's CPUs and the code's threads are one number.

SLURM gives a job `--cpus-per-task=<threads>` (snakemake-executor-plugin-slurm; docs/cluster.md);
a rule without `threads:` gets one CPU. A GPU job's host side (tokenizing, the codec's sampling,
faiss or torch on the CPU, reading shards) then ran on one core while the GPU waited (issue 37).

- The retriever's own `threads` (its family's resolved default included, e.g. BM25's 2) is what
  the job declares and what the code uses (torch.set_num_threads, faiss.omp_set_num_threads,
  colbert-ai's OMP_NUM_THREADS, Anserini's threads).
- Unset, a job that asks for a GPU declares GPU_JOB_THREADS and its command is given
  `threads: GPU_JOB_THREADS` (a run-time key: no index or run changes with it); a CPU job
  declares 1 and its settings stay as configured (torch's own default, as before).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The paper's server class: 64 cores for 8 GPUs (cqabench.estimate.model.REFERENCE_NODE), so
# one GPU job may use its node's share of the cores.
GPU_JOB_THREADS = 8


SEARCH_RULES = ("search", "decompose_search")


def job_device(settings: Mapping[str, Any], rule: str) -> str:
    """The device a retrieval job of `rule` runs its code on: the retriever's `device`, except a
    search, which runs where its family's `search_device` says (dense: a faiss IVF/HNSW search,
    queries included, on the CPU). BM25 has no device: the CPU."""
    from cqabench.retrieval import family, resolve

    s = resolve(settings)
    search_device = getattr(family(s), "search_device", None)
    if rule in SEARCH_RULES and search_device is not None:
        return str(search_device(s))
    return str(s.get("device", "cpu"))


def job_threads(settings: Mapping[str, Any], gpus: int) -> int:
    """The threads a retrieval job with these (configured) settings and `gpus` GPUs declares."""
    from cqabench.retrieval import resolve

    configured = resolve(settings).get("threads")
    if configured:
        return int(configured)
    return GPU_JOB_THREADS if gpus else 1


def job_settings(settings: Mapping[str, Any], gpus: int) -> dict[str, Any]:
    """The settings the job's command gets: the configured ones, plus the declared `threads`
    where a GPU job's were unset (so the code runs as many threads as the scheduler gave)."""
    out = dict(settings)
    if gpus and not out.get("threads"):
        out["threads"] = job_threads(settings, gpus)
    return out
