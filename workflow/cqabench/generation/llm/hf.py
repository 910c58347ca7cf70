"""transformers `generate`, batched with left padding.

Left padding keeps every prompt's last token at the same position, so one `generate` call
serves a whole batch; the attention mask hides the pads and the model derives position ids
from it, which is why a batched greedy answer equals the unbatched one
(tests/generation/test_hf_backend.py checks this on the real SmolLM2 model).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.generation.llm.base import Chat, Completion, LlmSpec, Sampling

log = logging.getLogger(__name__)


def _torch_dtype(name: str):
    import torch

    if name in ("", "auto"):
        return "auto"
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ConfigError(f"dtype {name!r} is not a torch dtype (e.g. float32, bfloat16, float16)")
    return value


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text before the first stop string, as OpenAI-compatible servers return it."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def render_chat(tokenizer, chat: Chat) -> str:
    """The exact text the model reads: the model's own chat template when it has one.

    Shared with the vllm backend, which tokenizes this text itself so that both engines
    see the same token ids.
    """
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    return "\n\n".join(m["content"] for m in chat) + "\n"


def adds_special_tokens(tokenizer) -> bool:
    """Whether tokenizing a rendered prompt adds BOS/EOS: not when a chat template wrote its own."""
    return not bool(tokenizer.chat_template)


def _stop_criteria(tokenizer, stop: Sequence[str], prompt_width: int):
    """Per-row stop on text, looking only at the tail of what was generated.

    transformers' own `stop_strings` precomputes tables over the whole vocabulary on every
    `generate` call (about a minute per batch for SmolLM2 on 2 CPU cores); decoding the last
    few generated tokens of each row per step costs microseconds and stops the same rows.
    The prompt is excluded, since few-shot prompts contain the stop strings themselves.
    """
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    # a stop string needs at most one token per character, plus one token straddling its start
    window = max(len(s) for s in stop) + 1

    class StopOnText(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            tails = input_ids[:, prompt_width:][:, -window:].tolist()
            texts = tokenizer.batch_decode(tails, skip_special_tokens=True)
            return torch.tensor([any(s in t for s in stop) for t in texts], device=input_ids.device)

    return StoppingCriteriaList([StopOnText()])


def resolve_device(name: str, setting: object, cuda_available: bool, cuda_count: int):
    """The torch device of `llms.<name>.device` (unset: the GPU when there is one), or one line
    naming the key: a name torch does not know (`gpu`) or a GPU this machine does not have would
    otherwise end in a traceback after the tokenizer is loaded."""
    import torch

    if setting in (None, ""):
        return torch.device("cuda" if cuda_available else "cpu")
    try:
        device = torch.device(str(setting))
    except (RuntimeError, ValueError):
        raise ConfigError(f"llms.{name}.device: {setting!r} is not a torch device; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not cuda_available:
        raise ConfigError(
            f"llms.{name}.device: {setting!r}, but torch sees no GPU on this machine "
            "(torch.cuda.is_available() is false); set device: cpu, or run the job where a GPU is"
        )
    if device.type == "cuda" and device.index is not None and device.index >= cuda_count:
        raise ConfigError(
            f"llms.{name}.device: {setting!r}, but torch sees {cuda_count} GPU(s) (cuda:0..cuda:{cuda_count - 1})"
        )
    return device


class HfBackend:
    name = "hf"
    model: Any  # a transformers causal LM; None after close(), which its types have no room for

    def __init__(self, spec: LlmSpec) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # OpenMP threads that spin while waiting make a small model 5-20x slower as soon as
        # another process shares the cores (measured on 2 cores: 1.6 s vs 0.15 s per decoding
        # step). Passive waiting costs little when the machine is idle. Takes effect only if
        # torch's OpenMP runtime has not started yet, hence also set by `cqabench generate`.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.spec = spec
        if spec.model_path and not Path(spec.model_path).is_dir():
            raise ConfigError(
                f"llm {spec.name!r}: converted model folder {spec.model_path} is missing; "
                "run `cqabench convert-model` (the workflow's convert_model rule) first"
            )
        if spec.options.get("threads"):
            torch.set_num_threads(int(spec.options["threads"]))
        self.batch_size = max(1, int(spec.batch_size))
        available = torch.cuda.is_available()
        self.device = resolve_device(
            spec.name, spec.options.get("device"), available, torch.cuda.device_count() if available else 0
        )
        # a folder (converted GGUF, fetched hub model) is one revision already: none is passed
        kwargs = {"revision": spec.revision} if spec.revision and not spec.model_path else {}
        self.tokenizer = AutoTokenizer.from_pretrained(spec.load_path, **kwargs)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(spec.load_path, dtype=_torch_dtype(spec.dtype), **kwargs)
        self.model.to(self.device).eval()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.pad_id = self.tokenizer.pad_token_id

    def render(self, chat: Chat) -> str:
        """The exact text the model reads: the model's own chat template when it has one."""
        return render_chat(self.tokenizer, chat)

    def _generate_kwargs(self, sampling: Sampling) -> dict:
        if sampling.frequency_penalty or sampling.presence_penalty:
            raise ConfigError(
                f"llm {self.spec.name!r}: the hf backend has no frequency/presence penalty; "
                "set them to 0 or use the vllm/openai backend"
            )
        kwargs: dict = {
            "max_new_tokens": sampling.max_new_tokens,
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids),
        }
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=None)
        return kwargs

    def _output_length(self, ids: list[int]) -> tuple[int, str]:
        """Generated tokens up to and including the first end-of-sequence; after it come pads."""
        for i, tok in enumerate(ids):
            if tok in self.eos_ids:
                return i + 1, "stop"
        return len(ids), "length"

    def generate(
        self, chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None
    ) -> Iterator[list[tuple[int, Completion]]]:
        """One batch per yield, in the order given (the caller sorts by length to limit padding).

        latency_s of an item is its batch's wall time divided by the batch size: the cost
        share of that item, which is what per-cell totals add up.
        """
        import torch

        kwargs = self._generate_kwargs(sampling)
        if not sampling.greedy:
            torch.manual_seed(sampling.seed)
        texts = [self.render(c) for c in chats]
        add_special = adds_special_tokens(self.tokenizer)  # a chat template writes its own specials
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            enc = self.tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=add_special).to(
                self.device
            )
            began = time.perf_counter()
            width = enc["input_ids"].shape[1]
            extra = {"stopping_criteria": _stop_criteria(self.tokenizer, sampling.stop, width)} if sampling.stop else {}
            with torch.inference_mode():
                out = self.model.generate(**enc, **kwargs, **extra)
            elapsed = time.perf_counter() - began
            prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
            results = []
            for row, ids in enumerate(out[:, width:].tolist()):
                n, finish = self._output_length(ids)
                text = self.tokenizer.decode(ids[:n], skip_special_tokens=True)
                text, stopped = cut_at_stop(text, sampling.stop)
                if stopped and finish == "stop":
                    n -= 1  # rows halted on a stop string are padded with the pad (= eos) token
                results.append(
                    (
                        start + row,
                        Completion(
                            text=text,
                            prompt_tokens=int(prompt_lens[row]),
                            output_tokens=n,
                            latency_s=elapsed / len(batch),
                            finish_reason="stop" if stopped else finish,
                        ),
                    )
                )
            log.debug("hf batch of %d generated in %.2f s", len(batch), elapsed)
            yield results

    def close(self) -> None:
        self.model = None
