"""What VllmBackend hands to vllm.LLM on a GPU, and which prompts it refuses, without a GPU.

The test process has no vllm (tests/generation/test_vllm_backend.py starts the real CPU engine, once per
module); here a stand-in `vllm` module records the engine's arguments, so the GPU branch (no CPU
defaults) is exercised on CPU, and the engine's own length check is seen naming the cell and question.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from cqabench.common.errors import ConfigError
from cqabench.generation.completions import generate_missing, item_labels
from cqabench.generation.items import Item
from cqabench.generation.llm.base import LlmSpec, Sampling
from cqabench.generation.llm.cache import ItemCache
from cqabench.generation.llm.vllm_backend import VllmBackend, fit_problem

CHAT = [{"role": "user", "content": "one two three four five six"}]  # 6 tokens: one per word below


class FakeLLM:
    """vllm.LLM as far as VllmBackend uses it: the arguments it got, a context and a tokenizer."""

    made: list[dict[str, Any]] = []

    def __init__(self, **kwargs: Any) -> None:
        FakeLLM.made.append(kwargs)
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(max_model_len=kwargs.get("max_model_len", 2048)))

    def get_tokenizer(self) -> str:
        return "words"

    def generate(self, prompts, params, use_tqdm=False):
        raise AssertionError("a refused prompt never reaches the engine")


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A CUDA build of vllm stand-in; prompts tokenized one token per word."""
    vllm = ModuleType("vllm")
    vllm.LLM = FakeLLM
    vllm.SamplingParams = dict
    platforms = ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: False, device_name="cuda")
    inputs = ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    for name, module in (("vllm", vllm), ("vllm.platforms", platforms), ("vllm.inputs", inputs)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(
        "cqabench.generation.llm.vllm_backend.prompt_token_ids", lambda tok, chat: chat[-1]["content"].split()
    )
    FakeLLM.made = []
    return FakeLLM.made


def _spec(tmp_path: Path, **options: Any) -> LlmSpec:
    return LlmSpec(name="llama", backend="vllm", source=str(tmp_path), dtype="float16", options=options)


def test_the_batch_and_context_bounds_reach_vllm_on_a_gpu(tmp_path: Path, fake_vllm) -> None:
    VllmBackend(_spec(tmp_path, device="cuda", max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=4096))
    assert fake_vllm == [
        {
            "model": str(tmp_path),
            "dtype": "float16",
            "seed": 0,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 8192,
            "max_model_len": 4096,
            "enable_prefix_caching": True,
        }
    ]
    VllmBackend(_spec(tmp_path, device="cuda"))  # unset: vLLM's own (by GPU memory), none passed
    assert fake_vllm[1] == {"model": str(tmp_path), "dtype": "float16", "seed": 0, "enable_prefix_caching": True}


@pytest.mark.parametrize("key", ["max_num_seqs", "max_num_batched_tokens", "max_model_len"])
def test_a_bound_that_is_not_a_positive_integer_is_refused_by_key(tmp_path: Path, key: str) -> None:
    for bad in (0, 1.5, True, "256"):
        with pytest.raises(ConfigError, match=rf"llms\.llama\.{key}: expected a positive integer, got {bad!r}"):
            VllmBackend(_spec(tmp_path, **{key: bad}))


def test_fit_is_prompt_plus_the_whole_answer_budget() -> None:
    assert fit_problem(3584, 512, 4096) == ""  # exactly fills the context
    assert fit_problem(3585, 512, 4096).startswith(
        "the prompt has 3585 tokens; with max_new_tokens 512 that is 4097 > max_model_len 4096"
    )


def test_the_engine_refuses_an_item_that_cannot_fit_naming_its_cell_and_question(tmp_path: Path, fake_vllm) -> None:
    """6 prompt tokens + 3 new > max_model_len 8: the item a batch asked for is named by its cell's
    label and qid (the batch's item labels reach the engine), before anything is generated."""
    backend = VllmBackend(_spec(tmp_path, device="cuda", max_model_len=8))
    cell = "musique/dev/pipe/colbertv2/llama/few-shot/rag-k10"
    cache = ItemCache(tmp_path / "cache", max_chars=1000)
    with pytest.raises(ConfigError) as err:
        generate_missing(
            lambda: backend,
            [(Sampling(max_new_tokens=3), [Item("q7", CHAT, "k1", [])])],
            cache,
            "batch llama",
            item_labels=item_labels({"k1": [f"{cell} q7"]}),
        )
    assert str(err.value) == (
        f"llm 'llama': item {cell} q7: the prompt has 6 tokens; with max_new_tokens 3 that is 9 "
        "> max_model_len 8; shorten the prompt (generation.max_doc_chars, a smaller k) or raise "
        "max_model_len where the model allows it"
    )
