"""The ColBERT codec's k-means: torch's equals faiss's on real embeddings; a CUDA codec never
runs its k-means on the CPU (issue 37 item 1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.retrieval import colbert, kmeans  # noqa: E402

PASSAGES = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "ambigqa" / "fixture_passages_40.json"


@pytest.fixture(scope="module")
def sample():
    """ColBERT-like embeddings of real text: MiniLM's token embeddings of the 40 AmbigQA fixture
    passages, L2-normalised and stored as float16, as colbert-ai's codec sample is (5,450 x 384)."""
    import torch
    from sentence_transformers import SentenceTransformer

    texts = list(json.loads(PASSAGES.read_text(encoding="utf-8"))["passages"].values())
    model = SentenceTransformer(str(mf.minilm_dir()), device="cpu")
    tokens = model.encode(texts, output_value="token_embeddings")
    return torch.nn.functional.normalize(torch.cat(list(tokens)), dim=-1).half()


# (k, niter): 64 and 256 centroids use every point; 16 centroids take faiss's subsample
# (5,450 points > 256 x 16), so the subsampling permutation is checked too.
@pytest.mark.parametrize(("k", "niter"), [(64, 4), (256, 4), (16, 20)])
def test_torch_kmeans_on_cpu_equals_faiss_kmeans(sample, k: int, niter: int) -> None:
    """The same start (exactly), centroids to 1e-6, the same nearest centroid for every point.
    Measured: max |centroid difference| 6e-8, assignments 100 % equal."""
    import faiss

    x = sample.float().numpy()
    start = faiss.Kmeans(x.shape[1], k, niter=0, seed=123)
    start.train(x)
    assert np.array_equal(kmeans.kmeans(sample, k, 0, seed=123).numpy(), start.centroids)
    ref = faiss.Kmeans(x.shape[1], k, niter=niter, seed=123)  # as colbert-ai asks, minus gpu=True
    ref.train(x)
    ours = kmeans.kmeans(sample, k, niter, seed=123)
    np.testing.assert_allclose(ours.numpy(), ref.centroids, rtol=0, atol=1e-6)
    import torch

    assert torch.equal(kmeans.assign(sample, ours), kmeans.assign(sample, torch.from_numpy(ref.centroids)))


def test_colbert_kmeans_is_a_drop_in_for_compute_faiss_kmeans(sample) -> None:
    """colbert-ai's own function and ours, called as CollectionIndexer._train_kmeans calls them."""
    from colbert.indexing.collection_indexer import compute_faiss_kmeans

    theirs = compute_faiss_kmeans(384, 32, 4, [[sample]])
    ours = kmeans.colbert_kmeans(384, 32, 4, [[sample]], device="cpu")
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=0, atol=1e-6)


def test_an_empty_cluster_is_split_off_a_populated_one() -> None:
    """Six equal points, two centroids that start equal: every point goes to centroid 0 (ties to
    the lower), centroid 1 empties and takes over half of 0, both nudged by +-1/1024 (faiss)."""
    import torch

    x = torch.tensor([[1.0, 2.0]] * 6)
    c = kmeans.kmeans(x, 2, 1)
    e = 1.0 / 1024
    torch.testing.assert_close(c, torch.tensor([[1 - e, 2 * (1 + e)], [1 + e, 2 * (1 - e)]]), rtol=0, atol=1e-7)


def test_codec_kmeans_on_cpu_is_colbert_ais_own() -> None:
    assert colbert.codec_kmeans("cpu") is None


def test_a_cuda_codec_without_a_gpu_is_refused(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="colbert codec: device 'cuda' asked, but torch sees no CUDA GPU: "
                                          "the codec's k-means would run on the CPU"):  # fmt: skip
        colbert.codec_kmeans("cuda")


def test_a_cuda_codec_without_a_gpu_kmeans_is_refused_before_the_worker_starts(monkeypatch, tmp_path: Path) -> None:
    """torch sees a GPU, but there is no torch k-means to hand over (a colbert-ai without
    compute_faiss_kmeans) and faiss is faiss-cpu: its gpu=True would quietly mean 0 GPUs."""
    import subprocess

    import faiss
    import torch
    from colbert.indexing import collection_indexer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delattr(collection_indexer, "compute_faiss_kmeans")
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("the worker started"))
    settings = {"type": "colbert", "model": "colbert-ir/colbertv2.0", "device": "cuda"}
    with pytest.raises(
        ConfigError, match="no compute_faiss_kmeans .* sees no GPU: the codec's k-means would run on the CPU"
    ):
        colbert.train_codec(iter([("d0", "", "text")]), tmp_path / "codec", settings)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    assert colbert.codec_kmeans("cuda") is None  # faiss-gpu: colbert-ai's own k-means runs on the GPU


def test_a_cuda_codec_hands_colbert_ai_the_torch_kmeans_on_that_device(monkeypatch) -> None:
    import torch
    from colbert.indexing import collection_indexer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(collection_indexer, "compute_faiss_kmeans", collection_indexer.compute_faiss_kmeans)
    colbert.install_codec_kmeans("cuda:0")
    installed = collection_indexer.compute_faiss_kmeans
    assert installed.func is kmeans.colbert_kmeans and installed.keywords == {"device": "cuda:0"}
