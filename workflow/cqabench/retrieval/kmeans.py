"""k-means in torch: the algorithm of `faiss.Kmeans` as colbert-ai calls it, on the job's device.

colbert-ai trains the ColBERTv2 codec's centroids with `faiss.Kmeans(dim, k, niter=kmeans_niters,
gpu=torch.cuda.is_available(), seed=123)` (`compute_faiss_kmeans`). This project installs
faiss-cpu, which turns `gpu=True` into `get_num_gpus()` = 0 GPUs: on a GPU job the k-means
(AmbigQA: ~96M embeddings into 2^19 centroids) would quietly run on the CPU. `colbert_kmeans`
has colbert-ai's signature and runs faiss's algorithm in torch on the device it is bound to:

- more than `max_points_per_centroid` x k points (faiss's 256): the first 256 k points of
  `faiss.rand_perm(n, seed)`, as faiss's `subsample_training_set`;
- start: the points `perm[:k]` of `faiss.rand_perm(n, seed + 1)` (faiss's init for nredo = 1);
- `niter` times: every point to its nearest centroid by L2 distance (ties to the lower
  centroid, as faiss's flat search), then each centroid the mean of its points; an empty
  centroid becomes a copy of a populated one, the two nudged apart by +-1/1024 per coordinate
  (faiss's `split_clusters`). Which populated one: faiss scans with its own generator, here it
  is drawn with probability proportional to (size - 1) from a torch generator seeded 1234; that
  is the one step that differs, and only when a cluster empties.

Not spherical: colbert-ai asks faiss for plain L2 k-means and normalises the centroids after.
The sample stays where it is (host memory: 96M x 128 fp16 is 25 GB) and is sent to the device
block by block, so the device holds the centroids and one block of distances.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

MAX_POINTS_PER_CENTROID = 256  # faiss ClusteringParameters default
SPLIT_EPS = 1.0 / 1024  # faiss's split_clusters perturbation
SPLIT_SEED = 1234  # faiss's split_clusters RandomGenerator seed
BLOCK_ELEMENTS = 2**27  # distances per block (x rows x centroids): 512 MB in float32


def faiss_perm(n: int, seed: int) -> np.ndarray:
    """faiss's `rand_perm(n, seed)`: the permutation its k-means subsamples and starts from."""
    import faiss

    perm = np.empty(n, dtype=np.int32)
    faiss.rand_perm(faiss.swig_ptr(perm), n, seed)  # type: ignore[attr-defined]  # SWIG-made; faiss's stubs miss it
    return perm.astype(np.int64)


def kmeans(x: Any, k: int, niter: int, *, seed: int = 123, device: str = "cpu",
           max_points_per_centroid: int = MAX_POINTS_PER_CENTROID) -> Any:  # fmt: skip
    """Centroids (k x d, float32, on the CPU) of `x` (n x d, torch or numpy, any float dtype)."""
    import torch

    x = torch.as_tensor(x)
    n, d = x.shape
    if n < k:
        raise ValueError(f"k-means: {n} points for {k} centroids (need at least one point per centroid)")
    if n > k * max_points_per_centroid:
        x = x[torch.from_numpy(faiss_perm(n, seed)[: k * max_points_per_centroid])]  # in faiss's order
        n = x.shape[0]
    start = torch.from_numpy(faiss_perm(n, seed + 1)[:k])
    centroids = x[start].to(device=device, dtype=torch.float32)
    gen = torch.Generator(device="cpu").manual_seed(SPLIT_SEED)
    for it in range(niter):
        sums = torch.zeros(k, d, dtype=torch.float32, device=device)
        counts = torch.zeros(k, dtype=torch.float64, device=device)
        objective = 0.0
        for block, nearest, dist in _assign_blocks(x, centroids, device):
            sums.index_add_(0, nearest, block)
            counts += torch.bincount(nearest, minlength=k).to(torch.float64)
            objective += float(dist.sum())
        populated = counts > 0
        centroids = torch.where(populated[:, None], sums / counts.clamp(min=1)[:, None].to(torch.float32), 0.0)
        nsplit = _split_empty(centroids, counts, n, gen)
        log.info("k-means iteration %d/%d: objective %.6g, %d empty clusters split", it + 1, niter, objective, nsplit)
    return centroids.cpu()


def assign(x: Any, centroids: Any, device: str = "cpu") -> Any:
    """The nearest centroid (L2, ties to the lower index) of every row of x: a CPU int64 tensor."""
    import torch

    return torch.cat(
        [nearest.cpu() for _, nearest, _ in _assign_blocks(torch.as_tensor(x), centroids.to(device), device)]
    )


def _assign_blocks(x: Any, centroids: Any, device: str) -> Any:
    """(block on the device as float32, nearest centroid, squared distance) per block of rows."""
    import torch

    k = centroids.shape[0]
    c_norm = (centroids * centroids).sum(1)
    rows = max(1, BLOCK_ELEMENTS // k)
    for lo in range(0, x.shape[0], rows):
        block = x[lo : lo + rows].to(device=device, dtype=torch.float32, non_blocking=True)
        # |x - c|^2 = |x|^2 + |c|^2 - 2 x.c; |x|^2 is the same for every centroid of a row
        dist = torch.addmm(c_norm[None, :], block, centroids.T, alpha=-2.0)
        best, nearest = dist.min(dim=1)
        yield block, nearest, (best + (block * block).sum(1)).clamp(min=0)


def _split_empty(centroids: Any, counts: Any, n: int, gen: Any) -> int:
    """faiss's split_clusters: every empty centroid takes over half of a populated one."""
    import torch

    empty = torch.nonzero(counts == 0).flatten().tolist()
    k = centroids.shape[0]
    sign = torch.ones(centroids.shape[1], device=centroids.device)
    sign[1::2] = -1.0  # even coordinates of the new centroid up, odd down; the old one opposite
    for ci in empty:
        weight = ((counts - 1.0) / max(1, n - k)).clamp(min=0).cpu()
        cj = int(torch.multinomial(weight, 1, generator=gen))
        centroids[ci] = centroids[cj] * (1 + sign * SPLIT_EPS)
        centroids[cj] = centroids[cj] * (1 - sign * SPLIT_EPS)
        counts[ci] = counts[cj] / 2
        counts[cj] -= counts[ci]
    return len(empty)


def colbert_kmeans(dim: int, num_partitions: int, kmeans_niters: int, shared_lists: Any,
                   return_value_queue: Any = None, *, device: str) -> Any:  # fmt: skip
    """colbert-ai's `compute_faiss_kmeans`, same arguments and result, with `kmeans` on `device`."""
    sample = shared_lists[0][0]
    if sample.shape[1] != dim:
        raise ValueError(f"k-means: sample of dimension {sample.shape[1]}, colbert-ai asked {dim}")
    log.info(
        "colbert codec: torch k-means of %d embeddings into %d centroids on %s", len(sample), num_partitions, device
    )
    centroids = kmeans(sample, num_partitions, kmeans_niters, seed=123, device=device)
    if return_value_queue is not None:
        return_value_queue.put(centroids)
    return centroids
