"""Every setting a retriever family accepts reaches the code that reads it (issue 11, cause 3).

Per family (bm25, dense, splade, colbert, decomposition) the table `EFFECTS` lists each accepted
key with what it changes: `index` (what the index holds), `ranking` (scores at search time) or
`runtime` (how the job runs, by design not what it returns: threads, batch sizes, device,
timeouts), or `checkpoint` (which commit of a hub model is fetched into models/ and loaded, the
index recording it: tests/models/test_models_stage.py, tests/models/test_models_fetch.py). A test asserts the table covers exactly the keys the family accepts, and one test per
key asserts the effect: a different index or ranking, or for runtime keys an identical ranking
plus the value arriving where it is used. Everything goes through `cqabench.retrieval`
(build_index / search), where these settings used to be dropped. Models are the tiny local ones
of models_fixtures; there is no GPU here, so `device: cuda` is tested to fail with a clear
message (on a GPU machine the same test checks it runs there and ranks as on CPU).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402
from cqabench import retrieval as retrievers  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.retrieval import bm25, colbert, dense, splade  # noqa: E402
from cqabench.retrieval.decomposition import decomposed_search  # noqa: E402

TEXTS = mf.TOY_DOCS
QUERIES = [("q0", "a sweet fruit from the orchard"), ("q1", "the largest planet of the solar system"),
           ("q2", "string instrument with a bow")]  # fmt: skip
WORDS = ("apple volcano chess jupiter violin bread glacier harbor tiger copper lantern meadow river "
         "castle rocket pepper silver forest engine garden").split()  # fmt: skip
# 300 documents of three words each: enough for faiss to train 7 IVF lists and 256 PQ centroids.
MANY = [(f"m{i}", "", f"{WORDS[i % 20]} {WORDS[(i // 20) % 20]} {WORDS[(i * 7 + 3) % 20]}") for i in range(300)]
HAS_CUDA = __import__("torch").cuda.is_available()

EFFECTS: dict[str, dict[str, str]] = {
    "bm25": {
        "type": "family",
        "k1": "ranking",
        "b": "ranking",
        "fields": "ranking",
        "language": "index",
        "stemmer": "index",
        "threads": "runtime",
        "memory_buffer_mb": "runtime",
    },
    "dense": {
        "type": "family",
        "family": "index",
        "model": "index",
        "query_model": "ranking",
        "doc_model": "index",
        "pooling": "index",
        "similarity": "index",
        "doc_format": "index",
        "query_prefix": "ranking",
        "doc_prefix": "index",
        "max_length": "index",
        "query_max_length": "ranking",
        "shard_size": "index",
        "index": "index",
        "backend": "index",
        "quantize": "index",
        "nlist": "index",
        "pq_m": "index",
        "hnsw_m": "index",
        "train_size": "index",
        "nprobe": "ranking",
        "ef_search": "ranking",
        "dtype": "index",  # the precision the model runs in: tests/retrieval/test_encoder_precision.py
        "batch_size": "runtime",
        "query_batch_size": "runtime",
        "device": "runtime",
        "threads": "runtime",
        "encode_jobs": "runtime",  # the same index from N part jobs: tests/retrieval/test_encode_parts.py
        "passages_per_part": "runtime",  # the number of those parts, by the corpus size: tests/planner/test_retrieval_plan.py
        "revision": "checkpoint",
        "query_revision": "checkpoint",
        "doc_revision": "checkpoint",
    },
    "splade": {
        "type": "family",
        "model": "index",
        "query_model": "ranking",
        "doc_max_length": "index",
        "query_max_length": "ranking",
        "quantization": "index",
        "doc_format": "index",
        "dtype": "index",
        "threads": "runtime",
        "batch_size": "runtime",
        "query_batch_size": "runtime",
        "device": "runtime",
        "encode_jobs": "runtime",  # tests/retrieval/test_encode_parts.py
        "passages_per_part": "runtime",  # tests/planner/test_retrieval_plan.py
        "revision": "checkpoint",
        "query_revision": "checkpoint",
    },
    "colbert": {
        "type": "family",
        "model": "index",
        "nbits": "index",
        "doc_maxlen": "index",
        "query_maxlen": "ranking",
        "kmeans_niters": "index",
        "doc_format": "index",
        "ncells": "ranking",
        "centroid_score_threshold": "ranking",
        "ndocs": "ranking",
        "batch_size": "runtime",
        "device": "runtime",
        "threads": "runtime",
        "timeout_s": "runtime",
        "chunksize": "runtime",  # index chunk files, same ranking: tests/retrieval/test_colbert.py
        "encode_jobs": "runtime",  # codec + N part jobs, the same index: tests/retrieval/test_encode_parts.py
        "passages_per_part": "runtime",  # tests/planner/test_retrieval_plan.py
        "revision": "checkpoint",
    },
}
_ids = count()


def _accepted(family: str) -> set[str]:
    if family == "bm25":
        return {"type", *bm25.DEFAULTS}
    return set({"dense": dense, "splade": splade, "colbert": colbert}[family]._KNOWN)


@pytest.mark.parametrize("family", sorted(EFFECTS))
def test_every_accepted_key_has_a_stated_effect(family: str) -> None:
    assert set(EFFECTS[family]) == _accepted(family)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"type": "bm25", "device": "cuda"}, "unknown setting(s) device"),
        ({"type": "bm25", "threads": "abc"}, "threads must be a positive integer"),
        ({"type": "bm25", "memory_buffer_mb": 4096}, "memory_buffer_mb must be a whole number of MB in 16..2047"),
        ({"type": "dense", "model": "x", "batch_size": "abc"}, "batch_size must be a positive integer, got 'abc'"),
        ({"type": "dense", "model": "x", "query_batch_size": 0}, "query_batch_size must be a positive integer"),
        ({"type": "dense", "model": "x", "threads": True}, "threads must be a positive integer"),
        ({"type": "dense", "model": "x", "device": "gpu"}, "device must be cpu, cuda or cuda:N, got 'gpu'"),
        ({"type": "dense", "model": "x", "nprobe": 8}, "nprobe applies to index ivf or ivfpq"),
        ({"type": "dense", "model": "x", "index": "ivf", "ef_search": 8}, "ef_search applies to index hnsw only"),
        ({"type": "dense", "model": "x", "pq_m": 8}, "pq_m applies to index ivfpq only"),
        ({"type": "dense", "model": "x", "index": "hnsw", "nlist": 8}, "nlist applies to index ivf or ivfpq only"),
        (
            {"type": "dense", "model": "x", "pooling": "cls"},
            "pooling applies to families other than sentence-transformers",
        ),
        ({"type": "dense", "model": "x", "backend": "onnx", "device": "cuda"}, "needs backend torch and quantize none"),
        ({"type": "dense", "model": "x", "nprob": 3}, "unknown setting(s) nprob"),
        ({"type": "splade", "model": "x", "batch_size": "abc"}, "batch_size must be a positive integer"),
        ({"type": "splade", "model": "x", "device": "tpu"}, "device must be cpu, cuda or cuda:N"),
        ({"type": "colbert", "model": "x", "ndocs": -1}, "ndocs must be a positive integer"),
        ({"type": "colbert", "model": "x", "timeout_s": "1h"}, "timeout_s must be a positive number"),
        ({"type": "colbert", "model": "x", "batch_size": "abc"}, "batch_size must be a positive integer"),
        ({"type": "colbert", "model": "x", "chunksize": 0}, "chunksize must be a positive integer, got 0"),
        ({"type": "colbert", "model": "x", "device": "cuda:1"}, "colbert device must be cpu or cuda"),
    ],
)
def test_bad_or_ineffective_values_are_refused_at_planning(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        retrievers.resolve(settings)
    assert message in str(err.value)


def test_planning_names_the_retriever_of_a_bad_batch_size() -> None:
    import yaml

    from cqabench.planner import Environment, Plan

    root = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config["retrievers"]["minilm"]["batch_size"] = "abc"
    with pytest.raises(
        ConfigError, match=r"retrievers\.minilm: dense retriever: batch_size must be a positive integer"
    ):
        Plan(config, Environment(root=root, vllm_python=__import__("sys").executable))


@pytest.mark.parametrize("family", ["dense", "splade", "colbert"])
def test_resolved_settings_keep_every_runtime_key(family: str) -> None:
    """The bug: resolve() returned the index recipe only, so search never saw these keys."""
    given = {"type": family, "model": "x", "device": "cpu", "threads": 3, "batch_size": 5}
    given.update({"dense": {"query_batch_size": 7}, "splade": {"query_batch_size": 7},
                  "colbert": {"ndocs": 64, "ncells": 2, "centroid_score_threshold": 0.4, "timeout_s": 9}}[family])  # fmt: skip
    resolved = retrievers.resolve(given)
    assert {k: resolved[k] for k in given if k != "model"} == {k: v for k, v in given.items() if k != "model"}
    assert retrievers.resolve(resolved) == resolved  # idempotent: family functions resolve again


# ---- helpers ----


def _build_search(
    tmp: Path, settings: dict[str, Any], docs: list[tuple[str, str, str]] = TEXTS,
    queries: list[tuple[str, str]] = QUERIES, k: int = 5, search: dict[str, Any] | None = None,
) -> tuple[Path, dict[str, dict[str, float]]]:  # fmt: skip
    index = tmp / f"idx{next(_ids)}"
    retrievers.build_index(iter(docs), index, settings)
    res = retrievers.search(index, queries, k, {**settings, **(search or {})})
    return index, {qid: dict(hits) for qid, hits in res.items()}


def _same(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]], tol: float = 1e-4) -> bool:
    return all(a[q].keys() == b[q].keys() and all(abs(a[q][d] - b[q][d]) <= tol for d in a[q]) for q in a)


@pytest.fixture
def torch_threads():
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# ---- bm25 ----


BM25_DOCS = [
    ("d1", "Cats", "The cat sat on the mat"),
    ("d2", "Dog", "Dogs are loyal animals"),
    ("d3", "Pets", "A cat and a dog"),
]


@pytest.mark.parametrize(
    ("key", "value", "query"),
    [
        ("k1", 2.0, "cat dog"),
        ("b", 1.0, "cat dog"),
        ("fields", {"title": 3.0, "text": 1.0}, "cat dog"),
        ("language", "fr", "the"),
        ("stemmer", "none", "dogs"),
    ],
)
@pytest.mark.jvm
def test_bm25_key_changes_the_ranking(key: str, value: Any, query: str, tmp_path: Path) -> None:
    base = {"type": "bm25"}
    _, a = _build_search(tmp_path, base, BM25_DOCS, [("q", query)])
    _, b = _build_search(tmp_path, {**base, key: value}, BM25_DOCS, [("q", query)])
    assert not _same(a, b), (key, a, b)


@pytest.mark.jvm
def test_bm25_threads_reach_anserini_and_do_not_change_the_ranking(tmp_path: Path) -> None:
    assert (
        bm25.index_arguments("in", "out", {"type": "bm25", "threads": 3})[
            bm25.index_arguments("in", "out", {"type": "bm25"}).index("-threads") + 1
        ]
        == "3"
    )
    _, a = _build_search(tmp_path, {"type": "bm25", "threads": 1}, BM25_DOCS, [("q", "cat dog")])
    _, b = _build_search(tmp_path, {"type": "bm25", "threads": 3}, BM25_DOCS, [("q", "cat dog")])
    assert _same(a, b)


@pytest.mark.jvm
def test_bm25_memory_buffer_reaches_lucene_and_does_not_change_the_ranking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="cqabench.retrieval.bm25"):
        _, a = _build_search(
            tmp_path, {"type": "bm25", "memory_buffer_mb": 16}, MANY, [("q", f"{WORDS[0]} {WORDS[1]}")]
        )
    assert "Lucene indexing RAM buffer 16 MB" in caplog.text  # read back from the IndexWriter's live config
    _, b = _build_search(tmp_path, {"type": "bm25"}, MANY, [("q", f"{WORDS[0]} {WORDS[1]}")])
    assert _same(a, b) and a["q"]


# ---- dense ----


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("settings_dense")
    q, c = mf.tiny_dpr(root / "dpr")
    return {"bert": mf.tiny_bert(root / "bert"), "q": q, "c": c}


def _dense_base(tiny: dict[str, Path]) -> dict[str, Any]:
    return {"type": "dense", "family": "contriever", "model": str(tiny["bert"])}


DENSE_RANKING_CHANGES: list[tuple[str, Callable[[dict[str, Path]], dict[str, Any]]]] = [
    ("family", lambda t: {"family": "ance"}),
    ("model", lambda t: {"model": str(t["c"])}),
    ("query_model", lambda t: {"query_model": str(t["q"])}),
    ("doc_model", lambda t: {"doc_model": str(t["c"])}),
    ("pooling", lambda t: {"pooling": "cls"}),
    ("similarity", lambda t: {"similarity": "cosine"}),
    ("doc_format", lambda t: {"doc_format": "{text}"}),
    ("query_prefix", lambda t: {"query_prefix": "query: "}),
    ("doc_prefix", lambda t: {"doc_prefix": "passage: "}),
    ("max_length", lambda t: {"max_length": 4}),
    ("query_max_length", lambda t: {"query_max_length": 3}),
    ("quantize", lambda t: {"quantize": "int8"}),
    ("dtype", lambda t: {"dtype": "bfloat16"}),
]


@pytest.mark.parametrize(("key", "change"), DENSE_RANKING_CHANGES, ids=[k for k, _ in DENSE_RANKING_CHANGES])
def test_dense_key_changes_the_scores(key: str, change: Callable, tiny: dict[str, Path], tmp_path: Path) -> None:
    base = _dense_base(tiny)
    _, a = _build_search(tmp_path, base)
    _, b = _build_search(tmp_path, {**base, **change(tiny)})
    assert not _same(a, b, tol=1e-6), key


def test_dense_layout_keys_change_the_index_not_the_exact_scores(tiny: dict[str, Path], tmp_path: Path) -> None:
    """shard_size, backend and index change what is stored; exact search ranks the same."""
    base = _dense_base(tiny)
    idx, a = _build_search(tmp_path, base)
    assert len(list((idx / "shards").iterdir())) == 1
    idx, b = _build_search(tmp_path, {**base, "shard_size": 2})
    assert len(list((idx / "shards").iterdir())) == 4 and _same(a, b)
    idx, c = _build_search(tmp_path, {**base, "backend": "onnx"})
    assert (idx / "onnx" / "model.onnx").is_file() and _same(a, c)
    idx, d = _build_search(tmp_path, {**base, "index": "hnsw"}, search={"ef_search": 64})
    assert (idx / "index.faiss").is_file() and _same(a, d)  # ef_search 64 >= 7 documents: exact


def _faiss(index_dir: Path) -> Any:
    import faiss

    return faiss.read_index(str(index_dir / "index.faiss"))


def test_dense_faiss_shape_keys_reach_faiss(tiny: dict[str, Path], tmp_path: Path) -> None:
    import faiss
    import numpy as np

    base = {**_dense_base(tiny), "doc_format": "{text}", "threads": 1}
    lists = {}
    for nlist in (2, 7):
        idx, _ = _build_search(tmp_path, {**base, "index": "ivf", "nlist": nlist}, MANY, k=3)
        lists[nlist] = faiss.extract_index_ivf(_faiss(idx)).nlist
    assert lists == {2: 2, 7: 7}  # 300 documents allow up to 300 // 39 = 7 lists
    centroids = []
    for train_size in (40, 300):
        idx, _ = _build_search(tmp_path, {**base, "index": "ivf", "nlist": 7, "train_size": train_size}, MANY, k=3)
        index = _faiss(idx)  # (kept referenced: the quantizer belongs to it)
        quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
        centroids.append(quantizer.reconstruct_n(0, quantizer.ntotal))
    assert not np.allclose(centroids[0], centroids[1])
    for pq_m in (2, 4):
        idx, _ = _build_search(tmp_path, {**base, "index": "ivfpq", "nlist": 2, "pq_m": pq_m}, MANY, k=3)
        assert faiss.downcast_index(_faiss(idx)).pq.M == pq_m
    for hnsw_m in (4, 8):
        idx, _ = _build_search(tmp_path, {**base, "index": "hnsw", "hnsw_m": hnsw_m}, MANY, k=3)
        assert faiss.downcast_index(_faiss(idx)).hnsw.nb_neighbors(0) == 2 * hnsw_m


def test_dense_nprobe_and_ef_search_change_what_is_found(tiny: dict[str, Path], tmp_path: Path) -> None:
    base = {**_dense_base(tiny), "doc_format": "{text}", "threads": 1}
    queries = [(f"q{i}", text) for i, (_, _, text) in enumerate(MANY[::10])]
    exact = _build_search(tmp_path, base, MANY, queries, k=300)[1]
    ivf = {**base, "index": "ivf", "nlist": 7}
    few = _build_search(tmp_path, ivf, MANY, queries, k=300, search={"nprobe": 1})[1]
    every = _build_search(tmp_path, ivf, MANY, queries, k=300, search={"nprobe": 7})[1]
    assert all(len(few[q]) < 300 for q in few)  # one of seven lists scanned
    assert all(len(every[q]) == 300 for q in every)  # every list: every document
    hnsw = {**base, "index": "hnsw", "hnsw_m": 2}
    top = {q: max(h, key=h.get) for q, h in exact.items()}

    def top1(ef: int) -> dict[str, str]:
        res = _build_search(tmp_path, hnsw, MANY, queries, k=1, search={"ef_search": ef})[1]
        return {q: next(iter(h)) for q, h in res.items()}

    wide, narrow = top1(300), top1(1)
    assert sum(wide[q] == top[q] for q in top) > sum(narrow[q] == top[q] for q in top)


def test_dense_batch_sizes_reach_the_encoder_and_keep_the_ranking(
    tiny: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = _dense_base(tiny)
    with caplog.at_level(logging.INFO, logger="cqabench.retrieval.dense"):
        _, a = _build_search(tmp_path, {**base, "batch_size": 1, "query_batch_size": 2})
    assert "encoding documents in batches of 1" in caplog.text and "encoding 3 queries in batches of 2" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cqabench.retrieval.dense"):
        _, b = _build_search(tmp_path, {**base, "batch_size": 7})
    assert "encoding 3 queries in batches of 7" in caplog.text  # query_batch_size falls back to batch_size
    assert _same(a, b, tol=1e-5)


def test_dense_threads_set_torch_threads(tiny: dict[str, Path], tmp_path: Path, torch_threads: None) -> None:
    import torch

    _build_search(tmp_path, {**_dense_base(tiny), "threads": 1})
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("family", ["contriever", "sentence-transformers"])
def test_dense_cuda_runs_on_the_gpu_or_fails_clearly(family: str, tiny: dict[str, Path], tmp_path: Path) -> None:
    model = str(tiny["bert"]) if family == "contriever" else mf.MINILM
    base = {"type": "dense", "family": family, "model": model}
    if not HAS_CUDA:
        with pytest.raises(ConfigError, match=r"device 'cuda' asked, but torch sees no CUDA GPU.*set device: cpu"):
            _build_search(tmp_path, {**base, "device": "cuda"})
        assert not list(tmp_path.glob("idx*"))  # nothing half-built
        return
    _, cpu = _build_search(tmp_path, base)
    _, gpu = _build_search(tmp_path, {**base, "device": "cuda"})
    assert _same(cpu, gpu, tol=1e-3)


# ---- splade ----


@pytest.fixture(scope="module")
def mlms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two random MLMs (biases lowered so a text keeps a few hundred terms, as in test_splade)."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        path = mf.tiny_mlm(tmp_path_factory.mktemp("settings_splade") / name)
        model = BertForMaskedLM.from_pretrained(path).eval()
        with torch.no_grad():
            torch.manual_seed(seed)
            if seed:
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
            logits = model(
                **AutoTokenizer.from_pretrained(path)([d[2] for d in TEXTS], padding=True, return_tensors="pt")
            ).logits
            model.cls.predictions.bias -= torch.quantile(logits.flatten()[::7], 0.9995)
        model.save_pretrained(path)
        out[name] = path
    return out


SPLADE_CHANGES: list[tuple[str, Callable[[dict[str, Path]], dict[str, Any]]]] = [
    ("model", lambda m: {"model": str(m["b"])}),
    ("query_model", lambda m: {"query_model": str(m["b"])}),
    ("doc_max_length", lambda m: {"doc_max_length": 4}),
    ("query_max_length", lambda m: {"query_max_length": 3}),
    ("quantization", lambda m: {"quantization": 10}),
    ("doc_format", lambda m: {"doc_format": "{text}"}),
    ("dtype", lambda m: {"dtype": "bfloat16"}),
]


@pytest.mark.parametrize(("key", "change"), SPLADE_CHANGES, ids=[k for k, _ in SPLADE_CHANGES])
@pytest.mark.jvm
def test_splade_key_changes_the_scores(key: str, change: Callable, mlms: dict[str, Path], tmp_path: Path) -> None:
    base = {"type": "splade", "model": str(mlms["a"])}
    _, a = _build_search(tmp_path, base, k=7)
    _, b = _build_search(tmp_path, {**base, **change(mlms)}, k=7)
    assert not _same(a, b, tol=0), key


@pytest.mark.jvm
def test_splade_runtime_keys_reach_the_encoder_and_keep_the_ranking(
    mlms: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture, torch_threads: None
) -> None:
    import torch

    base = {"type": "splade", "model": str(mlms["a"])}
    with caplog.at_level(logging.INFO, logger="cqabench.retrieval.splade"):
        _, a = _build_search(tmp_path, {**base, "batch_size": 1, "query_batch_size": 2, "threads": 1}, k=7)
    assert "encoding documents in batches of 1" in caplog.text and "encoding 3 queries in batches of 2" in caplog.text
    assert torch.get_num_threads() == 1
    _, b = _build_search(tmp_path, {**base, "batch_size": 7, "threads": 2}, k=7)
    assert _same(a, b, tol=0)
    if not HAS_CUDA:
        with pytest.raises(ConfigError, match="torch sees no CUDA GPU"):
            _build_search(tmp_path, {**base, "device": "cuda"})


# ---- colbert (what reaches colbert-ai; the PLAID index itself: tests/retrieval/test_colbert.py) ----


def test_colbert_settings_reach_the_worker_request_and_colbert_config() -> None:
    s = colbert.resolve({"type": "colbert", "model": "m", "nbits": 4, "doc_maxlen": 20, "query_maxlen": 9,
                         "kmeans_niters": 3, "batch_size": 5, "ndocs": 64, "ncells": 2,
                         "centroid_score_threshold": 0.4, "threads": 3, "timeout_s": 30,
                         "chunksize": 1000})  # fmt: skip
    index_req = colbert._request(s, "index", root="r")
    assert index_req["chunksize"] == 1000 and "chunksize" not in retrievers.signature({**s, "type": "colbert"})
    search_req = colbert._request(s, "search", root="r", k=3)
    assert not {"ndocs", "ncells", "centroid_score_threshold"} & set(index_req)
    assert (search_req["ndocs"], search_req["ncells"], search_req["centroid_score_threshold"]) == (64, 2, 0.4)
    extra = {k: search_req[k] for k in ("ncells", "centroid_score_threshold", "ndocs")}
    cfg = colbert._colbert_config(search_req, **extra)
    assert (cfg.nbits, cfg.doc_maxlen, cfg.query_maxlen, cfg.kmeans_niters) == (4, 20, 9, 3)
    assert (cfg.index_bsize, cfg.ndocs, cfg.ncells, cfg.centroid_score_threshold, cfg.gpus) == (5, 64, 2, 0.4, 0)
    env = colbert.worker_env(s)
    assert env["OMP_NUM_THREADS"] == "3" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert colbert.passage_text(s, "Title", "some\ttext\n") == "Title | some text"
    assert colbert.passage_text({**s, "doc_format": "{text}"}, "Title", "some text") == "some text"
    assert colbert.passage_text(s, " ", "only text") == "only text"


def test_colbert_cuda_fails_before_starting_the_worker(tmp_path: Path) -> None:
    if HAS_CUDA:
        pytest.skip("a GPU is visible: colbert's own tests cover device cuda there")
    with pytest.raises(ConfigError, match=r"colbert index: device 'cuda' asked, but torch sees no CUDA GPU"):
        retrievers.build_index(iter(TEXTS), tmp_path / "idx", {"type": "colbert", "model": "m", "device": "cuda"})
    assert not (tmp_path / "idx").exists()


# ---- decomposition (retrieval.decomposition: datasets, retrievers, queries, k) ----


def test_decomposition_k_cuts_the_merged_ranking() -> None:
    """A scripted search at the retriever boundary: step i returns documents s{i}-0..s{i}-9."""

    def search(queries: list[tuple[str, str]], depth: int) -> dict[str, list[tuple[str, float]]]:
        return {qid: [(f"{qid}-{j}", 10.0 - j) for j in range(depth)] for qid, _ in queries}

    rows = [{"qid": "q", "question": "Q?", "decomposition": ["first volcano", "second glacier"], "meta": "{}"}]
    for k in (2, 10):
        res, _ = decomposed_search(rows, "gold", search, k)
        assert len(res["q"]) == k


def test_decomposition_keys_change_the_planned_runs() -> None:
    import sys

    import yaml

    from cqabench.planner import Environment, Plan

    root = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    env = Environment(root=root, vllm_python=sys.executable)
    base = Plan(config, env)
    assert base.decomposition_runs_of("strategyqa") == ["bm25-irq", "bm25-ird-gold", "bm25-ird-pred"]
    dec = config["retrieval"]["decomposition"]
    variants = {
        "datasets": ({**dec, "datasets": ["musique"]}, lambda p: p.decomposition_runs_of("musique") and not p.decomposition_runs_of("strategyqa")),
        "retrievers": ({**dec, "retrievers": ["bm25", "minilm"]}, lambda p: "minilm-irq" in p.decomposition_runs_of("strategyqa")),
        "queries": ({**dec, "queries": ["gold"]}, lambda p: p.decomposition_runs_of("strategyqa") == ["bm25-ird-gold"]),
        "k": ({**dec, "k": 5}, lambda p: p.run_settings("bm25-irq")["k"] == 5),
    }  # fmt: skip
    for key, (spec, holds) in variants.items():
        config["retrieval"]["decomposition"] = spec
        assert holds(Plan(config, env)), key
    assert set(variants) == set(dec)  # every key of the section is covered
