"""Dense bi-encoder retrieval: DPR, ANCE, TAS-B, MPNet, Contriever, any sentence-transformers model.

The corpus is encoded in shards of `shard_size` documents, each written as a float32 `.npy`
file (whatever `dtype` the model ran in; the next shard is tokenized while one is encoded,
`encode_loop.ahead`); search opens them memory-mapped. With `index: flat` (exact inner product,
the default) each shard is scanned block by block with torch on the job's device and the top-k
merged (cqabench.retrieval.exact), so neither building nor searching ever holds more than one
shard of embeddings in RAM. The approximate indexes (`ivf`, `hnsw`), for corpora of tens of
millions, are trained on a sample and filled shard by shard; faiss then holds their (compressed,
for IVF-PQ) codes, and faiss-cpu searches them on the CPU (`search_device`).

With `encode_jobs: N` the shards are written by N part jobs (`encode_part`, each a contiguous run
of whole shards numbered as here) and `gather` assembles the same index from them
(cqabench.retrieval.parts).

Cosine similarity is inner product on L2-normalized vectors, so every index is an IP index.
What each family means (encoders, pooling, similarity, how title and text are joined) is resolved
once by `resolve()` and written to `dense.json` in the index, next to `settings.json`.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cqabench.common.errors import ConfigError
from cqabench.models.store import revision_settings
from cqabench.retrieval.base import (
    DEFAULT_SEARCH_ONLY_KEYS,
    Doc,
    QueryText,
    Results,
    check_device,
    check_positive_int,
    rank,
)
from cqabench.retrieval.encode_loop import ahead, chunks
from cqabench.retrieval.encoders import check_dtype, default_batch_size
from cqabench.retrieval.exact import flat_search

log = logging.getLogger(__name__)

# encode_jobs: how many part jobs encode the corpus (cqabench.retrieval.parts); the index is the
# same for any value, so it is not part of what an index is checked against.
SEARCH_ONLY_KEYS = frozenset({"nprobe", "ef_search", "threads", "batch_size", "device", "encode_jobs"})
RESOLVED_FILE = "dense.json"
SIMILARITIES = ("dot", "cosine")
INDEXES = ("flat", "ivf", "ivfpq", "hnsw")
PAIR = "pair"  # doc_format value: title and text as a BERT sentence pair (DPR's own recipe)

# Per family: pooling, similarity, document format, query prefix. Each is the recipe of the
# family's paper / reference code; a config key of the same name overrides it.
FAMILIES: dict[str, dict[str, Any]] = {
    # sentence-transformers decides pooling/normalization from the model's own modules;
    # the join is DEXTER's DenseFullSearch one (title + "[SEP]" + text).
    # max_length None: the model's own max_seq_length (256 for all-MiniLM-L6-v2), as DEXTER.
    "sentence-transformers": {
        "pooling": None,
        "similarity": "cosine",
        "doc_format": "{title}[SEP]{text}",
        "max_length": None,
    },
    "dpr": {"pooling": "cls", "similarity": "dot", "doc_format": PAIR},
    "ance": {"pooling": "cls", "similarity": "dot", "doc_format": "{title} [SEP] {text}"},
    "tas-b": {"pooling": "cls", "similarity": "dot", "doc_format": "{title} [SEP] {text}"},
    "mpnet": {"pooling": "mean", "similarity": "cosine", "doc_format": "{title} {text}"},
    "contriever": {"pooling": "mean", "similarity": "dot", "doc_format": "{title} {text}"},
}
_DEFAULTS = {
    "max_length": 512,
    "query_max_length": 64,
    "shard_size": 10000,
    "index": "flat",
    "backend": "torch",
    "quantize": "none",
    "nlist": 4096,
    "pq_m": 16,
    "hnsw_m": 32,
    "train_size": 200000,
}
_KNOWN = {
    "type",
    "family",
    "model",
    "query_model",
    "doc_model",
    "revision",
    "query_revision",
    "doc_revision",
    "pooling",
    "similarity",
    "doc_format",
    "query_prefix",
    "doc_prefix",
    "dtype",
    "batch_size",
    "query_batch_size",
    "device",
    "threads",
    "nprobe",
    "ef_search",
    "encode_jobs",
    "passages_per_part",  # read by the planner only (cqabench.retrieval.parts.part_count), never recorded
    *_DEFAULTS,
}


# Search/run-time settings (not part of the recipe in dense.json): what they default to.
# batch_size None: BATCH_SIZE's value for the device.
_RUNTIME_DEFAULTS: dict[str, Any] = {
    "batch_size": None, "query_batch_size": None, "device": "cpu", "threads": None, "nprobe": None, "ef_search": None,
    "encode_jobs": 1,
}  # fmt: skip
BATCH_SIZE = {"cpu": 32, "gpu": 128}  # documents per batch (not measured on a GPU yet: issue 37)
# A key that only one kind of index (or family) reads: given anywhere else it would be recorded
# in the results while changing nothing, so it is refused at planning time.
_APPLIES: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "nlist": ("index ivf or ivfpq", lambda r: r["index"] in ("ivf", "ivfpq")),
    "train_size": ("index ivf or ivfpq", lambda r: r["index"] in ("ivf", "ivfpq")),
    "nprobe": ("index ivf or ivfpq (flat searches every vector, hnsw uses ef_search)", lambda r: r["index"] in ("ivf", "ivfpq")),
    "pq_m": ("index ivfpq", lambda r: r["index"] == "ivfpq"),
    "hnsw_m": ("index hnsw", lambda r: r["index"] == "hnsw"),
    "ef_search": ("index hnsw", lambda r: r["index"] == "hnsw"),
    "pooling": ("families other than sentence-transformers (its model's own modules pool)",
                lambda r: r["family"] != "sentence-transformers"),
}  # fmt: skip


def recipe_of(resolved: dict[str, Any]) -> dict[str, Any]:
    """What decides the vectors and the index (dense.json's recipe): no search/run-time key."""
    drop = SEARCH_ONLY_KEYS | DEFAULT_SEARCH_ONLY_KEYS
    return {k: v for k, v in resolved.items() if k not in drop}


def resolve(settings: dict[str, Any]) -> dict[str, Any]:
    """The complete recipe an index is built with (family defaults overlaid by the config), plus
    the run-time settings (batch sizes, device, threads, nprobe, ef_search), each checked."""
    unknown = sorted(set(settings) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"dense retriever: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(_KNOWN))}"
        )
    fam = settings.get("family", "sentence-transformers")
    if fam not in FAMILIES:
        raise ConfigError(f"dense family {fam!r} is unknown; valid: {', '.join(FAMILIES)}")
    out: dict[str, Any] = {"family": fam, **_DEFAULTS, **FAMILIES[fam], "query_prefix": "", "doc_prefix": ""}
    out.update({k: v for k, v in settings.items() if k in out and v is not None})
    model = settings.get("model")
    out["query_model"] = settings.get("query_model") or model
    out["doc_model"] = settings.get("doc_model") or model
    if not out["query_model"] or not out["doc_model"]:
        raise ConfigError(f"dense family {fam}: set `model`, or both `query_model` and `doc_model`")
    out.update(revision_settings(settings, ("model", "query_model", "doc_model"), "dense"))
    if out["similarity"] not in SIMILARITIES:
        raise ConfigError(f"similarity {out['similarity']!r} is unknown; valid: {', '.join(SIMILARITIES)}")
    if out["index"] not in INDEXES:
        raise ConfigError(f"index {out['index']!r} is unknown; valid: {', '.join(INDEXES)}")
    if out["backend"] not in ("torch", "onnx") or out["quantize"] not in ("none", "int8"):
        raise ConfigError("backend must be torch or onnx, quantize none or int8")
    fmt = out["doc_format"]
    if fmt != PAIR and ("{text}" not in fmt or set(_fields(fmt)) - {"title", "text"}):
        raise ConfigError(f"doc_format {fmt!r} must be 'pair' or use {{text}} (and optionally {{title}}) only")
    for key in ("max_length", "query_max_length", "shard_size", "nlist", "pq_m", "hnsw_m", "train_size"):
        if out.get(key) is not None and (not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 1):
            raise ConfigError(f"dense setting {key} must be a positive integer, got {out[key]!r}")
    # (A value equal to the default is what every index records anyway; refusing it would make
    # resolve() refuse its own output, which the family functions resolve again.)
    defaults = {**_DEFAULTS, **FAMILIES[fam]}
    for key, (where, applies) in _APPLIES.items():
        if settings.get(key) is not None and settings[key] != defaults.get(key) and not applies(out):
            raise ConfigError(f"dense setting {key} applies to {where} only; this retriever has "
                              f"family {out['family']}, index {out['index']}")  # fmt: skip
    runtime = {**_RUNTIME_DEFAULTS, **{k: settings[k] for k in _RUNTIME_DEFAULTS if settings.get(k) is not None}}
    check_device("dense", runtime["device"])
    if runtime["batch_size"] is None:
        runtime["batch_size"] = default_batch_size(runtime["device"], BATCH_SIZE["cpu"], BATCH_SIZE["gpu"])
    check_positive_int(
        "dense", runtime, "batch_size", "query_batch_size", "threads", "nprobe", "ef_search", "encode_jobs"
    )
    # The precision the vectors are computed in: part of the recipe (it changes the vectors).
    out["dtype"] = check_dtype("dense", settings.get("dtype"), runtime["device"], out["backend"], out["quantize"])
    if runtime["device"] != "cpu" and (out["backend"] != "torch" or out["quantize"] != "none"):
        raise ConfigError(
            f"dense setting device {runtime['device']!r} needs backend torch and quantize none "
            "(onnxruntime here and int8 dynamic quantization run on CPU only)"
        )
    return {**out, **runtime}


def _fields(fmt: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(fmt) if name is not None]


def doc_input(recipe: dict[str, Any], title: str, text: str) -> str | tuple[str, str]:
    """What the document encoder reads; an empty title drops the join (DEXTER does the same)."""
    if recipe["doc_format"] == PAIR:
        return (title, recipe["doc_prefix"] + text)
    if not title.strip():
        return (recipe["doc_prefix"] + text).strip()
    return (recipe["doc_prefix"] + recipe["doc_format"].format(title=title, text=text)).strip()


class _Encoders:
    """Load the query and document encoders once (one model when both names are equal)."""

    def __init__(self, recipe: dict[str, Any], index_dir: Path) -> None:
        self.recipe = recipe  # resolve()'s output: recipe and run-time settings
        self.cache: dict[str, Any] = {}
        # The exported (and quantized) ONNX graphs live in the index, so search reuses them.
        same = recipe["query_model"] == recipe["doc_model"]
        self.onnx = {
            "query": index_dir / "onnx" / ("model.onnx" if same else "query.onnx"),
            "doc": index_dir / "onnx" / ("model.onnx" if same else "doc.onnx"),
        }

    @property
    def query(self) -> Any:
        """Loaded on first use: a search never loads a two-tower model's document encoder."""
        return self._load(self.recipe["query_model"], self.onnx["query"], self.cache)

    @property
    def doc(self) -> Any:
        return self._load(self.recipe["doc_model"], self.onnx["doc"], self.cache)

    def _load(self, spec: str, onnx_path: Path, cache: dict[str, Any]) -> Any:
        from cqabench.retrieval import encoders

        if spec in cache:
            return cache[spec]
        r, threads, device, dtype = self.recipe, self.recipe["threads"], self.recipe["device"], self.recipe["dtype"]
        normalize = r["similarity"] == "cosine"
        log.info("dense: loading %s on %s (threads %s)", spec, device, threads or "torch default")
        parts = None
        onnx_on_cpu = (
            (r["backend"], r["quantize"]) != ("torch", "none") and device == "cpu" and dtype in (None, "float32")
        )
        if r["family"] == "sentence-transformers" and onnx_on_cpu:
            parts = encoders.st_onnx_parts(spec)  # a plain stack: no need to load it in torch first
        if r["family"] == "sentence-transformers":
            if parts is None:
                st = encoders.STEncoder(spec, device=device, threads=threads, dtype=dtype)
                if r["backend"] == "torch" and r["quantize"] == "none":
                    cache[spec] = st
                    return st
                parts = (*st.hf_parts(), st.default_length)
            pooling, st_norm, length = parts
            enc = encoders.HFEncoder(
                spec, pooling, normalize or st_norm, r["backend"], r["quantize"], onnx_path, threads
            )
            enc.default_length = length
        else:
            enc = encoders.HFEncoder(
                spec, r["pooling"], normalize, r["backend"], r["quantize"], onnx_path, threads, device, dtype
            )
        cache[spec] = enc
        return enc

    def prepare_docs(self, docs: list[Doc], batch_size: int) -> Any:
        """The host side of encoding `docs` (tokenized batches), safe to run in another thread."""
        texts = [doc_input(self.recipe, title, text) for _, title, text in docs]
        return self.doc.prepare(texts, self.recipe["max_length"] or self.doc.default_length, batch_size)

    def run_docs(self, prepared: Any) -> np.ndarray:
        return _finish(self.doc.run(prepared), self.recipe)

    def encode_queries(self, texts: list[str], batch_size: int) -> np.ndarray:
        out = self.query.encode(
            [self.recipe["query_prefix"] + t for t in texts], self.recipe["query_max_length"], batch_size
        )
        return _finish(out, self.recipe)


def _finish(vectors: np.ndarray, recipe: dict[str, Any]) -> np.ndarray:
    from cqabench.retrieval.encoders import l2_normalize

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return l2_normalize(vectors) if recipe["similarity"] == "cosine" else vectors


def build_index(docs: Iterable[Doc], index_dir: Path, settings: dict[str, Any]) -> None:
    """Encode shard by shard to .npy files, then (approximate indexes only) fill faiss from them."""
    recipe = resolve(settings)
    index_dir = Path(index_dir)
    meta = _encode_shards(docs, index_dir, recipe, 0)
    if not meta["count"]:
        raise ConfigError("dense index: the corpus is empty")
    _finish_index(index_dir, meta["shards"], meta["dim"], meta["count"], recipe)


def _encode_shards(docs: Iterable[Doc], out: Path, recipe: dict[str, Any], first_shard: int) -> dict[str, Any]:
    """Encode `docs` in chunks of `shard_size` into out/shards/NNNNN.npy (numbered from
    `first_shard`) and out/docids.txt; the one encoding loop of a whole index and of a part."""
    shards_dir = out / "shards"
    shards_dir.mkdir(parents=True, exist_ok=True)
    encoders = _Encoders(recipe, out)
    batch_size = int(recipe["batch_size"])
    log.info("dense: encoding documents in batches of %d, %s", batch_size, recipe["dtype"])
    seen: set[str] = set()
    shard_files: list[str] = []
    dim = 0
    _ = encoders.doc  # the model is loaded (and torch threads set) here, not in the tokenizing thread
    with open(out / "docids.txt", "w", encoding="utf-8") as ids:
        shards = ahead(chunks(docs, recipe["shard_size"]), lambda c: encoders.prepare_docs(c, batch_size))
        for n, (chunk, prepared) in enumerate(shards, start=first_shard):
            for docid, _, _ in chunk:
                if docid in seen or "\n" in docid:
                    raise ConfigError(f"dense index: docid {docid!r} is repeated or holds a newline")
                seen.add(docid)
                ids.write(docid + "\n")
            vectors = encoders.run_docs(prepared)
            dim = vectors.shape[1]
            name = f"{n:05d}.npy"
            np.save(shards_dir / name, vectors)
            shard_files.append(name)
            log.info("dense: encoded shard %d (%d documents so far)", n, len(seen))
    return {"dim": dim, "count": len(seen), "shards": shard_files}


def _finish_index(index_dir: Path, shard_files: list[str], dim: int, count: int, recipe: dict[str, Any]) -> None:
    """The approximate index (if asked) and dense.json, from the shards in index_dir/shards."""
    if recipe["index"] != "flat":
        _build_faiss(index_dir, shard_files, dim, recipe)
    meta = {"recipe": recipe_of(recipe), "dim": dim, "count": count, "shards": shard_files}
    (index_dir / RESOLVED_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ---- encoding in part jobs (cqabench.retrieval.parts) ----


def part_chunk(settings: dict[str, Any], rows: int) -> int:
    """A part covers whole shards: each shard is encoded exactly as the single job encodes it."""
    return int(resolve(settings)["shard_size"])


def encode_part(docs: Iterable[Doc], out: Path, settings: dict[str, Any], first_shard: int) -> dict[str, Any]:
    """One part's shards (numbered as in the whole index), docids.txt and, for onnx, its graph."""
    return _encode_shards(docs, Path(out), resolve(settings), first_shard)


def gather(parts: list[tuple[Path, dict[str, Any]]], index_dir: Path, settings: dict[str, Any]) -> None:
    """The index from checked parts, in order: shards linked in, docids joined, faiss filled."""
    from cqabench.retrieval.parts import link_or_copy

    recipe = resolve(settings)
    index_dir = Path(index_dir)
    (index_dir / "shards").mkdir(parents=True, exist_ok=True)
    shard_files: list[str] = []
    dims = {int(rec["dim"]) for _, rec in parts if rec["count"]}
    if len(dims) > 1:
        raise ConfigError(f"dense parts have different vector sizes {sorted(dims)}; rerun them")
    with open(index_dir / "docids.txt", "wb") as ids:
        for folder, rec in parts:
            for name in rec["shards"]:
                link_or_copy(folder / "shards" / name, index_dir / "shards" / name)
                shard_files.append(name)
            with open(folder / "docids.txt", "rb") as fh:
                shutil.copyfileobj(fh, ids)
    count = sum(int(rec["count"]) for _, rec in parts)
    if not count:
        raise ConfigError("dense index: the corpus is empty")
    # The exported ONNX graph search reuses (every part holds the same one: the export cache).
    onnx = next((folder / "onnx" for folder, _ in parts if (folder / "onnx").is_dir()), None)
    if onnx is not None:
        shutil.copytree(onnx, index_dir / "onnx", copy_function=lambda s, d: link_or_copy(Path(s), Path(d)))
    _finish_index(index_dir, shard_files, dims.pop(), count, recipe)


def _build_faiss(index_dir: Path, shard_files: list[str], dim: int, recipe: dict[str, Any]) -> None:
    import faiss

    if recipe["threads"]:
        faiss.omp_set_num_threads(int(recipe["threads"]))
    shards = [np.load(index_dir / "shards" / f, mmap_mode="r") for f in shard_files]
    total = sum(len(s) for s in shards)
    kind = recipe["index"]
    index: faiss.Index
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(recipe["hnsw_m"]), faiss.METRIC_INNER_PRODUCT)
    else:
        nlist = max(1, min(int(recipe["nlist"]), total // 39))  # faiss wants >= 39 points per list
        quantizer = faiss.IndexFlatIP(dim)
        ivf: faiss.IndexIVF
        if kind == "ivf":
            ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            ivf = faiss.IndexIVFPQ(quantizer, dim, nlist, int(recipe["pq_m"]), 8, faiss.METRIC_INNER_PRODUCT)
        # Train on an evenly spaced sample drawn across shards (never the whole corpus).
        want = min(total, int(recipe["train_size"]))
        picks = np.linspace(0, total - 1, want).astype(np.int64)
        offsets = np.cumsum([0] + [len(s) for s in shards])
        sample = np.concatenate(
            [np.asarray(s[picks[(picks >= lo) & (picks < hi)] - lo]) for s, lo, hi in zip(shards, offsets, offsets[1:])]
        )
        ivf.train(np.ascontiguousarray(sample, dtype=np.float32))
        ivf.quantizer = quantizer
        index = ivf
    for s in shards:
        index.add(np.ascontiguousarray(s, dtype=np.float32))
    faiss.write_index(index, str(index_dir / "index.faiss"))


def _load_meta(index_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
    path = Path(index_dir) / RESOLVED_FILE
    if not path.is_file():
        raise ConfigError(f"{index_dir} holds no {RESOLVED_FILE}: not a dense index; rebuild it")
    meta = json.loads(path.read_text(encoding="utf-8"))
    asked = recipe_of(resolve(settings))
    if meta["recipe"] != json.loads(json.dumps(asked)):
        diff = sorted(k for k in set(asked) | set(meta["recipe"]) if asked.get(k) != meta["recipe"].get(k))
        raise ConfigError(
            f"dense index {index_dir} was built with another recipe (differs in: {', '.join(diff)}); rebuild it"
        )
    return meta


def search_device(settings: dict[str, Any]) -> str:
    """The device a search with these (resolved) settings runs on: the retriever's device for a
    flat index (query encoder and exact scan, cqabench.retrieval.exact), the CPU for faiss's
    IVF / HNSW indexes (faiss-cpu; their queries are encoded on the CPU too, so the job needs
    no GPU). The planner asks for a GPU by the same function (retrieval.job_resources.job_device)."""
    return str(settings["device"]) if settings["index"] == "flat" else "cpu"


def search(index_dir: Path, queries: list[QueryText], k: int, settings: dict[str, Any]) -> Results:
    """Top-k by inner product; flat indexes merge exact per-shard results, others ask faiss."""
    import faiss

    index_dir = Path(index_dir)
    meta = _load_meta(index_dir, settings)
    run = resolve(settings)  # the recipe (equal to meta's) and the run-time settings
    results: Results = {qid: [] for qid, _ in queries}
    if not queries:
        return results
    docids = (index_dir / "docids.txt").read_text(encoding="utf-8").split("\n")[:-1]
    device = search_device(run)
    if device != "cpu":
        from cqabench.retrieval.encoders import require_device

        require_device(device, "dense search")  # never a silent CPU scan on a GPU job
    encoders = _Encoders({**run, "device": device}, index_dir)
    if run["threads"]:
        faiss.omp_set_num_threads(int(run["threads"]))
    batch_size = int(run["query_batch_size"] or run["batch_size"])
    log.info("dense: encoding %d queries in batches of %d", len(queries), batch_size)
    q = encoders.encode_queries([text for _, text in queries], batch_size)
    depth = min(k, meta["count"])
    if run["index"] == "flat":
        log.info(
            "dense: exact scan of %d shards on %s (threads %s)",
            len(meta["shards"]),
            device,
            run["threads"] or "torch default",
        )
        shards = [index_dir / "shards" / name for name in meta["shards"]]
        scores, ids = flat_search(shards, q, depth, device, run["threads"])
    else:
        index = faiss.read_index(str(index_dir / "index.faiss"))
        if run["nprobe"] is not None:
            faiss.extract_index_ivf(index).nprobe = int(run["nprobe"])
        if run["ef_search"] is not None:
            # read_index returns the concrete class (IndexHNSWFlat here); faiss's stub says Index
            index.hnsw.efSearch = int(run["ef_search"])  # type: ignore[attr-defined]
        log.info("dense: faiss %s search, nprobe %s, ef_search %s", run["index"], run["nprobe"], run["ef_search"])
        scores, ids = index.search(q, depth)
    for row, (qid, _) in enumerate(queries):
        hits = [(docids[i], float(s)) for i, s in zip(ids[row], scores[row]) if i >= 0]
        results[qid] = rank(hits, k)
    return results
