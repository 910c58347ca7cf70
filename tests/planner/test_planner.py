"""cqabench.planner: the plan of the shipped configs, hand-counted matrices, and one test per
cross-reference error (each asserts the config key the message names). Pure: no Snakemake run,
except one check that `snakemake -n` prints the planner's message without a traceback."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from cqabench.common.errors import ConfigError
from cqabench.planner import Environment, Plan

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)


def _config(name: str = "config.yaml") -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def _plan(config: dict[str, Any], env: Environment = ENV) -> Plan:
    return Plan(config, env)


# ---- the shipped configs (counts as `snakemake -n --forceall` planned them before the move; the
# default has gained one open-book cell since, TANQ's tool agent, and StrategyQA's facts oracle) ----


@pytest.mark.parametrize(
    ("name", "generate", "eval_retrieval"), [("config.yaml", 43, 24), ("dexter.yaml", 528, 59), ("tanq.yaml", 4, 0)]
)
def test_shipped_configs_plan_the_same_cells_as_before(name: str, generate: int, eval_retrieval: int) -> None:
    plan = _plan(_config(name))
    assert len(plan.generation_cells()) == generate
    assert len(plan.retrieval_targets()) == eval_retrieval


def test_default_plan_by_hand() -> None:
    """config.yaml: 8 datasets x 1 serialization; closed everywhere, rag over 2 runs (BM25 and the
    BM25+MiniLM fusion) x 2 k where the
    dataset is searched (7, not TANQ), oracle where gold exists (5 of 8) plus StrategyQA's on its
    annotators' facts, open-book for TANQ only: 8 + 28 + 6 + 1 = 43."""
    plan = _plan(_config())
    cells = plan.generation_cells()
    by_setting = {s: [c for c in cells if c[6] == s] for s in ("closed", "rag", "oracle", "open-book")}
    assert [len(by_setting[s]) for s in ("closed", "rag", "oracle", "open-book")] == [8, 28, 6, 1]
    assert by_setting["open-book"] == [("tanq", "test", "pipe", "bm25", "smollm2-135m", "few-shot", "open-book", 1)]
    assert {c[0] for c in by_setting["oracle"]} == {"musique", "2wikimultihopqa", "ottqa", "tatqa", "finqa",
                                                    "strategyqa"}
    assert {c[0]: plan.context_source(c[0], "oracle") for c in by_setting["oracle"]}["strategyqa"] == "facts"
    assert plan.context_source("musique", "oracle") == "gold" and plan.context_source("tatqa", "rag") == "retrieved"
    # the facts oracle reads the queries (their facts column), no qrels or corpus; it is planned, so not listed
    facts = SimpleNamespace(dataset="strategyqa", split="dev", serialization="pipe", retriever="none",
                            llm="smollm2-135m", prompt="few-shot", setting="oracle", k="0")  # fmt: skip
    assert set(plan.generation_inputs(facts)) == {"queries", "template", "model"}
    assert plan.generation_settings(facts)["oracle_context"] == "facts"
    assert plan.generation_cell(facts)["context_source"] == "facts"
    assert ("strategyqa", "dev", "oracle") not in {(n["dataset"], n["split"], n["setting"]) for n in plan.not_planned_cells()}
    assert plan.corpus_of("musique") == plan.corpus_of("2wikimultihopqa") == "wiki-multihop"
    assert plan.corpus_of("tatqa") == "tatqa"
    assert plan.run_names("strategyqa", "dev") == ["bm25", "minilm", "bm25-irq", "bm25-ird-gold", "bm25-ird-pred",
                                                   "bm25-minilm-rrf"]
    assert plan.run_names("tanq", "test") == []
    assert ("tanq", "test", "rag") in {(n["dataset"], n["split"], n["setting"]) for n in plan.not_planned_cells()}
    assert plan.run_settings("bm25-irq")["queries"] == "question" and plan.run_settings("bm25-irq")["k"] == 10
    assert plan.run_settings("minilm")["k"] == 100
    w = SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", retriever="bm25", llm="smollm2-135m",
                        prompt="few-shot", setting="rag", k="3")  # fmt: skip
    assert plan.cell_inputs(w) == {
        "queries": "results/sample/data/tatqa/dev/queries.parquet",
        "template": "resources/prompts/few-shot/numeric.txt",
        "model": "results/sample/models/smollm2-135m",
        "corpus": "results/sample/corpora/tatqa/corpus.parquet",
        "run": "results/sample/runs/tatqa/dev/pipe/bm25.parquet",
        "spec": "results/sample/generation/tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k3/spec.json",
        "batch": "results/sample/generation/_batches/smollm2-135m.json",
    }
    # the cell's own rerun triggers: its files, template hash and settings (the cell_spec rule)
    spec = plan.cell_spec(w)
    assert spec["cell"] == "tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k3"
    assert spec["inputs"] == {k: v for k, v in plan.cell_inputs(w).items() if k not in ("spec", "batch")}
    assert spec["settings"] == plan.generation_settings(w) and len(spec["template_hash"]) > 0
    assert "oracle_context" not in spec["settings"]  # only a facts oracle carries it: other params unchanged
    assert plan.generation_cell(w)["retriever_settings"]["type"] == "bm25"


def test_small_matrix_by_hand() -> None:
    """One dataset, two serializations, closed + rag over two runs at k 1 and 3: 2 x (1 + 2 x 2) = 10."""
    config = _config()
    config["datasets"] = {"tatqa": config["datasets"]["tatqa"]}
    config["generation"].pop("oracle_context")  # StrategyQA is not configured here
    config["corpora"] = {}
    config["serializations"] = ["pipe", "linear"]
    config["retrieval"] = {"retrievers": ["bm25", "minilm"], "k": 50}
    config["generation"].update(settings=["closed", "rag"], k=[1, 3], batch_llms=[], rag_retrievers=["bm25", "minilm"])
    plan = _plan(config)
    assert len(plan.generation_cells()) == 10
    assert plan.generation_targets()[0] == "results/sample/generation/tatqa/dev/pipe/none/smollm2-135m/few-shot/closed-k0/predictions.parquet"
    assert "results/sample/generation/tatqa/dev/linear/minilm/smollm2-135m/few-shot/rag-k3/predictions.parquet" in plan.generation_targets()
    assert sorted(plan.retrieval_targets()) == sorted(
        f"results/sample/retrieval/tatqa/dev/{s}/{r}/metrics.json" for s in ("pipe", "linear") for r in ("bm25", "minilm")
    )
    assert plan.run_settings("bm25")["k"] == 50
    assert plan.not_planned_cells() == []


# ---- one test per cross-reference: the error names the key ----


def _external(tmp: Path) -> Callable[[dict[str, Any]], None]:
    def edit(c: dict[str, Any]) -> None:
        c["external_runs"] = {"ext": {"path": str(tmp / "missing.trec"), "dataset": "tatqa", "split": "dev"}}

    return edit


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("corpora member", lambda c: c["corpora"].__setitem__("wiki-multihop", ["musique", "hotpot"]),
     "corpora.wiki-multihop: datasets ['hotpot'] are not configured"),
    ("split without files", lambda c: c["datasets"]["tatqa"].__setitem__("splits", ["dev", "test"]),
     "datasets.tatqa: split 'test' has no entry under files"),
    ("corpus_splits without files", lambda c: c["datasets"]["tatqa"].__setitem__("corpus_splits", ["train", "dev"]),
     "datasets.tatqa: corpus_splits ['train'] have no entry under files"),
    ("mistyped corpus", lambda c: c["datasets"]["musique"].__setitem__("corpus", "wiki-multihopp"),
     "datasets.musique.corpus: 'wiki-multihopp' is neither a configured dataset nor a pooled corpus"),
    ("raw file without url or copy",
     lambda c: c["datasets"]["finqa"]["files"]["dev"]["questions"].__setitem__("path", "finqa/nowhere.json"),
     ("datasets.finqa.files.dev.questions: 'finqa/nowhere.json' is neither under raw_dir (resources/raw) nor in "
      "results/sample/raw, and has no url")),
    ("retriever setting", lambda c: c["retrievers"]["minilm"].__setitem__("similarity", "cosin"),
     "retrievers.minilm: similarity 'cosin' is unknown; valid: dot, cosine"),
    ("retrieval.retrievers", lambda c: c["retrieval"]["retrievers"].append("bm26"),
     "retrieval.retrievers: ['bm26'] are not defined under `retrievers:`"),
    ("decomposition retriever", lambda c: c["retrieval"]["decomposition"].__setitem__("retrievers", ["bm2"]),
     "retrieval.decomposition.retrievers: ['bm2'] are not defined under `retrievers:`"),
    ("retrieval.datasets", lambda c: (c["datasets"].pop("finqa"), c["generation"].pop("max_questions_by_dataset", None)),
     "retrieval.datasets: datasets ['finqa'] are not configured"),
    ("decomposition datasets",
     lambda c: (c["datasets"].pop("tanq"), c["retrieval"]["decomposition"].__setitem__("datasets", ["strategyqa", "tanq"])),
     "retrieval.decomposition.datasets: datasets ['tanq'] are not configured"),
    ("external run clash",
     lambda c: c.__setitem__("external_runs", {"bm25": {"path": "config/config.yaml", "dataset": "tatqa", "split": "dev"}}),
     "external_runs: names ['bm25'] are also retriever names"),
    ("external run split",
     lambda c: c.__setitem__("external_runs", {"ext": {"path": "config/config.yaml", "dataset": "tatqa", "split": "test"}}),
     "external_runs.ext: tatqa/test is not configured"),
    ("generation.llms", lambda c: c["generation"]["llms"].append("smollm3"),
     "generation.llms: ['smollm3'] are not defined under `llms:`"),
    ("generation.batch_llms", lambda c: c["generation"].__setitem__("batch_llms", ["smollm"]),
     "generation.batch_llms: ['smollm'] are not defined under `llms:`"),
    ("rag without runs", lambda c: c["generation"].__setitem__("rag_retrievers", []),
     "generation.settings has rag: set generation.rag_retrievers and generation.k"),
    ("rag_retrievers typo", lambda c: c["generation"]["rag_retrievers"].append("minilmm"),
     "generation.rag_retrievers: ['minilmm'] name no run"),
    ("rag_retrievers typo without rag",
     lambda c: c["generation"].update(settings=["closed"], rag_retrievers=["bm25x"]),
     "generation.rag_retrievers: ['bm25x'] name no run"),
    ("generation.k deeper than retrieval.k", lambda c: c["generation"].__setitem__("k", [5, 200]),
     "generation.k: 200 exceeds retrieval.k: 100 for rag_retrievers bm25"),
    ("generation.k deeper than the IR-Q run",
     lambda c: c["generation"].update(rag_retrievers=["bm25", "bm25-irq"], k=[20]),
     "generation.k: 20 exceeds retrieval.decomposition.k: 10 for rag_retrievers bm25-irq"),
    ("families key", lambda c: c["generation"].__setitem__("families", {"hotpotqa": "multihop"}),
     "generation.families: datasets ['hotpotqa'] are not configured"),
    ("oracle_distractors key", lambda c: c["generation"].__setitem__("oracle_distractors", {"musiqu": 2}),
     "generation.oracle_distractors: datasets ['musiqu'] are not configured"),
    ("max_questions_by_dataset key", lambda c: c["generation"].__setitem__("max_questions_by_dataset", {"tanqq": 5}),
     "generation.max_questions_by_dataset: datasets ['tanqq'] are not configured"),
    ("oracle_context key", lambda c: c["generation"]["oracle_context"].__setitem__("strategyq", "facts"),
     "generation.oracle_context: datasets ['strategyq'] are not configured"),
    ("facts where there are none", lambda c: c["generation"]["oracle_context"].__setitem__("musique", "facts"),
     "generation.oracle_context.musique: facts exist only for ['strategyqa']"),
    ("facts with distractors", lambda c: c["generation"].__setitem__("oracle_distractors", {"strategyqa": 2}),
     "generation.oracle_context.strategyqa: facts cannot take generation.oracle_distractors"),
    ("openai with gguf", lambda c: c["llms"]["smollm2-135m"].__setitem__("backend", "openai"),
     "llms.smollm2-135m.source: backend openai sends `source` to an API as the model name"),
    ("missing template", lambda c: c["generation"].__setitem__("prompts_dir", "resources/prompts_tanq"),
     "generation.prompts_dir: template 'resources/prompts_tanq/few-shot/multihop.txt' (prompt few-shot, family multihop) is missing"),
    ("significance baseline",
     lambda c: c.setdefault("report", {}).__setitem__("significance", {"baseline": "bm52"}),
     "report.significance.baseline: 'bm52' names no run"),
    ("report.expected", lambda c: c.setdefault("report", {}).__setitem__("expected", ["config/expected/none.yaml"]),
     "report.expected: 'config/expected/none.yaml' is not a file"),
]


@pytest.mark.parametrize(("what", "edit", "message"), CASES, ids=[c[0] for c in CASES])
def test_each_broken_reference_names_its_key(what: str, edit: Callable[[dict[str, Any]], None], message: str) -> None:
    config = _config()
    edit(config)
    with pytest.raises(ConfigError) as err:
        _plan(config)
    assert message in str(err.value)


def test_rag_k_up_to_the_run_depth_plans_and_every_deeper_pair_is_named() -> None:
    """retrieval.k 100, decomposition.k 10 (config.yaml): k 10 fits every run; k 11 is refused for
    the IR-Q run only, k 101 for all three runs (hand-listed: 4 lines); an external run has no
    depth at planning (generate refuses a k its file cannot fill)."""
    config = _config()
    config["generation"].update(rag_retrievers=["bm25", "minilm", "bm25-irq"], k=[10])
    assert ("strategyqa", "dev", "pipe", "bm25-irq", "smollm2-135m", "few-shot", "rag", 10) in _plan(config).generation_cells()
    config["generation"]["k"] = [11, 101]
    with pytest.raises(ConfigError) as err:
        _plan(config)
    lines = [ln.strip() for ln in str(err.value).splitlines() if ln.strip().startswith("generation.k:")]
    assert [ln.split(" (")[0] for ln in lines] == [
        "generation.k: 101 exceeds retrieval.k: 100 for rag_retrievers bm25",
        "generation.k: 101 exceeds retrieval.k: 100 for rag_retrievers minilm",
        "generation.k: 11 exceeds retrieval.decomposition.k: 10 for rag_retrievers bm25-irq",
        "generation.k: 101 exceeds retrieval.decomposition.k: 10 for rag_retrievers bm25-irq",
    ]
    plan = _plan({**_config(), "external_runs": {"ext": {"path": "config/config.yaml", "dataset": "tatqa", "split": "dev"}}})
    assert plan.run_depth("ext") is None and plan.run_depth("bm25") == ("retrieval.k", 100)


def test_external_run_without_its_file_names_the_path(tmp_path: Path) -> None:
    config = _config()
    _external(tmp_path)(config)
    with pytest.raises(ConfigError, match=r"external_runs\.ext\.path: '.*missing\.trec' is not a file"):
        _plan(config)


def test_vllm_jobs_get_the_build_of_their_device_and_planning_reads_neither(tmp_path: Path) -> None:
    """A GPU LLM runs in .venv-vllm-gpu (make setup-gpu, the CUDA build), a CPU one in .venv-vllm
    (make setup); neither needs to exist to plan (the job checks its own: cqabench.generation.vllm_env)."""
    env = Environment(root=ROOT, vllm_python=str(tmp_path / "cpu/bin/python"),
                      vllm_gpu_python=str(tmp_path / "gpu/bin/python"))
    config = _config()
    config["llms"]["gpu-llm"] = {**config["llms"]["smollm2-135m"], "device": "cuda"}
    config["llms"]["default-llm"] = {k: v for k, v in config["llms"]["gpu-llm"].items() if k != "device"}
    config["llms"]["hf-llm"] = {"backend": "hf", "source": config["llms"]["smollm2-135m"]["source"]}
    config["generation"]["llms"] += ["gpu-llm", "default-llm", "hf-llm"]
    plan = _plan(config, env)
    assert plan.python_for("smollm2-135m") == str(tmp_path / "cpu/bin/python")  # device: cpu
    assert plan.python_for("gpu-llm") == str(tmp_path / "gpu/bin/python")
    assert plan.python_for("default-llm") == str(tmp_path / "gpu/bin/python")  # vLLM's default device is the GPU
    assert plan.python_for("hf-llm") == "python"  # ENV.python: the project's own
    conda = _plan(config, Environment(root=ROOT, vllm_python=str(tmp_path / "x"), conda=True))
    assert {conda.python_for(n) for n in ("smollm2-135m", "gpu-llm")} == {"python"}  # envs/vllm.yaml's


def test_every_problem_is_listed_at_once() -> None:
    config = _config()
    config["datasets"]["musique"]["corpus"] = "nowhere"
    config["generation"]["llms"] = ["gpt-5"]
    with pytest.raises(ConfigError) as err:
        _plan(config)
    text = str(err.value)
    assert "datasets.musique.corpus:" in text and "generation.llms: ['gpt-5']" in text


def test_a_raw_file_with_a_url_or_a_downloaded_copy_plans(tmp_path: Path) -> None:
    config = _config()
    spec = config["datasets"]["finqa"]["files"]["dev"]["questions"]
    spec.update(path="finqa/elsewhere.json", url="https://example.org/finqa/dev.json")
    plan = _plan(config)
    assert plan.raw_input("finqa/elsewhere.json") == "results/sample/raw/finqa/elsewhere.json"
    assert plan.raw_specs_by_path()["finqa/elsewhere.json"]["url"] == "https://example.org/finqa/dev.json"
    spec["url"] = None  # a copy already downloaded into results/sample/raw is as good as a URL
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    (tmp_path / "config").symlink_to(ROOT / "config")
    (tmp_path / "results/sample/raw/finqa").mkdir(parents=True)
    (tmp_path / "results/sample/raw/finqa/elsewhere.json").write_text("[]")
    _plan(config, Environment(root=tmp_path, vllm_python=sys.executable))


def test_corpus_only_splits_get_their_download_spec() -> None:
    """Before the planner, a raw file of a corpus-only split (dexter.yaml: MuSiQue train) was
    planned for download with an empty spec, i.e. no URL: it could only fail at run time."""
    plan = _plan(_config("dexter.yaml"))
    spec = plan.raw_specs_by_path()["musique/musique_ans_v1.0_train.jsonl"]
    assert spec["url"].startswith("https://")


def test_export_beir_false_drops_only_the_exports() -> None:
    """`export_beir: false` skips the BEIR / Pyserini copies of each corpus (docs/data.md); the
    canonical tables and retrieval corpora stay targets."""
    config = _config()
    default = _plan(config).data_targets()
    skipped = _plan({**config, "export_beir": False}).data_targets()
    beir = [t for t in default if t.startswith("results/sample/beir/")]
    assert len(beir) == sum(len(_plan(config).splits(ds)) for ds in config["datasets"]) * len(config["serializations"])
    assert skipped == [t for t in default if t not in beir] and beir
    assert _plan({**config, "export_beir": True}).data_targets() == default


def test_unchanged_config_is_not_mutated() -> None:
    config = _config()
    before = copy.deepcopy(config)
    _plan(config).generation_cells()
    assert config == before


def test_snakemake_prints_the_planner_message_without_a_traceback(tmp_path: Path, workdir: Path) -> None:
    config = _config()
    config["datasets"]["musique"]["corpus"] = "wiki-multihopp"  # was a KeyError traceback
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(path)], cwd=workdir, capture_output=True, text=True, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "datasets.musique.corpus: 'wiki-multihopp' is neither a configured dataset nor a pooled corpus" in out
    assert "Traceback" not in out and "KeyError" not in out


# ---- dense / SPLADE / ColBERT encoding in part jobs (encode_jobs) ----


def test_dexter_plans_32_encode_parts_for_every_neural_retriever_on_every_corpus() -> None:
    """config/dexter.yaml: encode_jobs 32 for SPLADE, the five dense retrievers and ColBERTv2 (its
    parts after one codec job per corpus), BM25 one job; 6 corpora x 1 serialization."""
    plan = _plan(_config("dexter.yaml"))
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
    config = _config()
    config["retrievers"]["bm25"]["encode_jobs"] = 4
    with pytest.raises(ConfigError, match="retrievers.bm25: bm25 retriever: unknown setting.*encode_jobs"):
        _plan(config)
    config = _config()
    config["retrievers"]["minilm"]["encode_jobs"] = 0
    with pytest.raises(ConfigError, match="retrievers.minilm: dense retriever: encode_jobs must be a positive integer"):
        _plan(config)
    config = _config()
    config["retrievers"]["minilm"]["encode_jobs"] = 3
    plan = _plan(config)
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
