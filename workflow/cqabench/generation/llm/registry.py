"""The backend registry: a config's `backend` name to its class, imported only when used.

It is kept apart from `cqabench.generation.llm.base` (the interface every backend implements), so the
backends import the base and the registry imports the backends, never the other way round.
"""

from __future__ import annotations

from cqabench.common.errors import ConfigError
from cqabench.generation.llm.base import Backend, LlmSpec

BACKENDS = ("hf", "vllm", "openai")


def make_backend(spec: LlmSpec) -> Backend:
    """Import the chosen backend lazily so that, e.g., vllm is needed only where it is used."""
    if spec.backend == "hf":
        from cqabench.generation.llm.hf import HfBackend

        return HfBackend(spec)
    if spec.backend == "vllm":
        from cqabench.generation.llm.vllm_backend import VllmBackend

        return VllmBackend(spec)
    if spec.backend == "openai":
        from cqabench.generation.llm.openai_backend import OpenAIBackend

        return OpenAIBackend(spec)
    raise ConfigError(f"llm {spec.name!r}: unknown backend {spec.backend!r}; valid: {', '.join(BACKENDS)}")
