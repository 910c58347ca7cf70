"""cqabench.planner.plan, the plan as a whole: the shipped configs, hand-counted matrices, and one
test per cross-reference error (each asserts the config key the message names). Each stage's own
decisions are tested beside it (test_data_plan.py, test_retrieval_plan.py, test_generation_plan.py,
test_evaluation_plan.py, test_report_plan.py). Pure: no Snakemake run, except one check that
`snakemake -n` prints the planner's message without a traceback."""

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
from cqabench.planner import Cell
from plan_helpers import load_config, plan_of

# ---- the shipped configs (counts as `snakemake -n --forceall` planned them before the move; the
# default has gained one open-book cell since, TANQ's tool agent, and StrategyQA's facts oracle) ----


@pytest.mark.parametrize(
    ("name", "generate", "evaluate_retrieval"), [("config.yaml", 43, 24), ("dexter.yaml", 528, 59), ("tanq.yaml", 4, 0)]
)
def test_shipped_configs_plan_the_same_cells_as_before(name: str, generate: int, evaluate_retrieval: int) -> None:
    plan = plan_of(load_config(name))
    assert len(plan.generation_cells()) == generate
    assert len(plan.retrieval_targets()) == evaluate_retrieval


def test_default_plan_by_hand() -> None:
    """config.yaml: 8 datasets x 1 serialization; closed everywhere, rag over 2 runs (BM25 and the
    BM25+MiniLM fusion) x 2 k where the
    dataset is searched (7, not TANQ), oracle where gold exists (5 of 8) plus StrategyQA's on its
    annotators' facts, open-book for TANQ only: 8 + 28 + 6 + 1 = 43."""
    plan = plan_of(load_config())
    cells = plan.generation_cells()
    by_setting = {s: [c for c in cells if c.setting == s] for s in ("closed", "rag", "oracle", "open-book")}
    assert [len(by_setting[s]) for s in ("closed", "rag", "oracle", "open-book")] == [8, 28, 6, 1]
    assert by_setting["open-book"] == [Cell("tanq", "test", "pipe", "bm25", "smollm2-135m", "few-shot", "open-book", 1)]
    assert {c.dataset for c in by_setting["oracle"]} == {
        "musique",
        "2wikimultihopqa",
        "ottqa",
        "tatqa",
        "finqa",
        "strategyqa",
    }
    assert {c.dataset: plan.context_source(c.dataset, "oracle") for c in by_setting["oracle"]}["strategyqa"] == "facts"
    assert plan.context_source("musique", "oracle") == "gold" and plan.context_source("tatqa", "rag") == "retrieved"
    # the facts oracle reads the queries (their facts column), no qrels or corpus; it is planned, so not listed
    facts = SimpleNamespace(dataset="strategyqa", split="dev", serialization="pipe", retriever="none",
                            llm="smollm2-135m", prompt="few-shot", setting="oracle", k="0")  # fmt: skip
    assert set(plan.generation_inputs(facts)) == {"queries", "template", "model"}
    assert plan.generation_settings(facts)["oracle_context"] == "facts"
    assert plan.generation_cell(facts)["context_source"] == "facts"
    assert ("strategyqa", "dev", "oracle") not in {
        (n["dataset"], n["split"], n["setting"]) for n in plan.not_planned_cells()
    }
    assert plan.corpus_of("musique") == plan.corpus_of("2wikimultihopqa") == "wiki-multihop"
    assert plan.corpus_of("tatqa") == "tatqa"
    assert plan.run_names("strategyqa", "dev") == [
        "bm25",
        "minilm",
        "bm25-irq",
        "bm25-ird-gold",
        "bm25-ird-pred",
        "bm25-minilm-rrf",
    ]
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
    config = load_config()
    config["datasets"] = {"tatqa": config["datasets"]["tatqa"]}
    config["generation"].pop("oracle_context")  # StrategyQA is not configured here
    config["corpora"] = {}
    config["serializations"] = ["pipe", "linear"]
    config["retrieval"] = {"retrievers": ["bm25", "minilm"], "k": 50}
    config["generation"].update(settings=["closed", "rag"], k=[1, 3], batch_llms=[], rag_retrievers=["bm25", "minilm"])
    plan = plan_of(config)
    assert len(plan.generation_cells()) == 10
    assert (
        plan.generation_targets()[0]
        == "results/sample/generation/tatqa/dev/pipe/none/smollm2-135m/few-shot/closed-k0/predictions.parquet"
    )
    assert (
        "results/sample/generation/tatqa/dev/linear/minilm/smollm2-135m/few-shot/rag-k3/predictions.parquet"
        in plan.generation_targets()
    )
    assert sorted(plan.retrieval_targets()) == sorted(
        f"results/sample/retrieval/tatqa/dev/{s}/{r}/metrics.json"
        for s in ("pipe", "linear")
        for r in ("bm25", "minilm")
    )
    assert plan.run_settings("bm25")["k"] == 50
    assert plan.not_planned_cells() == []


# ---- one test per cross-reference: the error names the key ----


def _external(tmp: Path) -> Callable[[dict[str, Any]], None]:
    def edit(c: dict[str, Any]) -> None:
        c["external_runs"] = {"ext": {"path": str(tmp / "missing.trec"), "dataset": "tatqa", "split": "dev"}}

    return edit


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "corpora member",
        lambda c: c["corpora"].__setitem__("wiki-multihop", ["musique", "hotpot"]),
        "corpora.wiki-multihop: datasets ['hotpot'] are not configured",
    ),
    (
        "split without files",
        lambda c: c["datasets"]["tatqa"].__setitem__("splits", ["dev", "test"]),
        "datasets.tatqa: split 'test' has no entry under files",
    ),
    (
        "corpus_splits without files",
        lambda c: c["datasets"]["tatqa"].__setitem__("corpus_splits", ["train", "dev"]),
        "datasets.tatqa: corpus_splits ['train'] have no entry under files",
    ),
    (
        "mistyped corpus",
        lambda c: c["datasets"]["musique"].__setitem__("corpus", "wiki-multihopp"),
        "datasets.musique.corpus: 'wiki-multihopp' is neither a configured dataset nor a pooled corpus",
    ),
    (
        "raw file without url or copy",
        lambda c: c["datasets"]["finqa"]["files"]["dev"]["questions"].__setitem__("path", "finqa/nowhere.json"),
        (
            "datasets.finqa.files.dev.questions: 'finqa/nowhere.json' is neither under raw_dir (resources/raw) nor in "
            "results/sample/raw, and has no url"
        ),
    ),
    (
        "retriever setting",
        lambda c: c["retrievers"]["minilm"].__setitem__("similarity", "cosin"),
        "retrievers.minilm: similarity 'cosin' is unknown; valid: dot, cosine",
    ),
    (
        "retrieval.retrievers",
        lambda c: c["retrieval"]["retrievers"].append("bm26"),
        "retrieval.retrievers: ['bm26'] are not defined under `retrievers:`",
    ),
    (
        "decomposition retriever",
        lambda c: c["retrieval"]["decomposition"].__setitem__("retrievers", ["bm2"]),
        "retrieval.decomposition.retrievers: ['bm2'] are not defined under `retrievers:`",
    ),
    (
        "retrieval.datasets",
        lambda c: (c["datasets"].pop("finqa"), c["generation"].pop("max_questions_by_dataset", None)),
        "retrieval.datasets: datasets ['finqa'] are not configured",
    ),
    (
        "decomposition datasets",
        lambda c: (
            c["datasets"].pop("tanq"),
            c["retrieval"]["decomposition"].__setitem__("datasets", ["strategyqa", "tanq"]),
        ),
        "retrieval.decomposition.datasets: datasets ['tanq'] are not configured",
    ),
    (
        "external run clash",
        lambda c: c.__setitem__(
            "external_runs", {"bm25": {"path": "config/config.yaml", "dataset": "tatqa", "split": "dev"}}
        ),
        "external_runs: names ['bm25'] are also retriever names",
    ),
    (
        "external run split",
        lambda c: c.__setitem__(
            "external_runs", {"ext": {"path": "config/config.yaml", "dataset": "tatqa", "split": "test"}}
        ),
        "external_runs.ext: tatqa/test is not configured",
    ),
    (
        "generation.llms",
        lambda c: c["generation"]["llms"].append("smollm3"),
        "generation.llms: ['smollm3'] are not defined under `llms:`",
    ),
    (
        "generation.batch_llms",
        lambda c: c["generation"].__setitem__("batch_llms", ["smollm"]),
        "generation.batch_llms: ['smollm'] are not defined under `llms:`",
    ),
    (
        "rag without runs",
        lambda c: c["generation"].__setitem__("rag_retrievers", []),
        "generation.settings has rag: set generation.rag_retrievers and generation.k",
    ),
    (
        "rag_retrievers typo",
        lambda c: c["generation"]["rag_retrievers"].append("minilmm"),
        "generation.rag_retrievers: ['minilmm'] name no run",
    ),
    (
        "rag_retrievers typo without rag",
        lambda c: c["generation"].update(settings=["closed"], rag_retrievers=["bm25x"]),
        "generation.rag_retrievers: ['bm25x'] name no run",
    ),
    (
        "generation.k deeper than retrieval.k",
        lambda c: c["generation"].__setitem__("k", [5, 200]),
        "generation.k: 200 exceeds retrieval.k: 100 for rag_retrievers bm25",
    ),
    (
        "generation.k deeper than the IR-Q run",
        lambda c: c["generation"].update(rag_retrievers=["bm25", "bm25-irq"], k=[20]),
        "generation.k: 20 exceeds retrieval.decomposition.k: 10 for rag_retrievers bm25-irq",
    ),
    (
        "families key",
        lambda c: c["generation"].__setitem__("families", {"hotpotqa": "multihop"}),
        "generation.families: datasets ['hotpotqa'] are not configured",
    ),
    (
        "oracle_distractors key",
        lambda c: c["generation"].__setitem__("oracle_distractors", {"musiqu": 2}),
        "generation.oracle_distractors: datasets ['musiqu'] are not configured",
    ),
    (
        "max_questions_by_dataset key",
        lambda c: c["generation"].__setitem__("max_questions_by_dataset", {"tanqq": 5}),
        "generation.max_questions_by_dataset: datasets ['tanqq'] are not configured",
    ),
    (
        "oracle_context key",
        lambda c: c["generation"]["oracle_context"].__setitem__("strategyq", "facts"),
        "generation.oracle_context: datasets ['strategyq'] are not configured",
    ),
    (
        "facts where there are none",
        lambda c: c["generation"]["oracle_context"].__setitem__("musique", "facts"),
        "generation.oracle_context.musique: facts exist only for ['strategyqa']",
    ),
    (
        "facts with distractors",
        lambda c: c["generation"].__setitem__("oracle_distractors", {"strategyqa": 2}),
        "generation.oracle_context.strategyqa: facts cannot take generation.oracle_distractors",
    ),
    (
        "openai with gguf",
        lambda c: c["llms"]["smollm2-135m"].__setitem__("backend", "openai"),
        "llms.smollm2-135m.source: backend openai sends `source` to an API as the model name",
    ),
    (
        "missing template",
        lambda c: c["generation"].__setitem__("prompts_dir", "resources/prompts_tanq"),
        "generation.prompts_dir: template 'resources/prompts_tanq/few-shot/multihop.txt' (prompt few-shot, family multihop) is missing",
    ),
    (
        "significance baseline",
        lambda c: c.setdefault("report", {}).__setitem__("significance", {"baseline": "bm52"}),
        "report.significance.baseline: 'bm52' names no run",
    ),
    (
        "report.expected",
        lambda c: c.setdefault("report", {}).__setitem__("expected", ["config/expected/none.yaml"]),
        "report.expected: 'config/expected/none.yaml' is not a file",
    ),
]


@pytest.mark.parametrize(("what", "edit", "message"), CASES, ids=[c[0] for c in CASES])
def test_each_broken_reference_names_its_key(what: str, edit: Callable[[dict[str, Any]], None], message: str) -> None:
    config = load_config()
    edit(config)
    with pytest.raises(ConfigError) as err:
        plan_of(config)
    assert message in str(err.value)


def test_rag_k_up_to_the_run_depth_plans_and_every_deeper_pair_is_named() -> None:
    """retrieval.k 100, decomposition.k 10 (config.yaml): k 10 fits every run; k 11 is refused for
    the IR-Q run only, k 101 for all three runs (hand-listed: 4 lines); an external run has no
    depth at planning (generate refuses a k its file cannot fill)."""
    config = load_config()
    config["generation"].update(rag_retrievers=["bm25", "minilm", "bm25-irq"], k=[10])
    assert (
        Cell("strategyqa", "dev", "pipe", "bm25-irq", "smollm2-135m", "few-shot", "rag", 10)
        in plan_of(config).generation_cells()
    )
    config["generation"]["k"] = [11, 101]
    with pytest.raises(ConfigError) as err:
        plan_of(config)
    lines = [ln.strip() for ln in str(err.value).splitlines() if ln.strip().startswith("generation.k:")]
    assert [ln.split(" (")[0] for ln in lines] == [
        "generation.k: 101 exceeds retrieval.k: 100 for rag_retrievers bm25",
        "generation.k: 101 exceeds retrieval.k: 100 for rag_retrievers minilm",
        "generation.k: 11 exceeds retrieval.decomposition.k: 10 for rag_retrievers bm25-irq",
        "generation.k: 101 exceeds retrieval.decomposition.k: 10 for rag_retrievers bm25-irq",
    ]
    plan = plan_of(
        {**load_config(), "external_runs": {"ext": {"path": "config/config.yaml", "dataset": "tatqa", "split": "dev"}}}
    )
    assert plan.run_depth("ext") is None and plan.run_depth("bm25") == ("retrieval.k", 100)


def test_external_run_without_its_file_names_the_path(tmp_path: Path) -> None:
    config = load_config()
    _external(tmp_path)(config)
    with pytest.raises(ConfigError, match=r"external_runs\.ext\.path: '.*missing\.trec' is not a file"):
        plan_of(config)


def test_every_problem_is_listed_at_once() -> None:
    config = load_config()
    config["datasets"]["musique"]["corpus"] = "nowhere"
    config["generation"]["llms"] = ["gpt-5"]
    with pytest.raises(ConfigError) as err:
        plan_of(config)
    text = str(err.value)
    assert "datasets.musique.corpus:" in text and "generation.llms: ['gpt-5']" in text


def test_unchanged_config_is_not_mutated() -> None:
    config = load_config()
    before = copy.deepcopy(config)
    plan_of(config).generation_cells()
    assert config == before


@pytest.mark.snakemake
def test_snakemake_prints_the_planner_message_without_a_traceback(tmp_path: Path, workdir: Path) -> None:
    config = load_config()
    config["datasets"]["musique"]["corpus"] = "wiki-multihopp"  # was a KeyError traceback
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(path)],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "datasets.musique.corpus: 'wiki-multihopp' is neither a configured dataset nor a pooled corpus" in out
    assert "Traceback" not in out and "KeyError" not in out
