"""cqabench.planner.generation: the generation stage's decisions, each asserted on a computed value:
which interpreter runs an LLM's jobs, what a batch shares and what each of its cells keeps, and
which optional inputs reach `cqabench generate` as flags."""

from __future__ import annotations

import json
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
    env = Environment(root=ROOT, vllm_python=str(tmp_path / "cpu/bin/python"),
                      vllm_gpu_python=str(tmp_path / "gpu/bin/python"))
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
