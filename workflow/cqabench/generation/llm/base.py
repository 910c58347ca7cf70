"""What every LLM backend shares: sampling parameters, the completion record, the interface.

A backend turns chat prompts into completions and nothing else. Caching, batching order,
retries of whole jobs and answer extraction live outside it (`cqabench.generation.completions`,
`cqabench.generation.cell_output`), so the three backends stay small and interchangeable and the
cache key never depends on which one happened to run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from cqabench.common.errors import ConfigError

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}
Chat = list[Message]


@dataclass(frozen=True)
class Sampling:
    """Decoding parameters; all of them enter the cache key, so changing any reruns items.

    temperature 0 means greedy decoding for every backend. Penalties are OpenAI-style
    (additive on logits per token count / presence); the hf backend refuses non-zero
    values rather than silently ignoring them, because transformers has no equivalent.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int = 0
    stop: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> Sampling:
        cfg = dict(cfg or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ConfigError(f"sampling: unknown parameter(s) {unknown}; valid: {sorted(known)}")
        if "stop" in cfg:
            stop = cfg["stop"]
            if isinstance(stop, str) or not all(isinstance(s, str) and s for s in stop):
                raise ConfigError(f"sampling.stop: expected a list of non-empty strings, got {stop!r}")
            cfg["stop"] = tuple(stop)
        s = cls(**cfg)
        if s.temperature < 0:
            raise ConfigError(f"sampling.temperature must be >= 0, got {s.temperature}")
        if not 0 < s.top_p <= 1:
            raise ConfigError(f"sampling.top_p must be in (0, 1], got {s.top_p}")
        if s.max_new_tokens < 1:
            raise ConfigError(f"sampling.max_new_tokens must be >= 1, got {s.max_new_tokens}")
        return s

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d

    def to_json(self) -> str:
        """Canonical form: the same parameters always give the same string (cache keys, Parquet)."""
        return json.dumps(self.to_dict(), sort_keys=True)


@dataclass
class Completion:
    """One model answer with the accounting the benchmark reports per item and per cell."""

    text: str
    prompt_tokens: int
    output_tokens: int
    latency_s: float
    finish_reason: str = ""
    # why the item failed for good ("" = it did not): e.g. an API that kept answering nothing.
    # A failed item is never cached; its cell's predictions show the reason.
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Completion:
        return cls(
            text=str(d["text"]),
            prompt_tokens=int(d["prompt_tokens"]),
            output_tokens=int(d["output_tokens"]),
            latency_s=float(d["latency_s"]),
            finish_reason=str(d.get("finish_reason", "")),
            error=str(d.get("error", "")),
        )


@dataclass
class LlmSpec:
    """One entry of the `llms:` config section, resolved to what a backend loads."""

    name: str
    backend: str
    source: str  # HF id, local folder, "gguf-package:<pkg>/<file>", "gguf:<path>", or an API model name
    model_path: str = ""  # what to load (the converted folder for GGUF sources); "" = source
    dtype: str = "auto"
    batch_size: int = 8
    revision: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # backend-specific keys, passed through

    @property
    def load_path(self) -> str:
        return self.model_path or self.source


class ToolsApi(Protocol):
    """Tool calls through an API's `tools=` field for a dialogue its caller keeps as text (the
    open-book agent: cqabench.generation.agent.openai_tools). The caller owns both directions of the
    translation, so a backend that sends tools imports nothing of the agent."""

    schemas: list[dict[str, Any]]  # the `tools=` definitions sent with each request

    def to_api_messages(self, chat: Chat) -> list[dict[str, Any]]:
        """The text-format chat as the API's messages, tool calls and tool results."""
        ...

    def action_text(self, content: str | None, name: str, arguments: str) -> str:
        """A reply's tool call as the text format's turn."""
        ...


class Backend(Protocol):
    """The one interface the orchestration sees.

    `generate` yields lists of (index into `chats`, Completion) as they become available —
    a whole batch for local backends, a few finished requests for API backends — so the
    caller can persist each list durably before asking for more. Every index is yielded
    exactly once. What identifies the weights for the cache key is `cqabench.generation.llm.model_identity`,
    a function of the config alone, so a fully cached cell never loads the model.
    """

    name: str

    def generate(
        self, chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None
    ) -> Iterator[list[tuple[int, Completion]]]:
        """`labels` (e.g. qids) only name items in log lines."""
        ...

    def close(self) -> None: ...


DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"


def api_key_env(spec: LlmSpec) -> str:
    """The environment variable an openai model's key is read from (`llms.<name>.api_key_env`)."""
    return str(spec.options.get("api_key_env") or DEFAULT_API_KEY_ENV)
