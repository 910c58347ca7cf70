"""The SLURM profile's requests for config/dexter.yaml against the documented per-item costs.

Snakemake plans the full reproduction through profiles/slurm (`-n --forceall`; the profile
without its conda deployment, which planning does not need): every job's mem_mb, runtime and
gpu, as the SLURM plugin would submit them, must be its estimate's request (cqabench.estimate,
benchmarks/rates.yaml), and no paper-scale job may ask for less memory than the measurement the
docs give for it: ColBERTv2 (docs/retrievers_neural.md, "ColBERTv2 at scale": at 21M passages
96 GB for the k-means sample, 79 GB for the IVF build, 89 GB to search; at 36.6M 127 / 137 /
154 GB), the streaming data stage (docs/data.md: prepare 267 MiB, pool-corpus 515, export 246,
BM25 index 689), a 7B model in float16 (14 GB of weights) for a vLLM job on a GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))

from conftest import workflow_workdir  # noqa: E402
from cqabench.estimate import run  # noqa: E402
from dry_runs import snakemake_n  # noqa: E402

MIB = 1.048576


def _profile(tmp: Path) -> Path:
    profile = yaml.safe_load((REPO / "profiles/slurm/config.yaml").read_text())
    profile.pop("software-deployment-method", None)  # planning needs no conda
    profile.pop("conda-frontend", None)
    profile["slurm-partition-config"] = str(REPO / profile["slurm-partition-config"])
    folder = tmp / "slurm-profile"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(profile))
    return folder


@pytest.mark.snakemake
def test_slurm_requests_for_dexter_are_the_estimate_and_cover_the_documented_costs(tmp_path: Path) -> None:
    work = workflow_workdir(tmp_path)
    plan = snakemake_n(
        work,
        "--forceall",
        "--workflow-profile",
        "none",
        "--profile",
        str(_profile(tmp_path)),
        "--configfile",
        "config/dexter.yaml",
    )  # its own profile: no other test asks this
    assert "no estimate for" not in plan.text  # every job was costed
    jobs = [(job.rule, job.wildcards, job.resources) for job in plan.jobs if job.rule != "all" and job.resources]
    from conftest import planned_jobs

    costs = run.plan_costs(run.load_config(REPO / "config/dexter.yaml"), root=REPO, jobs=planned_jobs("dexter.yaml"))
    assert len(jobs) == len(costs.jobs)
    low: dict[str, list[int]] = {}
    for rule, wildcards, res in jobs:
        want = costs.request(rule, wildcards)
        got = {"mem_mb": int(res["mem_mb"]), "runtime": int(res["runtime"]), "gpu": int(res["gpu"])}
        assert got == want, (rule, wildcards)
        assert got["runtime"] * 60 >= costs.cost(rule, wildcards).wall_s, (rule, wildcards)
        low.setdefault(rule, []).append(got["mem_mb"])
        w = wildcards
        if w.get("retriever") == "colbertv2" and rule in ("colbert_codec", "gather_index", "search"):
            corpus = w.get("corpus") or w["dataset"]
            # docs/retrievers_neural.md's ColBERTv2 table at 21M (AmbigQA's 24.3M is more); its 36.6M row is
            # no corpus dexter.yaml loads (StrategyQA's is the paragraphs file)
            need = {"ambigqa": {"colbert_codec": 96_000, "gather_index": 79_000, "search": 89_000}}
            if corpus in need:
                assert got["mem_mb"] >= need[corpus][rule], (rule, corpus, got)
        if rule == "generate_batch_share":  # the 7B engines run in their batches' share jobs (batch_jobs: 8)
            assert w["llm"] in ("mistral-7b", "llama2-7b") and got["mem_mb"] >= 14_000 and got["gpu"] == 1, w
        if rule == "generate" and w["llm"] in ("mistral-7b", "llama2-7b"):  # a cell's job assembles from the cache
            assert got["gpu"] == 0, w
        if rule == "generate" and w["llm"] == "gpt-3.5-turbo":
            assert got["gpu"] == 0
        if rule in ("encode_part", "colbert_codec") or (rule == "search" and w["retriever"] != "bm25"):
            assert got["gpu"] == 1, (rule, w)
        if rule in ("gather_index", "prepare", "pool_corpus", "export_beir") or w.get("retriever") == "bm25":
            assert got["gpu"] == 0, (rule, w)
    assert sum(rule == "generate_batch_share" for rule, _, _ in jobs) == 16
    for rule, peak in {"prepare": 267, "pool_corpus": 515, "export_beir": 246}.items():
        assert min(low[rule]) >= peak * MIB, rule
    bm25 = [int(r["mem_mb"]) for rule, w, r in jobs if rule == "index" and w["retriever"] == "bm25"]
    assert min(bm25) >= 689 * MIB
