"""vLLM offline inference (`LLM.chat`), for GPU runs of open models.

vllm is imported only when this backend is chosen: it is not installed in the default
environment (it lives in envs/vllm.yaml), and nothing else in cqabench needs it.
vLLM schedules its own continuous batches; `batch_size` here is only how many prompts go
into one `LLM.chat` call, i.e. how often finished items are committed to the cache.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

from cqabench.errors import ConfigError
from cqabench.llm.base import Chat, Completion, LlmSpec, Sampling

log = logging.getLogger(__name__)

# LLM(...) keyword arguments that may be given in the llms.<name> config entry.
ENGINE_OPTIONS = ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "enforce_eager", "trust_remote_code")


def import_vllm():
    try:
        import vllm
    except Exception as exc:  # ImportError, or a CUDA/driver error raised at import time
        raise ConfigError(
            f"the vllm backend needs the vllm package (see envs/vllm.yaml); importing it failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return vllm


class VllmBackend:
    name = "vllm"

    def __init__(self, spec: LlmSpec) -> None:
        vllm = import_vllm()
        self.spec = spec
        self._vllm = vllm
        self.batch_size = max(1, int(spec.options.get("chunk_size", max(spec.batch_size, 256))))
        engine = {k: spec.options[k] for k in ENGINE_OPTIONS if k in spec.options}
        if spec.revision:
            engine["revision"] = spec.revision
        self.llm = vllm.LLM(model=spec.load_path, dtype=spec.dtype or "auto", seed=int(spec.options.get("seed", 0)), **engine)

    def _params(self, sampling: Sampling):
        return self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            frequency_penalty=sampling.frequency_penalty,
            presence_penalty=sampling.presence_penalty,
            seed=sampling.seed,
            stop=list(sampling.stop) or None,
        )

    def generate(
        self, chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None
    ) -> Iterator[list[tuple[int, Completion]]]:
        params = self._params(sampling)
        for start in range(0, len(chats), self.batch_size):
            chunk = list(chats[start:start + self.batch_size])
            began = time.perf_counter()
            outputs = self.llm.chat(chunk, params, use_tqdm=False)
            elapsed = time.perf_counter() - began
            results = []
            for row, out in enumerate(outputs):
                best = out.outputs[0]
                results.append(
                    (
                        start + row,
                        Completion(
                            text=best.text,
                            prompt_tokens=len(out.prompt_token_ids or []),
                            output_tokens=len(best.token_ids),
                            latency_s=elapsed / len(chunk),
                            finish_reason=str(best.finish_reason or ""),
                        ),
                    )
                )
            log.debug("vllm chunk of %d generated in %.2f s", len(chunk), elapsed)
            yield results

    def close(self) -> None:
        self.llm = None
