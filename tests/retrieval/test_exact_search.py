"""Exact dense search (cqabench.retrieval.exact): the vectorised merge equals the old per-query
heap merge, the torch scan equals faiss's, ties go to the lower id, GPU jobs never scan on CPU."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402
from cqabench import retrieval as retrievers  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.retrieval import dense, exact  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import dense_search_ottqa as bench  # noqa: E402  (the old merge, kept there as the reference)

PASSAGES = REPO / "tests" / "fixtures" / "data" / "ambigqa" / "fixture_passages_40.json"


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    """MiniLM vectors of the 40 real AmbigQA fixture passages, every 4th one repeated right after
    itself and passage 0 also last: exact ties inside a shard, across shards and at the cut."""
    from sentence_transformers import SentenceTransformer

    texts = list(json.loads(PASSAGES.read_text(encoding="utf-8"))["passages"].values())
    model = SentenceTransformer(str(mf.minilm_dir()), device="cpu")
    emb = model.encode(texts, normalize_embeddings=True).astype(np.float32)
    rows = [j for i in range(len(emb)) for j in ([i, i] if i % 4 == 0 else [i])] + [0]
    return emb[rows]


def _shards(vectors: np.ndarray, rows: int, folder: Path) -> list[Path]:
    paths = []
    for n, lo in enumerate(range(0, len(vectors), rows)):
        paths.append(folder / f"{n:05d}.npy")
        np.save(paths[-1], vectors[lo : lo + rows])
    return paths


@pytest.mark.parametrize("rows", [7, 13, 51])
def test_vectorised_merge_equals_the_old_heap_merge_on_faiss_shard_results(vectors: np.ndarray, rows: int) -> None:
    """Same per-shard faiss results in, the same ids, scores and tie order out (exact equality)."""
    q = vectors[::3]
    per_shard = [(*bench.faiss_shard_topk(vectors[lo : lo + rows], q, 10), lo) for lo in range(0, len(vectors), rows)]
    old_scores, old_ids = bench.old_merge(per_shard, len(q), 10)
    new_scores, new_ids = bench.new_merge(per_shard, len(q), 10)
    assert np.array_equal(old_ids, new_ids)
    assert np.array_equal(old_scores, new_scores)
    # a duplicated passage scores exactly its twin's score: both ranked, the lower id first
    assert old_ids[0][:2].tolist() == [0, 1]


@pytest.mark.parametrize("rows", [7, 51])
def test_torch_scan_equals_faiss_scan_and_heap_merge(
    vectors: np.ndarray, rows: int, tmp_path: Path, monkeypatch
) -> None:
    """The whole old search (faiss per shard + heap merge) against the new one, with blocks of
    3 queries x 5 documents so every shard is cut into several blocks."""
    q = vectors[1::2]
    paths = _shards(vectors, rows, tmp_path)
    old_scores, old_ids = bench.old_search(paths, q, 12)
    monkeypatch.setattr(exact, "BLOCK_ELEMENTS", 15)
    new_scores, new_ids = exact.flat_search(paths, q, 12, "cpu", threads=1)
    np.testing.assert_allclose(new_scores, old_scores, rtol=0, atol=1e-6)
    full = q @ vectors.T
    for row in range(len(q)):
        kth = old_scores[row, -1]
        # the same documents, except among those tied (to 1e-6) with the 12th score, where faiss's
        # heap returned any of them and the new scan keeps the lowest ids
        differ = set(old_ids[row]) ^ set(new_ids[row])
        assert all(abs(full[row, i] - kth) <= 1e-6 for i in differ), (row, differ)
        tied = np.flatnonzero(np.abs(full[row] - kth) <= 1e-6)
        kept = [i for i in new_ids[row] if i in tied]
        assert kept == sorted(tied)[: len(kept)]


def test_ties_at_the_cut_go_to_the_lower_id_and_short_indexes_are_padded() -> None:
    """Hand-made: query (1, 0); documents scoring 0.5, 0.9, 0.5, 0.9, 0.5 (ids 0..4)."""
    import torch

    docs = torch.tensor([[0.5, 0], [0.9, 0], [0.5, 1], [0.9, 1], [0.5, 2]])
    scores = torch.tensor([[1.0, 0.0]]) @ docs.T
    cand_scores, cand_ids = exact.block_candidates(scores, 3, offset=10)
    assert sorted(cand_ids[0].tolist()) == [10, 11, 12, 13, 14]  # every 0.5 is kept: ties at the cut
    top = exact.merge_topk(exact.empty_topk(1), (cand_scores, cand_ids), 3)
    assert top[1].tolist() == [[11, 13, 10]]
    np.testing.assert_allclose(top[0], [[0.9, 0.9, 0.5]], rtol=1e-6)
    padded = exact.merge_topk(top, (np.full((1, 4), -np.inf, np.float32), np.full((1, 4), -1)), 5)
    assert padded[1].tolist() == [[11, 13, 10, -1, -1]]


def test_dense_search_on_cuda_without_a_gpu_stops_before_scanning(tmp_path: Path, monkeypatch) -> None:
    import torch

    settings = {"type": "dense", "family": "sentence-transformers", "model": mf.MINILM, "shard_size": 4}
    retrievers.build_index(iter(mf.TOY_DOCS), tmp_path / "idx", settings)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dense, "flat_search", lambda *a, **k: pytest.fail("scanned on the CPU"))
    with pytest.raises(ConfigError, match="dense search: device 'cuda' asked, but torch sees no CUDA GPU"):
        # dtype as built (on cuda it would default to float16, an index of other settings)
        retrievers.search(
            tmp_path / "idx", [("q", "volcano lava")], 3, {**settings, "device": "cuda", "dtype": "float32"}
        )


def test_search_device_is_the_cpu_for_faiss_indexes_only() -> None:
    base = {"type": "dense", "model": mf.MINILM, "device": "cuda"}
    assert dense.search_device(dense.resolve(base)) == "cuda"
    assert dense.search_device(dense.resolve({**base, "index": "hnsw"})) == "cpu"
    assert dense.search_device(dense.resolve({**base, "index": "ivf"})) == "cpu"
    assert dense.search_device(dense.resolve({**base, "device": "cpu"})) == "cpu"
