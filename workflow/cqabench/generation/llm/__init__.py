"""LLM backends (hf, vllm, openai) behind one interface, plus what identifies a model.

`llm_spec` turns one `llms:` config entry into an `LlmSpec`; `model_identity` says what
pins the model's weights for the cache key; `make_backend` imports a backend only when it
is used, so vllm and a network are needed only by configurations that ask for them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.generation.llm.base import DEFAULT_API_KEY_ENV, Backend, Completion, LlmSpec, Sampling, api_key_env
from cqabench.generation.llm.convert import is_gguf_source, read_provenance
from cqabench.generation.llm.registry import BACKENDS, make_backend
from cqabench.models import store as model_store

__all__ = [
    "BACKENDS",
    "Backend",
    "Completion",
    "DEFAULT_API_KEY_ENV",
    "LlmSpec",
    "Sampling",
    "api_key_env",
    "identity_hash",
    "llm_spec",
    "make_backend",
    "model_identity",
    "sampling_for",
]

_SPEC_KEYS = {"backend", "source", "dtype", "batch_size", "revision", "sampling"}
OPENAI_ENDPOINT = "https://api.openai.com/v1"  # the client's default base_url


def llm_spec(name: str, cfg: Mapping[str, Any], models_dir: str | Path = "results/models") -> LlmSpec:
    """An `llms.<name>` entry as a spec; GGUF sources load from their converted folder (under
    `models_dir`), hub names of hf / vllm models from their fetched folder `models/<org>/<name>`
    (`cqabench.models.store`), whose locked commit becomes the spec's revision: that commit is
    what the cache key and every result row record."""
    if "backend" not in cfg or "source" not in cfg:
        raise ConfigError(f"llms.{name}: needs 'backend' and 'source'")
    backend = cfg["backend"]
    if backend not in BACKENDS:
        raise ConfigError(f"llms.{name}.backend: unknown {backend!r}; valid: {', '.join(BACKENDS)}")
    source = str(cfg["source"])
    if is_gguf_source(source) and backend == "openai":
        raise ConfigError(f"llms.{name}: a GGUF source needs backend hf or vllm, not openai")
    model_path = str(Path(models_dir) / name) if is_gguf_source(source) else ""
    revision = str(cfg.get("revision") or "")
    if backend != "openai" and model_store.is_hub_id(source):
        model_path = model_store.locate(source, f"llms.{name}", revision)
        revision = model_store.fetched_revision(model_path) or revision
    return LlmSpec(
        name=name,
        backend=backend,
        source=source,
        model_path=model_path,
        dtype=str(cfg.get("dtype", "auto")),
        batch_size=int(cfg.get("batch_size", 8)),
        revision=revision,
        options={k: v for k, v in cfg.items() if k not in _SPEC_KEYS},
    )


def sampling_for(defaults: Mapping[str, Any] | None, llm_cfg: Mapping[str, Any]) -> Sampling:
    """`generation.sampling` overlaid by the model's own `sampling:` (e.g. penalties for API models)."""
    return Sampling.from_config({**dict(defaults or {}), **dict(llm_cfg.get("sampling") or {})})


def _folder_fingerprint(folder: Path) -> str:
    """A cheap content id for a local checkpoint: config bytes plus weight file names and sizes.

    Hashing gigabytes of weights on every job would cost minutes; set `revision` in config
    to force new keys after editing weights in place with unchanged sizes.
    """
    h = hashlib.sha256()
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        p = folder / name
        if p.is_file():
            h.update(name.encode() + b"\0" + p.read_bytes())
    for p in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(f"{p.name}\0{p.stat().st_size}".encode())
    return h.hexdigest()


def endpoint_id(url: str) -> str:
    """An API endpoint as the identity records it: scheme, host, port and path, without any
    user:password@ or query (the identity is written to summary.json), no trailing slash."""
    from urllib.parse import urlsplit

    url = url.strip()
    if "://" not in url:
        return url.rstrip("/")
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path.rstrip('/')}"


def model_identity(spec: LlmSpec) -> dict[str, Any]:
    """What pins the weights, for cache keys and result provenance.

    GGUF: the sha256 of the GGUF file (from the converted folder's provenance.json). Local
    folder: a fingerprint of it. Hub id or API model: the name plus the configured revision
    (unpinned ones are marked so; an API provider may change them without notice). An API
    model also names its endpoint when it is not OpenAI's own (`base_url`, else the
    OPENAI_BASE_URL the client reads): one model name on two servers is two models, and the
    item cache is shared by every config (cache/llm).
    """
    identity: dict[str, Any] = {"source": spec.source}
    if spec.revision:
        identity["revision"] = spec.revision
    endpoint = (spec.options.get("base_url") or os.environ.get("OPENAI_BASE_URL")) if spec.backend == "openai" else None
    if endpoint and endpoint_id(str(endpoint)) != OPENAI_ENDPOINT:  # OpenAI's own: the keys of before
        identity["base_url"] = endpoint_id(str(endpoint))
    if is_gguf_source(spec.source):
        prov = read_provenance(spec.load_path)
        if prov is None:
            raise ConfigError(
                f"llm {spec.name!r}: {spec.load_path} has no provenance.json; run the convert step "
                f"(cqabench convert-model) first"
            )
        identity["gguf_sha256"] = prov["gguf_sha256"]
        identity["converted_dtype"] = prov.get("dtype", "")
        # the converter decides the tokenizer, so a re-conversion may decode the same ids differently
        identity["converter_version"] = int(prov.get("converter_version", 1))
    elif spec.backend != "openai" and Path(spec.source).is_dir():
        identity["folder_sha256"] = _folder_fingerprint(Path(spec.source))
    elif not spec.revision:
        identity["revision"] = "unpinned"
    return identity


def identity_hash(identity: Mapping[str, Any]) -> str:
    """Short form of `model_identity` for result rows (metrics.json provenance.model_hash)."""
    if "gguf_sha256" in identity:
        return str(identity["gguf_sha256"])
    return hashlib.sha256(json.dumps(dict(identity), sort_keys=True).encode()).hexdigest()
