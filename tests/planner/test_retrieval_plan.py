"""cqabench.planner.retrieval: the retrieval stage's decisions, each asserted on a computed value:
indexes encoded in part jobs (`passages_per_part`, `encode_jobs`) and their codec, and which file an external run is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cqabench.common.errors import ConfigError
from plan_helpers import load_config, plan_of

# ---- dense / SPLADE / ColBERT encoding in part jobs (passages_per_part, encode_jobs) ----


def test_dexter_sizes_its_encode_parts_by_the_corpus_and_never_plans_an_empty_part() -> None:
    """config/dexter.yaml: passages_per_part 500,000 for SPLADE, the five dense retrievers and
    ColBERTv2 (its parts after one codec job per corpus), BM25 one job. Parts per corpus,
    ceil(documents / 500,000) (config/sizes.yaml: AmbigQA 24.3M -> 49, OTT-QA 6.5M -> 13, the pooled
    MuSiQue + 2Wiki 569,641 -> 2, StrategyQA's paragraphs 9,980, TAT-QA's 1,634 and FinQA's 24,800 -> 1),
    and every part holds rows (issue 37 item 5: encode_jobs 32 gave FinQA and TAT-QA ~60 empty parts)."""
    from cqabench.retrieval import family, resolve
    from cqabench.retrieval.parts import part_rows

    plan = plan_of(load_config("dexter.yaml"))
    neural = ["ance", "colbertv2", "contriever", "dpr", "mpnet", "splade", "tasb"]
    assert sorted(plan.sharded_retrievers()) == neural
    assert plan.unsharded_retrievers() == ["bm25"]  # the `index` rule's; the others are gathered from parts
    assert plan.codec_retrievers() == ["colbertv2"]
    searched = sorted({plan.corpus_of(ds) for ds in plan.retrieval_datasets})  # DEXTER's seven; not TANQ's
    assert searched == ["ambigqa", "finqa", "ottqa", "strategyqa", "tatqa", "wiki-multihop"]
    want = {"ambigqa": 49, "ottqa": 13, "wiki-multihop": 2, "strategyqa": 1, "tatqa": 1, "finqa": 1}
    docs = {
        "ambigqa": 24_300_000,
        "ottqa": 6_500_000,
        "wiki-multihop": 569_641,
        "strategyqa": 9_980,
        "tatqa": 1_634,
        "finqa": 24_800,
    }
    for corpus in searched:
        assert plan.corpus_sizes.corpus_documents(corpus) == docs[corpus]
        for retriever in plan.sharded_retrievers():
            n = want[corpus]
            parts = plan.index_parts(corpus, "pipe", retriever)
            assert parts == [f"results/dexter/index_parts/{corpus}/pipe/{retriever}/{i}-of-{n}" for i in range(n)]
            settings = resolve(plan.retriever_configs[retriever])
            chunk = family(settings).part_chunk(settings, docs[corpus])
            assert all(
                part_rows(docs[corpus], chunk, i, n)[0] < part_rows(docs[corpus], chunk, i, n)[1] for i in range(n)
            ), (corpus, retriever)  # no empty part
            codec = [f"results/dexter/index_parts/{corpus}/pipe/colbertv2/codec"] if retriever == "colbertv2" else []
            assert plan.part_codec(corpus, "pipe", retriever) == codec
        assert plan.index_parts(corpus, "pipe", "bm25") == []
    # The part jobs ask for a GPU, as dexter.yaml puts the encoders on cuda (their sizes: tests/estimate/test_estimate.py).
    from cqabench.estimate.model import JobCosts

    costs = JobCosts(plan)
    for retriever in ("dpr", "colbertv2"):
        wildcards = {"corpus": "ambigqa", "serialization": "pipe", "retriever": retriever, "part": "0", "parts": "49"}
        assert costs.request("encode_part", wildcards)["gpu"] == 1
        assert (
            costs.request("gather_index", {k: wildcards[k] for k in ("corpus", "serialization", "retriever")})["gpu"]
            == 0
        )


def test_part_counts_follow_the_size_and_stop_at_the_corpus_chunks() -> None:
    """FinQA's 24,800 and TAT-QA's 1,634 documents at the real sizes: with parts of 1,000 passages
    FinQA would want 25 parts, but its dense shards (10,000 rows) make 3 chunks: 3 parts, none
    empty; TAT-QA's one shard is one part; SPLADE's 1,024-document flushes give TAT-QA 2."""
    from cqabench.retrieval.parts import part_count, part_rows

    dense = {"type": "dense", "model": "facebook/contriever", "passages_per_part": 1000}
    assert part_count(dense, 24_800) == 3 and part_count(dense, 1_634) == 1
    assert [part_rows(24_800, 10_000, i, 3) for i in range(3)] == [(0, 10_000), (10_000, 20_000), (20_000, 24_800)]
    splade = {"type": "splade", "model": "naver/splade_v2_max", "passages_per_part": 1000}
    assert part_count(splade, 1_634) == 2 and part_count(splade, 24_800) == 25  # 25 flushes of 1,024
    assert part_count({**dense, "passages_per_part": 500_000}, 24_800) == 1
    # encode_jobs: that many parts whatever the size, capped at the chunks too
    fixed = {"type": "dense", "model": "facebook/contriever", "encode_jobs": 32}
    assert part_count(fixed, 24_800) == 3 and part_count(fixed, 24_300_000) == 32 and part_count(fixed, None) == 32


def _minilm_with(**settings: object) -> dict:
    config = load_config()
    config["retrievers"]["minilm"].update(settings)
    return config


def test_passages_per_part_and_encode_jobs_are_one_or_the_other() -> None:
    for settings, message in (
        ({"passages_per_part": 100, "encode_jobs": 3}, "set passages_per_part .* or encode_jobs .*, not both"),
        ({"passages_per_part": 0}, "passages_per_part must be a positive integer, got 0"),
    ):
        with pytest.raises(ConfigError, match=f"retrievers.minilm: {message}"):
            plan_of(_minilm_with(**settings))
    # the sample's TAT-QA corpus: 252 rows counted from its files -> 3 parts of 100
    plan = plan_of(_minilm_with(passages_per_part=100, shard_size=100))
    assert plan.index_parts("tatqa", "pipe", "minilm")[-1] == "results/sample/index_parts/tatqa/pipe/minilm/2-of-3"


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
    config["retrievers"]["minilm"].update({"encode_jobs": 3, "shard_size": 100})  # 252 rows: 3 shards
    plan = plan_of(config)
    assert plan.sharded_retrievers() == ["minilm"]
    assert plan.unsharded_retrievers() == ["bm25"]
    assert plan.index_parts("tatqa", "pipe", "minilm")[-1] == "results/sample/index_parts/tatqa/pipe/minilm/2-of-3"
    config["retrievers"]["minilm"]["shard_size"] = 10_000  # one shard: one part, never two empty ones
    assert plan_of(config).index_parts("tatqa", "pipe", "minilm") == [
        "results/sample/index_parts/tatqa/pipe/minilm/0-of-1"
    ]


@pytest.mark.snakemake
def test_snakemake_dry_run_of_dexter_plans_the_encode_parts() -> None:
    """`snakemake -n --forceall --configfile config/dexter.yaml`: 7 neural retrievers x (49 + 13 + 2 + 1 + 1 + 1)
    parts of the 6 corpora = 469 encode_part jobs, 42 gather_index jobs, 6 colbert_codec jobs;
    index jobs left for BM25 (6)."""
    from dry_runs import dry_run

    table = dry_run("dexter.yaml").counts
    counts = tuple(table[rule] for rule in ("encode_part", "gather_index", "colbert_codec", "index"))
    assert counts == (7 * 67, 42, 6, 6), table


def test_only_a_codec_retriever_passes_its_codec_to_its_part_jobs() -> None:
    plan = plan_of(load_config("dexter.yaml"))
    assert plan.index_dir("ambigqa", "pipe", "colbertv2") == "results/dexter/index/ambigqa/pipe/colbertv2"
    assert (
        plan.codec_arg("ambigqa", "pipe", "colbertv2")
        == "--codec results/dexter/index_parts/ambigqa/pipe/colbertv2/codec"
    )
    assert plan.codec_arg("ambigqa", "pipe", "dpr") == ""


def test_an_external_run_is_its_file_for_its_own_split_only() -> None:
    config = load_config()
    config["external_runs"] = {"ext": {"path": "config/config.yaml", "dataset": "tatqa", "split": "dev"}}
    plan = plan_of(config)
    assert plan.external_input(SimpleNamespace(name="ext", dataset="tatqa", split="dev")) == "config/config.yaml"
    assert "ext" in plan.run_names("tatqa", "dev") and plan.run_settings("ext")["external"] is True
    with pytest.raises(ConfigError, match="external run ext belongs to tatqa/dev, not finqa/dev"):
        plan.external_input(SimpleNamespace(name="ext", dataset="finqa", split="dev"))


@pytest.mark.snakemake
def test_a_retriever_defined_but_not_listed_is_refused_by_name(workdir: Path) -> None:
    """Issue 36 item 9: asking for the metrics of a retriever defined under `retrievers:` but not
    listed in retrieval.retrievers gave Snakemake's bare MissingRuleException; the planner now
    names the retriever and what to do. Its run file still plans (search builds any defined one)."""
    cfg = load_config()
    cfg["retrievers"]["bm25_k15"] = {"type": "bm25", "k1": 1.5}
    plan = plan_of(cfg)
    why = plan.unplanned_run("tatqa", "dev", "bm25_k15")
    assert why is not None and why.startswith(
        "retriever 'bm25_k15' is defined under retrievers: but not listed in retrieval.retrievers"
    )
    assert plan.unplanned_run("tatqa", "dev", "bm25") is None
    assert plan.unplanned_run("tatqa", "dev", "nothing").startswith("'nothing' is no run of tatqa/dev; its runs: bm25")
    with pytest.raises(ConfigError, match="results/sample/retrieval/tatqa/dev/pipe/bm25_k15/metrics.json: retriever"):
        plan.retrieval_inputs(SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", run="bm25_k15"))
    assert plan.retrieval_inputs(SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", run="bm25")) == {
        "run": "results/sample/runs/tatqa/dev/pipe/bm25.parquet",
        "qrels": "results/sample/data/tatqa/dev/qrels.parquet",
        "queries": "results/sample/data/tatqa/dev/queries.parquet",
    }

    (workdir / "extra.yaml").write_text("retrievers:\n  bm25_k15: {type: bm25, k1: 1.5}\n")
    target = "results/sample/retrieval/tatqa/dev/pipe/bm25_k15/metrics.json"
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", "config/config.yaml", "extra.yaml", "--", target],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "MissingRuleException" not in said
    assert f"ConfigError: {target}: retriever 'bm25_k15' is defined under retrievers: but not listed" in said
