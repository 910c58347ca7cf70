"""Issue 37 items 2-3: the encoder loop (prefetch, padding, pooling on the device) and `dtype`.

References are computed here by the old path, step by step: one text at a time through the
transformers model (no padding at all), pooled and normalised in numpy, on real OTT-QA dev
documents (the sample's tables as the benchmark serializes them, and passages).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402
from conftest import RAW  # noqa: E402
from cqabench import retrieval as retrievers  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.retrieval import dense, encode_loop, encoders, rerank, splade  # noqa: E402

MINILM = {"type": "dense", "family": "sentence-transformers", "model": mf.MINILM, "similarity": "cosine",
          "max_length": 256, "shard_size": 4, "index": "flat"}  # fmt: skip


def _ottqa_docs(n_tables: int = 3, n_passages: int = 5) -> list[tuple[str, str, str]]:
    """Real OTT-QA dev documents: tables serialized as benchmarks/dense_ottqa.py does, passages."""
    from cqabench.data.tables import to_pipe

    tables = json.loads((RAW / "ottqa" / "dev_tables.sample.json").read_text(encoding="utf-8"))
    passages = json.loads((RAW / "ottqa" / "dev_passages.sample.json").read_text(encoding="utf-8"))
    docs = []
    for tid, t in list(tables.items())[:n_tables]:
        docs.append((tid, t["title"], to_pipe([c[0] for c in t["header"]], [[c[0] for c in r] for r in t["data"]])))
    for key, text in list(passages.items())[:n_passages]:
        docs.append((key, key.removeprefix("/wiki/").replace("_", " "), text))
    return docs


def _reference(model_dir: Path, texts: list[str], max_length: int, pooling: str) -> np.ndarray:
    """The old path, one text at a time (nothing padded): float32 hidden state, numpy pool, L2."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).eval()
    rows = []
    with torch.inference_mode():
        for text in texts:
            enc = tok([text], truncation=True, max_length=max_length, return_tensors="pt")
            hidden = model(**enc)[0].float().numpy()
            rows.append(encoders.pool(hidden, enc["attention_mask"].numpy(), pooling)[0])
    return encoders.l2_normalize(np.stack(rows))


def test_float32_vectors_equal_the_old_path_on_real_ottqa_documents(tmp_path: Path) -> None:
    """Both routes of the torch loop (a sentence-transformers model, and an HF-pooled family) give
    the one-text-at-a-time vectors to 1e-6, batched longest first with padding, shards prefetched."""
    docs = _ottqa_docs()
    want = _reference(mf.minilm_dir(), [f"{t}[SEP]{x}" for _, t, x in docs], 256, "mean")
    dense.build_index(docs, tmp_path / "st", {**MINILM, "batch_size": 3})
    got = np.concatenate([np.load(p) for p in sorted((tmp_path / "st" / "shards").glob("*.npy"))])
    assert got.dtype == np.float32 and got.shape == (8, 384)
    assert np.abs(got - want).max() <= 1e-6
    # The same model as an HF-pooled family (mean pooling, cosine, its own join).
    settings = {"family": "mpnet", "model": mf.MINILM, "max_length": 256, "batch_size": 3, "shard_size": 4}
    dense.build_index(docs, tmp_path / "hf", settings)
    got = np.concatenate([np.load(p) for p in sorted((tmp_path / "hf" / "shards").glob("*.npy"))])
    want = _reference(mf.minilm_dir(), [f"{t} {x}" for _, t, x in docs], 256, "mean")
    assert np.abs(got - want).max() <= 1e-6
    # And what SentenceTransformer.encode gives (the loop the sentence-transformers family ran before).
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(mf.minilm_dir()), device="cpu")
    st.max_seq_length = 256
    ref = st.encode([f"{t}[SEP]{x}" for _, t, x in docs], batch_size=3, normalize_embeddings=True)
    loop = encoders.STEncoder(mf.MINILM)
    assert loop._loop is not None  # Transformer + Pooling + Normalize: the project's loop
    assert np.abs(loop.encode([f" {t}[SEP]{x} " for _, t, x in docs], 256, 3) - ref).max() <= 1e-6  # stripped


def test_device_pooling_equals_numpy_pooling() -> None:
    import torch

    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 7, 5)).astype(np.float32)
    mask = np.array([[1] * 7, [1] * 3 + [0] * 4, [1] + [0] * 6, [1] * 5 + [0] * 2], dtype=np.int64)
    for pooling in encoders.POOLINGS:
        got = encode_loop.pool_torch(torch.from_numpy(hidden), torch.from_numpy(mask), pooling).numpy()
        assert np.allclose(got, encoders.pool(hidden, mask, pooling), atol=1e-6, rtol=0)
    # The mean of row 2 is its one real token, by hand.
    assert np.allclose(
        encode_loop.pool_torch(torch.from_numpy(hidden), torch.from_numpy(mask), "mean")[2], hidden[2, 0]
    )
    # Half-precision hidden states are pooled in float32.
    half = encode_loop.pool_torch(torch.from_numpy(hidden).to(torch.bfloat16), torch.from_numpy(mask), "mean")
    assert half.dtype == torch.float32
    x = rng.normal(size=(3, 5)).astype(np.float32)
    x[1] = 0.0  # a zero row stays zero (norm clamped at 1e-12), as in numpy
    assert np.allclose(encode_loop.normalize_torch(torch.from_numpy(x)).numpy(), encoders.l2_normalize(x), atol=1e-7)


def test_padding_is_one_gather_equal_to_the_per_row_loop() -> None:
    rows = [[101, 7, 8, 102], [101, 102], [101, 5, 6, 9, 11, 102], []]
    field = encode_loop.Ragged.of(rows)
    assert field.starts.tolist() == [0, 4, 6, 12] and field.lengths.tolist() == [4, 2, 6, 0]
    idx = np.array([2, 0, 3])
    got = encode_loop.pad_batch(field, idx, value=-1)
    assert got.tolist() == [[101, 5, 6, 9, 11, 102], [101, 7, 8, 102, -1, -1], [-1] * 6]
    assert got.dtype == np.int64
    # Batches are sorted longest first (ties in input order).
    assert [b.tolist() for b in encode_loop.length_sorted_batches(field.lengths, 2)] == [[2, 0], [1, 3]]


def test_ahead_prepares_the_next_item_in_another_thread_in_order() -> None:
    seen: list[tuple[int, str]] = []
    second = threading.Event()

    def prepare(x: int) -> int:
        seen.append((x, threading.current_thread().name))
        if x == 1:
            second.set()
        return x * 10

    got = []
    for item, ready in encode_loop.ahead(iter(range(4)), prepare):
        got.append((item, ready))
        if item == 0:  # while the caller holds item 0, item 1 is prepared
            assert second.wait(10)
    assert got == [(0, 0), (1, 10), (2, 20), (3, 30)]
    assert all(name.startswith("tokenize") for _, name in seen)
    assert list(encode_loop.ahead(iter([]), prepare)) == []

    def bad(x: int) -> int:
        raise ConfigError(f"item {x} is bad")

    with pytest.raises(ConfigError, match="item 0 is bad"):
        list(encode_loop.ahead(iter([0, 1]), bad))


def test_bfloat16_on_cpu_runs_and_stays_close_to_float32() -> None:
    texts = [f"{t}[SEP]{x}" for _, t, x in _ottqa_docs()]
    f32 = encoders.STEncoder(mf.MINILM, dtype="float32").encode(texts, 256, 4)
    bf16 = encoders.STEncoder(mf.MINILM, dtype="bfloat16").encode(texts, 256, 4)
    assert bf16.dtype == np.float32 and bf16.shape == f32.shape
    diff = np.abs(bf16 - f32).max()
    # bfloat16 keeps 8 bits of mantissa: components of unit vectors move by ~1e-3, never by much.
    assert 1e-5 < diff < 0.02, diff
    assert (np.sum(bf16 * f32, axis=1) > 0.999).all()


def test_splade_float32_weights_equal_the_old_formula(tmp_path: Path) -> None:
    """max over tokens of log1p(relu(logits)) * mask (the old loop) == log1p(relu(masked max))."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model_dir = mf.tiny_mlm(tmp_path / "mlm")
    texts = [x for _, _, x in _ottqa_docs(1, 3)]
    enc = splade.SpladeEncoder(str(model_dir))
    got = enc.weights(texts, 64, batch_size=2)
    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForMaskedLM.from_pretrained(model_dir).eval()
    with torch.inference_mode():
        batch = tok(texts, truncation=True, max_length=64, padding=True, return_tensors="pt")
        act = model(**batch).logits.relu().log1p() * batch["attention_mask"].unsqueeze(-1)
        want = act.max(dim=1).values.numpy()
    assert np.abs(got - want).max() <= 1e-6 and (got > 0).any()
    half = splade.SpladeEncoder(str(model_dir), dtype="bfloat16").weights(texts, 64, batch_size=2)
    assert half.dtype == np.float32 and np.abs(half - want).max() < 0.05


def test_dtype_defaults_by_device_and_is_recorded(tmp_path: Path) -> None:
    assert encoders.default_dtype("cpu") == "float32"
    assert encoders.default_dtype("cuda") == encoders.default_dtype("cuda:1") == "float16"
    assert encoders.check_dtype("dense", None, "cuda:0") == "float16"  # checked without a GPU
    assert dense.resolve({"model": "m"})["dtype"] == "float32"
    assert dense.resolve({"model": "m", "device": "cuda"})["dtype"] == "float16"
    assert dense.resolve({"model": "m"})["batch_size"] == dense.BATCH_SIZE["cpu"]
    assert dense.resolve({"model": "m", "device": "cuda"})["batch_size"] == dense.BATCH_SIZE["gpu"]
    assert splade.resolve({"model": "m", "device": "cuda", "dtype": "bfloat16"})["dtype"] == "bfloat16"
    assert splade.resolve({"model": "m"})["batch_size"] == 8
    spec = {"type": "rerank", "of": "bm25", "model": "m"}
    assert (rerank.resolve(spec)["dtype"], rerank.resolve(spec)["batch_size"]) == ("float32", 32)
    assert (
        rerank.resolve({**spec, "device": "cuda"})["dtype"],
        rerank.resolve({**spec, "device": "cuda"})["batch_size"],
    ) == ("float16", 128)
    # dtype changes the vectors: part of the index signature (batch size and device are not).
    sig = retrievers.signature({"type": "dense", "model": "m"})
    assert sig["dtype"] == "float32" and "batch_size" not in sig
    assert retrievers.signature({"type": "dense", "model": "m", "dtype": "bfloat16"}) != sig
    # What a retrieval cell records beyond the config (metrics.json retriever_settings).
    assert retrievers.recorded({"type": "dense", "model": "m", "device": "cuda"}) == {"dtype": "float16"}
    assert retrievers.recorded({"type": "splade", "model": "m"}) == {"dtype": "float32"}
    assert retrievers.recorded({"type": "bm25"}) == {}
    # An index's settings.json (which the fact table overlays on each row) holds it too.
    retrievers.build_index(iter(_ottqa_docs(0, 2)), tmp_path / "idx", MINILM)
    assert json.loads((tmp_path / "idx" / "settings.json").read_text())["dtype"] == "float32"
    from cqabench.report.fact_provenance import retriever_columns

    assert retriever_columns({**MINILM, **retrievers.recorded(MINILM)})["retriever_dtype"] == "float32"


def test_planner_records_dtype_in_retrieval_cells() -> None:
    from cqabench.planner.retrieval import RetrievalPlan

    plan = RetrievalPlan.__new__(RetrievalPlan)
    plan.retriever_configs = {"gpu": {"type": "dense", "model": "m", "device": "cuda"}, "bm25": {"type": "bm25"}}
    plan.external_runs, plan.pipelines, plan.retrieval_k = {}, {}, 100
    plan.decomposition_runs, plan.decomposition_k = {"gpu-q": ("gpu", "question")}, 10
    assert plan.run_settings("gpu") == {"type": "dense", "model": "m", "device": "cuda", "dtype": "float16", "k": 100}
    assert plan.run_settings("gpu-q")["dtype"] == "float16"
    assert "dtype" not in plan.run_settings("bm25")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"type": "bm25", "dtype": "float16"}, "dtype applies to the dense and splade"),
        ({"type": "colbert", "model": "m", "dtype": "bfloat16"}, "dtype applies to the dense and splade"),
        (
            {"type": "dense", "model": "m", "backend": "onnx", "dtype": "bfloat16"},
            "needs backend torch and quantize none",
        ),
        (
            {"type": "dense", "model": "m", "quantize": "int8", "dtype": "float16"},
            "needs backend torch and quantize none",
        ),
        ({"type": "dense", "model": "m", "dtype": "fp16"}, "dtype must be one of float32, float16, bfloat16"),
        ({"type": "splade", "model": "m", "dtype": "half"}, "splade setting dtype must be one of"),
    ],
)
def test_dtype_refused_where_it_cannot_apply(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        retrievers.resolve(settings)


def test_rerank_dtype_refused_and_onnx_float32_allowed() -> None:
    with pytest.raises(ConfigError, match="rerank setting dtype must be one of"):
        rerank.resolve({"type": "rerank", "of": "bm25", "model": "m", "dtype": "float64"})
    # The ONNX backend computes in float32: asked (or defaulted) float32 is fine.
    assert (
        dense.resolve({"model": "m", "backend": "onnx", "quantize": "int8", "dtype": "float32"})["dtype"] == "float32"
    )


def test_rerank_runs_in_its_dtype_and_records_it(tmp_path: Path) -> None:
    model = mf.minilm_cross_encoder(tmp_path / "ce")
    pairs = [("what is a cat", "a cat is an animal"), ("what is a cat", "the sun is a star")]
    scores = {}
    for dtype in ("float32", "bfloat16"):
        settings = rerank.resolve({"type": "rerank", "of": "bm25", "model": str(model), "dtype": dtype, "depth": 2})
        scorer = rerank.CrossEncoderScorer(settings)
        assert str(scorer.model.model.dtype) == f"torch.{dtype}"
        scores[dtype] = scorer.score(pairs)
        _, record = rerank.rerank({"q": [("a", 1.0), ("b", 0.5)]}, {"q": "what is a cat"},
                                  {"a": ("", "a cat is an animal"), "b": ("", "the sun is a star")}, settings, scorer)  # fmt: skip
        assert record["dtype"] == dtype
    assert np.allclose(scores["bfloat16"], scores["float32"], atol=0.01) and scores["bfloat16"] != scores["float32"]
