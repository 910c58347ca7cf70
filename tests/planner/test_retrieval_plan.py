"""cqabench.planner.retrieval: the retrieval stage's decisions, each asserted on a computed value:
indexes encoded in part jobs (`encode_jobs`) and their codec, and which file an external run is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cqabench.common.errors import ConfigError

from plan_helpers import ROOT, load_config, plan_of

# ---- dense / SPLADE / ColBERT encoding in part jobs (encode_jobs) ----


def test_dexter_plans_32_encode_parts_for_every_neural_retriever_on_every_corpus() -> None:
    """config/dexter.yaml: encode_jobs 32 for SPLADE, the five dense retrievers and ColBERTv2 (its
    parts after one codec job per corpus), BM25 one job; 6 corpora x 1 serialization."""
    plan = plan_of(load_config("dexter.yaml"))
    neural = ["ance", "colbertv2", "contriever", "dpr", "mpnet", "splade", "tasb"]
    assert sorted(plan.sharded_retrievers()) == neural
    assert plan.codec_retrievers() == ["colbertv2"]
    searched = sorted({plan.corpus_of(ds) for ds in plan.retrieval_datasets})  # DEXTER's seven; not TANQ's
    assert searched == ["ambigqa", "finqa", "ottqa", "strategyqa", "tatqa", "wiki-multihop"]
    for corpus in searched:
        for retriever in plan.sharded_retrievers():
            parts = plan.index_parts(corpus, "pipe", retriever)
            assert parts == [f"results/dexter/index_parts/{corpus}/pipe/{retriever}/{i}-of-32" for i in range(32)]
            codec = [f"results/dexter/index_parts/{corpus}/pipe/colbertv2/codec"] if retriever == "colbertv2" else []
            assert plan.part_codec(corpus, "pipe", retriever) == codec
        assert plan.index_parts(corpus, "pipe", "bm25") == []
    # The part jobs ask for a GPU, as dexter.yaml puts the encoders on cuda (their sizes: tests/estimate/test_estimate.py).
    from cqabench.estimate.model import JobCosts

    costs = JobCosts(plan)
    for retriever in ("dpr", "colbertv2"):
        wildcards = {"corpus": "ambigqa", "serialization": "pipe", "retriever": retriever, "part": "0", "parts": "32"}
        assert costs.request("encode_part", wildcards)["gpu"] == 1
        assert costs.request("gather_index", {k: wildcards[k] for k in ("corpus", "serialization", "retriever")})["gpu"] == 0


def test_encode_jobs_is_refused_where_it_would_change_nothing() -> None:
    config = load_config()
    config["retrievers"]["bm25"]["encode_jobs"] = 4
    with pytest.raises(ConfigError, match="retrievers.bm25: bm25 retriever: unknown setting.*encode_jobs"):
        plan_of(config)
    config = load_config()
    config["retrievers"]["minilm"]["encode_jobs"] = 0
    with pytest.raises(ConfigError, match="retrievers.minilm: dense retriever: encode_jobs must be a positive integer"):
        plan_of(config)
    config = load_config()
    config["retrievers"]["minilm"]["encode_jobs"] = 3
    plan = plan_of(config)
    assert plan.sharded_retrievers() == ["minilm"]
    assert plan.index_parts("tatqa", "pipe", "minilm")[-1] == "results/sample/index_parts/tatqa/pipe/minilm/2-of-3"


def test_snakemake_dry_run_of_dexter_plans_the_encode_parts(workdir: Path) -> None:
    """`snakemake -n --configfile config/dexter.yaml`: 7 neural retrievers x 6 corpora x 32 = 1344
    encode_part jobs, 42 gather_index jobs, 6 colbert_codec jobs; index jobs left for BM25 (6)."""
    from test_rebuild import job_table

    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--forceall", "--configfile", str(ROOT / "config" / "dexter.yaml")],
                          cwd=workdir, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    table = job_table(done.stdout + done.stderr)
    counts = tuple(table[rule] for rule in ("encode_part", "gather_index", "colbert_codec", "index"))
    assert counts == (1344, 42, 6, 6), table


def test_only_a_codec_retriever_passes_its_codec_to_its_part_jobs() -> None:
    plan = plan_of(load_config("dexter.yaml"))
    assert plan.index_dir("ambigqa", "pipe", "colbertv2") == "results/dexter/index/ambigqa/pipe/colbertv2"
    assert plan.codec_arg("ambigqa", "pipe", "colbertv2") == "--codec results/dexter/index_parts/ambigqa/pipe/colbertv2/codec"
    assert plan.codec_arg("ambigqa", "pipe", "dpr") == ""


def test_an_external_run_is_its_file_for_its_own_split_only() -> None:
    config = load_config()
    config["external_runs"] = {"ext": {"path": "config/config.yaml", "dataset": "tatqa", "split": "dev"}}
    plan = plan_of(config)
    assert plan.external_input(SimpleNamespace(name="ext", dataset="tatqa", split="dev")) == "config/config.yaml"
    assert "ext" in plan.run_names("tatqa", "dev") and plan.run_settings("ext")["external"] is True
    with pytest.raises(ConfigError, match="external run ext belongs to tatqa/dev, not finqa/dev"):
        plan.external_input(SimpleNamespace(name="ext", dataset="finqa", split="dev"))


def test_a_retriever_defined_but_not_listed_is_refused_by_name(workdir: Path) -> None:
    """Issue 36 item 9: asking for the metrics of a retriever defined under `retrievers:` but not
    listed in retrieval.retrievers gave Snakemake's bare MissingRuleException; the planner now
    names the retriever and what to do. Its run file still plans (search builds any defined one)."""
    cfg = load_config()
    cfg["retrievers"]["bm25_k15"] = {"type": "bm25", "k1": 1.5}
    plan = plan_of(cfg)
    why = plan.unplanned_run("tatqa", "dev", "bm25_k15")
    assert why is not None and why.startswith("retriever 'bm25_k15' is defined under retrievers: but not listed in "
                                              "retrieval.retrievers")
    assert plan.unplanned_run("tatqa", "dev", "bm25") is None
    assert plan.unplanned_run("tatqa", "dev", "nothing").startswith("'nothing' is no run of tatqa/dev; its runs: bm25")
    with pytest.raises(ConfigError, match="results/sample/retrieval/tatqa/dev/pipe/bm25_k15/metrics.json: retriever"):
        plan.retrieval_inputs(SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", run="bm25_k15"))
    assert plan.retrieval_inputs(SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", run="bm25")) == {
        "run": "results/sample/runs/tatqa/dev/pipe/bm25.parquet", "qrels": "results/sample/data/tatqa/dev/qrels.parquet",
        "queries": "results/sample/data/tatqa/dev/queries.parquet"}

    (workdir / "extra.yaml").write_text("retrievers:\n  bm25_k15: {type: bm25, k1: 1.5}\n")
    target = "results/sample/retrieval/tatqa/dev/pipe/bm25_k15/metrics.json"
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "config/config.yaml", "extra.yaml",
                           "--", target], cwd=workdir, capture_output=True, text=True, timeout=300, check=False)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "MissingRuleException" not in said
    assert f"ConfigError: {target}: retriever 'bm25_k15' is defined under retrievers: but not listed" in said
