"""SPLADE: learned sparse term weights in a Lucene impact index (never a dense matrix).

A text's weight for vocabulary term v is max over its tokens t of log(1 + ReLU(logit[t, v])),
padding masked out (SPLADE v2 "max" pooling). Weights are scaled by `quantization` and rounded
to integers, written as Anserini's JsonVectorCollection and indexed with `-impact
-pretokenized`, so a document's score is the integer dot product of query and document weights,
computed by Lucene over posting lists. Queries are encoded here and given to Anserini's
SimpleImpactSearcher as {term: weight} maps: no second copy of the model runs in Java.

`dtype` (float32, float16, bfloat16; float16 on a GPU by default) is the precision the model runs
in; the max over tokens is taken on the raw logits (exact in any dtype) and only the `[B, vocab]`
maxima are turned into weights, in float32: log(1 + ReLU(x)) is increasing, so the max of the
weights is the weight of the max, and half-precision rounding never reaches the log. The next
flush of documents is tokenized while one is encoded (`encode_loop.ahead`).

Lengths: `doc_max_length` / `query_max_length` default to the model's limit (512 for BERT);
the original DEXTER toolkit cut documents at 64 tokens (set `doc_max_length: 64` to match).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from cqabench.common.errors import ConfigError
from cqabench.common.progress import Progress
from cqabench.models.store import revision_settings
from cqabench.retrieval.base import Doc, QueryText, Results, check_device, check_positive_int, rank
from cqabench.retrieval.encode_loop import Prepared, ahead, chunks, tokenize_batches
from cqabench.retrieval.encoders import (
    check_dtype,
    default_batch_size,
    require_device,
    resolve_model,
    set_threads,
    torch_dtype,
)
from cqabench.retrieval.java import autoclass, start_jvm

log = logging.getLogger(__name__)

LUCENE_DIR = "lucene"
# Lucene's BooleanQuery clause limit: a query with more terms fails inside Anserini's thread
# pool with no useful message. Trained SPLADE queries have tens of terms; past the limit we keep
# the heaviest ones and say so.
MAX_QUERY_TERMS = 1024
# encode_jobs: how many part jobs encode the corpus (cqabench.retrieval.parts); same index for any value.
SEARCH_ONLY_KEYS = frozenset({"threads", "batch_size", "query_batch_size", "device", "encode_jobs"})
# Documents per encoder flush (their texts are batched longest-first among themselves); a part of
# an `encode_jobs` split starts at a multiple of it, so it encodes the batches a single job does.
FLUSH_DOCS = 1024
_DEFAULTS: dict[str, Any] = {
    "doc_max_length": None,
    "query_max_length": None,
    "quantization": 100,
    "doc_format": "{title} {text}",
}
# Run-time settings (search-only keys; the index is the same): torch and Anserini threads,
# documents per encoder batch while indexing, queries per batch while searching, torch device.
# threads None: torch's own default for encoding, one Anserini thread; batch_size None: BATCH_SIZE's.
_RUNTIME_DEFAULTS: dict[str, Any] = {
    "threads": None,
    "batch_size": None,
    "query_batch_size": 32,
    "device": "cpu",
    "encode_jobs": 1,
}
BATCH_SIZE = {"cpu": 8, "gpu": 32}  # [B, L, 30522] logits: 1 GB at 32 x 512 in float16 (not measured on a GPU yet)
# passages_per_part: read by the planner only (cqabench.retrieval.parts.part_count), never recorded
_KNOWN = {
    "type",
    "model",
    "query_model",
    "revision",
    "query_revision",
    "dtype",
    "passages_per_part",
    *_RUNTIME_DEFAULTS,
    *_DEFAULTS,
}


def resolve(settings: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(settings) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"splade retriever: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(_KNOWN))}"
        )
    if not settings.get("model"):
        raise ConfigError("splade retriever: set `model` (e.g. naver/splade_v2_max)")
    out = {**_DEFAULTS, **{k: v for k, v in settings.items() if k in _DEFAULTS and v is not None}}
    out["model"] = settings["model"]
    out["query_model"] = settings.get("query_model") or settings["model"]
    out.update(revision_settings(settings, ("model", "query_model"), "splade"))
    for key in ("doc_max_length", "query_max_length", "quantization"):
        if out[key] is not None and (not isinstance(out[key], int) or out[key] < 1):
            raise ConfigError(f"splade setting {key} must be a positive integer, got {out[key]!r}")
    if "{text}" not in out["doc_format"]:
        raise ConfigError(f"splade doc_format {out['doc_format']!r} must contain {{text}}")
    runtime = {**_RUNTIME_DEFAULTS, **{k: settings[k] for k in _RUNTIME_DEFAULTS if settings.get(k) is not None}}
    check_device("splade", runtime["device"])
    if runtime["batch_size"] is None:
        runtime["batch_size"] = default_batch_size(runtime["device"], BATCH_SIZE["cpu"], BATCH_SIZE["gpu"])
    check_positive_int("splade", runtime, "threads", "batch_size", "query_batch_size", "encode_jobs")
    out["dtype"] = check_dtype("splade", settings.get("dtype"), runtime["device"])  # changes the weights: index setting
    return {**out, **runtime}


class SpladeEncoder:
    """A masked-LM checkpoint turned into {term: integer weight} maps."""

    def __init__(self, spec: str, threads: int | None = None, device: str = "cpu", dtype: str = "float32") -> None:
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        set_threads(threads)
        self.device = require_device(device, f"splade model {spec!r}")
        self.dtype = check_dtype(f"splade model {spec!r}", dtype, device)
        path = resolve_model(spec)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForMaskedLM.from_pretrained(path)
            self.model = model.eval().to(self.device, dtype=torch_dtype(self.dtype))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load SPLADE model {spec!r} offline ({type(exc).__name__}: {exc})") from None
        log.info("splade: %s on %s, %s (threads %s)", spec, self.device, self.dtype, threads)
        self.limit = int(getattr(self.model.config, "max_position_embeddings", 512))
        self.vocab = self.tokenizer.convert_ids_to_tokens(list(range(self.model.config.vocab_size)))

    def prepare(self, texts: list[str], max_length: int | None, batch_size: int) -> Prepared:
        """Tokenized, padded, length-sorted batches (host side; may run in a background thread)."""
        import torch

        pin = self.device != "cpu"
        length = min(max_length or self.limit, self.limit)
        return tokenize_batches(self.tokenizer, texts, length, batch_size,
                                lambda a: torch.from_numpy(a).pin_memory() if pin else torch.from_numpy(a))  # fmt: skip

    def run(self, prepared: Prepared) -> np.ndarray:
        """Float32 [n, vocab]: max over unmasked tokens of log(1 + relu(MLM logits)), computed as
        log(1 + relu(max over unmasked tokens of the logits)) (module docstring)."""
        import torch

        out = torch.zeros((prepared.count, len(self.vocab)), dtype=torch.float32, device=self.device)
        with torch.inference_mode():
            for idx, inputs in prepared.batches:
                batch = {k: v.to(self.device, non_blocking=True) for k, v in inputs.items()}
                # In place: the [batch, tokens, vocab] logits are the big tensor (8 x 512 x 30522
                # floats = 500 MB); no second copy of it is made.
                logits = self.model(**batch).logits
                logits.masked_fill_(batch["attention_mask"].unsqueeze(-1) == 0, float("-inf"))
                out[torch.from_numpy(idx).to(out.device)] = logits.max(dim=1).values.float().relu_().log1p_()
        return out.cpu().numpy()

    def weights(self, texts: list[str], max_length: int | None, batch_size: int) -> np.ndarray:
        return self.run(self.prepare(texts, max_length, batch_size))

    def term_maps(
        self, texts: list[str], max_length: int | None, batch_size: int, quantization: int
    ) -> list[dict[str, int]]:
        return self.maps(self.weights(texts, max_length, batch_size), quantization)

    def maps(self, dense: np.ndarray, quantization: int) -> list[dict[str, int]]:
        """{term: integer weight} of each row, the weights scaled by `quantization` and rounded."""
        maps = []
        for row in dense:
            q = np.rint(row * quantization).astype(np.int64)
            nz = np.nonzero(q > 0)[0]
            maps.append({self.vocab[i]: int(q[i]) for i in nz})
        return maps


def build_index(docs: Iterable[Doc], index_dir: Path, settings: dict[str, Any]) -> None:
    s = resolve(settings)
    start_jvm()
    with tempfile.TemporaryDirectory(prefix="cqabench-splade-") as tmp:
        with open(Path(tmp) / "vectors.jsonl", "w", encoding="utf-8") as fh:
            count = _write_vectors(docs, fh, None, s)
        _lucene_index(Path(tmp), Path(index_dir), s, count)


def _write_vectors(docs: Iterable[Doc], fh: Any, ids: Any, s: dict[str, Any]) -> int:
    """Encode `docs` in flushes of FLUSH_DOCS as JsonVectorCollection lines (and their ids to
    `ids`, one a line, when given); the one encoding loop of a whole index and of a part."""
    encoder = SpladeEncoder(s["model"], s["threads"], s["device"], s["dtype"])
    batch_size = int(s["batch_size"])
    log.info("splade: encoding documents in batches of %d", batch_size)
    count = 0
    progress = Progress("splade encode", None, unit="docs", logger=log)  # docs stream in: no total

    def prepare(chunk: list[Doc]) -> Prepared:
        texts = [s["doc_format"].format(title=t, text=x).strip() if t.strip() else x for _, t, x in chunk]
        return encoder.prepare(texts, s["doc_max_length"], batch_size)

    for chunk, prepared in ahead(chunks(docs, FLUSH_DOCS), prepare):
        for (docid, _, _), vec in zip(chunk, encoder.maps(encoder.run(prepared), s["quantization"])):
            fh.write(json.dumps({"id": docid, "contents": "", "vector": vec}, ensure_ascii=False) + "\n")
            if ids is not None:
                ids.write(docid + "\n")
        count += len(chunk)
        progress.update(len(chunk))
    return count


def _lucene_index(input_dir: Path, index_dir: Path, s: dict[str, Any], count: int) -> None:
    """Anserini's impact index over the JsonVectorCollection files of `input_dir` (read in name
    order by one thread unless `threads` says otherwise), checked to hold `count` documents."""
    if not count:
        raise ConfigError("splade index: the corpus is empty")
    start_jvm()
    autoclass("io.anserini.index.IndexCollection").main([
        "-collection", "JsonVectorCollection",
        "-generator", "DefaultLuceneDocumentGenerator",
        "-input", str(input_dir),
        "-index", str(index_dir / LUCENE_DIR),
        "-threads", str(int(s["threads"] or 1)),
        "-impact", "-pretokenized",
    ])  # fmt: skip
    searcher = autoclass("io.anserini.search.SimpleImpactSearcher")(str(index_dir / LUCENE_DIR))
    try:
        total = int(searcher.get_total_num_docs())
    finally:
        searcher.close()
    if total != count:
        raise ConfigError(f"splade: Lucene indexed {total} of {count} documents (duplicate ids or all-zero vectors?)")
    log.info("splade: indexed %d documents into %s", count, index_dir)


# ---- encoding in part jobs (cqabench.retrieval.parts) ----


def part_chunk(settings: dict[str, Any], rows: int) -> int:
    return FLUSH_DOCS


def encode_part(docs: Iterable[Doc], out: Path, settings: dict[str, Any], first_chunk: int) -> dict[str, Any]:
    """One part's term weights as vectors.jsonl (the lines a single job writes) and docids.txt."""
    s = resolve(settings)
    out = Path(out)
    with (
        open(out / "vectors.jsonl", "w", encoding="utf-8") as fh,
        open(out / "docids.txt", "w", encoding="utf-8") as ids,
    ):
        count = _write_vectors(docs, fh, ids, s)
    return {"count": count}


def gather(parts: list[tuple[Path, dict[str, Any]]], index_dir: Path, settings: dict[str, Any]) -> None:
    """One impact index over the parts' vectors, fed in part order (file names 00000.jsonl, ...)."""
    from cqabench.retrieval.parts import link_or_copy

    s = resolve(settings)
    # Inside the index folder being built (the same filesystem as the parts, usually: hard links,
    # not copies; a killed job leaves it inside that temporary folder, which the next run sweeps).
    staging = Path(index_dir) / ".input"
    staging.mkdir()
    try:
        for i, (folder, rec) in enumerate(parts):
            if rec["count"]:
                link_or_copy(folder / "vectors.jsonl", staging / f"{i:05d}.jsonl")
        _lucene_index(staging, Path(index_dir), s, sum(int(rec["count"]) for _, rec in parts))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def search(index_dir: Path, queries: list[QueryText], k: int, settings: dict[str, Any]) -> Results:
    s = resolve(settings)
    path = Path(index_dir) / LUCENE_DIR
    if not path.is_dir():
        raise ConfigError(f"index {index_dir} holds no Lucene impact index ({LUCENE_DIR}/); rebuild it")
    results: Results = {qid: [] for qid, _ in queries}
    if not queries:
        return results
    encoder = SpladeEncoder(s["query_model"], s["threads"], s["device"], s["dtype"])
    log.info("splade: encoding %d queries in batches of %d", len(queries), s["query_batch_size"])
    maps = encoder.term_maps(
        [t for _, t in queries], s["query_max_length"], int(s["query_batch_size"]), s["quantization"]
    )
    start_jvm()
    hash_map, array_list, jint = (
        autoclass("java.util.HashMap"),
        autoclass("java.util.ArrayList"),
        autoclass("java.lang.Integer"),
    )
    searcher = autoclass("io.anserini.search.SimpleImpactSearcher")(str(path))
    try:
        jq, jids = array_list(), array_list()
        for (qid, _), weights in zip(queries, maps):
            if not weights:
                continue  # no positive weight: matches nothing
            if len(weights) > MAX_QUERY_TERMS:
                log.warning(
                    "splade: query %s has %d terms; keeping the %d heaviest", qid, len(weights), MAX_QUERY_TERMS
                )
                weights = dict(sorted(weights.items(), key=lambda p: (-p[1], p[0]))[:MAX_QUERY_TERMS])
            m = hash_map()
            for term, w in weights.items():
                m.put(term, jint(w))
            jq.add(m)
            jids.add(qid)
        if jq.size():
            hits = searcher.batch_search(jq, jids, int(k), int(s["threads"] or 1))
            for entry in hits.entrySet().toArray():
                results[entry.getKey()] = rank(((h.docid, h.score) for h in entry.getValue()), k)
    finally:
        searcher.close()
    return results
