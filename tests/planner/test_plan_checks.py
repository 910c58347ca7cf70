"""cqabench.planner.checks through the planner: settings that passed planning and failed (or planned
nothing) at run time are refused by `Plan`, each with one line naming its config key (issue 21).
Pure: a Plan built from config/config.yaml edited in memory, no Snakemake run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner import Environment, Plan

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)


def _config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def _problem_lines(config: dict[str, Any], env: Environment = ENV) -> list[str]:
    with pytest.raises(ConfigError) as err:
        Plan(config, env)
    return [ln.strip() for ln in str(err.value).splitlines()[1:]]


def test_open_book_with_no_dataset_is_refused_naming_the_key() -> None:
    config = _config()
    config["generation"]["open_book"]["datasets"] = []
    assert _problem_lines(config) == [
        "generation.open_book.datasets: empty, so setting open-book plans no cell; list the datasets that get "
        "open-book cells (config/config.yaml: [tanq]) or remove open-book from generation.settings"
    ]
    # the same empty list without the open-book setting plans (nothing to drop silently)
    config["generation"]["settings"] = ["closed"]
    assert Plan(config, ENV).generation_cells()


def test_a_dataset_in_two_pooled_corpora_is_refused_naming_both() -> None:
    config = _config()
    config["corpora"]["strategy-pool"] = ["strategyqa", "musique"]  # musique is also in wiki-multihop
    assert _problem_lines(config) == [
        "corpora: dataset musique is in 2 pooled corpora (wiki-multihop, strategy-pool); a dataset is searched "
        "in one corpus: keep it in one of them"
    ]


def test_a_dataset_listed_twice_in_one_pooled_corpus_is_refused() -> None:
    config = _config()
    config["corpora"]["wiki-multihop"] = ["musique", "2wikimultihopqa", "musique"]
    assert _problem_lines(config) == ["corpora.wiki-multihop: lists musique more than once"]


@pytest.mark.parametrize(("key", "value"), [("hops", [2]), ("answerable_only", True)])
def test_musique_only_selection_on_finqa_is_refused_naming_the_key(key: str, value: Any) -> None:
    config = _config()
    config["datasets"]["finqa"][key] = value
    lines = _problem_lines(config)
    assert lines == [
        f"datasets.finqa.{key}: selects MuSiQue questions (hop counts, answerability), which finqa "
        "does not have; only musique take it: remove it here"
    ]
    config["datasets"]["finqa"].pop(key)
    config["datasets"]["musique"][key] = value  # where prepare applies it, it plans
    Plan(config, ENV)


@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_gpu_is_not_a_device_name(backend: str) -> None:
    config = _config()
    config["llms"]["smollm2-135m"].update(backend=backend, device="gpu")
    assert _problem_lines(config) == [
        "llms.smollm2-135m.device: 'gpu' is not a device name; use cpu, cuda or cuda:N (torch's names; `gpu` is cuda)"
    ]


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_vllm_cuda_plans_whatever_the_vllm_environments_hold(tmp_path: Path, device: str) -> None:
    """Planning reads no vLLM environment (issue 22): whether the job's interpreter holds a build
    that can use the device is checked when the job starts (tests/generation/test_vllm_env.py)."""
    config = _config()
    config["llms"]["smollm2-135m"]["device"] = device
    missing = str(tmp_path / "no-venv" / "bin" / "python")
    Plan(config, Environment(root=ROOT, vllm_python=missing, vllm_gpu_python=missing))
