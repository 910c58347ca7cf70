"""cqabench.planner.generation: the generation stage's decisions, each asserted on a computed value:
which interpreter runs an LLM's jobs, what a batch shares and what each of its cells keeps, and
which optional inputs reach `cqabench generate` as flags."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from cqabench.common.errors import ConfigError
from cqabench.planner import PER_CELL_SETTINGS, Environment
from plan_helpers import ROOT, load_config, plan_of

LLM = SimpleNamespace(llm="smollm2-135m")  # config.yaml's one LLM, generated in one engine batch


def test_vllm_jobs_get_the_build_of_their_device_and_planning_reads_neither(tmp_path: Path) -> None:
    """A GPU LLM runs in .venv-vllm-gpu (make setup-gpu, the CUDA build), a CPU one in .venv-vllm
    (make setup); neither needs to exist to plan (the job checks its own: cqabench.generation.vllm_env)."""
    env = Environment(
        root=ROOT, vllm_python=str(tmp_path / "cpu/bin/python"), vllm_gpu_python=str(tmp_path / "gpu/bin/python")
    )
    config = load_config()
    config["llms"]["gpu-llm"] = {**config["llms"]["smollm2-135m"], "device": "cuda"}
    config["llms"]["default-llm"] = {k: v for k, v in config["llms"]["gpu-llm"].items() if k != "device"}
    config["llms"]["hf-llm"] = {"backend": "hf", "source": config["llms"]["smollm2-135m"]["source"]}
    config["generation"]["llms"] += ["gpu-llm", "default-llm", "hf-llm"]
    plan = plan_of(config, env)
    assert plan.python_for("smollm2-135m") == str(tmp_path / "cpu/bin/python")  # device: cpu
    assert plan.python_for("gpu-llm") == str(tmp_path / "gpu/bin/python")
    assert plan.python_for("default-llm") == str(tmp_path / "gpu/bin/python")  # vLLM's default device is the GPU
    assert plan.python_for("hf-llm") == "python"  # ENV.python: the project's own
    conda = plan_of(config, Environment(root=ROOT, vllm_python=str(tmp_path / "x"), conda=True))
    assert {conda.python_for(n) for n in ("smollm2-135m", "gpu-llm")} == {"python"}  # envs/vllm.yaml's


def test_a_batch_shares_the_model_settings_and_each_cell_keeps_its_own() -> None:
    """config.yaml: the 43 cells of smollm2-135m in one batch; the shared settings name no per-cell
    key, and each member carries only those (MuSiQue's cap of 30 questions, no distractors)."""
    plan = plan_of(load_config())
    shared = json.loads(shlex.split(plan.batch_settings(LLM))[0])
    assert shared["llm"]["backend"] == "vllm" and not set(shared) & set(PER_CELL_SETTINGS)
    members = json.loads(shlex.split(plan.batch_members(LLM))[0])
    assert len(members) == len(plan.generation_cells()) == 43
    assert members[0] == {
        "cell": "musique/train/pipe/none/smollm2-135m/few-shot/closed-k0",
        "inputs": {"queries": "results/sample/data/musique/train/queries.parquet",
                   "template": "resources/prompts/few-shot/multihop.txt"},
        "settings": {"max_questions": 30, "oracle_distractors": 0},
    }  # fmt: skip
    inputs = plan.batch_inputs(LLM)
    assert "results/sample/models/smollm2-135m" in inputs  # the converted GGUF model: no member's input
    assert f"{plan.generation_dir()}/{members[0]['cell']}/spec.json" in inputs
    with pytest.raises(ConfigError, match="generation.batch_llms: other has no planned cell"):
        plan.batch_settings(SimpleNamespace(llm="other"))


def test_only_the_optional_inputs_a_cell_has_become_flags() -> None:
    """The generate rule passes its cell's optional inputs (corpus, qrels, run, the tool corpus and
    index) as flags, quoted; the queries and template are always there and have their own."""
    given = {"queries": "q.parquet", "template": "t.txt", "run": "runs/a b.parquet", "tool_index": "index"}
    assert plan_of(load_config()).generation_args(None, given) == "--run 'runs/a b.parquet' --tool-index index"


def test_dexter_splits_each_7b_batch_over_8_gpu_jobs_and_the_default_keeps_one() -> None:
    """config/dexter.yaml: the two vLLM models' 176 cells each in one batch of 8 share jobs (GPU); every
    batched cell waits for all 8 manifests (each share holds some of its questions). config.yaml: one
    job, its manifest where it always was, no --share."""
    plan = plan_of(load_config("dexter.yaml"))
    assert plan.gen_batch_llms == ["mistral-7b", "llama2-7b"] and not plan.problems()
    shares = [f"{i}-of-8" for i in range(1, 9)]
    assert plan.all_batch_shares() == shares
    for llm in plan.gen_batch_llms:
        assert plan.uses_gpu(llm) and plan.batch_jobs_of(llm) == 8 and len(plan.batch_cells(llm)) == 176
        files = [f"results/dexter/generation/_batches/{llm}/share-{s}.json" for s in shares]
        assert plan.batch_manifests(llm) == files
        assert all(plan.cell_inputs(c)["batch"] == files for c in plan.batch_cells(llm))
    assert plan.batch_shares("gpt-3.5-turbo") == []  # an API model: no batch, each cell its own job
    assert plan.batch_share_arg(SimpleNamespace(llm="llama2-7b", share="3-of-8")) == "--share 3-of-8"
    default = plan_of(load_config())
    assert default.batch_manifests("smollm2-135m") == ["results/sample/generation/_batches/smollm2-135m.json"]
    assert default.all_batch_shares() == [] and default.batch_share_arg(LLM) == ""


def test_batch_jobs_takes_a_positive_count_for_every_batch_llm_or_one_per_llm() -> None:
    config = load_config()
    config["generation"]["batch_jobs"] = {"smollm2-135m": 3}
    plan = plan_of(config)
    assert plan.batch_shares("smollm2-135m") == ["1-of-3", "2-of-3", "3-of-3"] and not plan.problems()
    for bad, why in (
        (0, "generation.batch_jobs: expected a positive integer (jobs per batch LLM), got 0"),
        ({"smollm2-135m": "2"}, "generation.batch_jobs.smollm2-135m: expected a positive integer"),
        ({"other": 2}, "generation.batch_jobs: ['other'] are not in generation.batch_llms ['smollm2-135m']"),
    ):
        config["generation"]["batch_jobs"] = bad
        with pytest.raises(ConfigError, match=re.escape(why)):
            plan_of(config)


def test_vllm_engine_bounds_are_recorded_in_every_result_row_where_set() -> None:
    """dexter's vLLM models record their bounds (columns vllm_<key> of the fact table); an LLM that
    sets none (config.yaml's) adds no key, so its evaluate jobs' params stay as they were."""
    plan = plan_of(load_config("dexter.yaml"))
    cell = plan.batch_cells("llama2-7b")[0]
    assert {k: v for k, v in plan.generation_cell(cell).items() if k.startswith("vllm_")} == {
        "vllm_max_num_seqs": 256,
        "vllm_max_num_batched_tokens": 8192,
        "vllm_max_model_len": 4096,
    }
    mistral = plan.batch_cells("mistral-7b")[0]
    assert {k for k in plan.generation_cell(mistral) if k.startswith("vllm_")} == {
        "vllm_max_num_seqs",
        "vllm_max_num_batched_tokens",
    }
    default = plan_of(load_config())
    assert not [k for k in default.generation_cell(default.batch_cells("smollm2-135m")[0]) if k.startswith("vllm_")]
