"""Exact top-k by inner product over memory-mapped shards, on the job's device, merged vectorised.

A flat dense index is a list of float32 `.npy` shards. `flat_search` scans them one at a time:
each shard is cut into blocks, each block multiplied by the queries with torch on `device` (the
GPU of a `device: cuda` job, else the CPU with the job's threads), and only each query's
candidates leave the device. The running top-k and each block's candidates are merged with
numpy (`merge_topk`), for all queries at once.

Order: score descending, ties by the lower document id, the order of the per-query heap merge
(by (score, -id)) this replaces. A block's candidates are every document scoring at least its
k-th best score, so equal scores at the cut are all there and the merge keeps the lowest ids.
The old code kept, at the cut, whichever of the equal-scoring documents faiss's heap returned
(not always the lower id: measured on duplicated passages, tests/retrieval/test_exact_search.py),
so the top k depended on the shard layout; now it does not.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

BLOCK_ELEMENTS = 2**26  # scores per block (queries x documents): 256 MB in float32
_NO_ID = np.iinfo(np.int64).max  # sorts after every real id


def empty_topk(queries: int) -> tuple[np.ndarray, np.ndarray]:
    return np.empty((queries, 0), dtype=np.float32), np.empty((queries, 0), dtype=np.int64)


def merge_topk(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best k of two (scores, ids) candidate lists per query (rows), by score descending then
    id ascending; padding (score -inf, id -1) sorts last and is kept only where fewer exist."""
    scores = np.concatenate([a[0], b[0]], axis=1)
    ids = np.concatenate([a[1], b[1]], axis=1)
    order = np.lexsort((np.where(ids < 0, _NO_ID, ids), -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


def block_candidates(scores: Any, k: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a (queries x documents) torch score block: every column scoring at least the
    row's k-th best, as numpy (scores, ids + offset) padded with (-inf, -1)."""
    import torch

    kth = scores.topk(min(k, scores.shape[1]), dim=1).values[:, -1:]
    rows, cols = torch.nonzero(scores >= kth, as_tuple=True)  # row-major: ids ascending per row
    values = scores[rows, cols].cpu().numpy()
    row_ids, col_ids = rows.cpu().numpy(), cols.cpu().numpy()
    counts = np.bincount(row_ids, minlength=scores.shape[0])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(len(row_ids)) - starts[row_ids]
    out_scores = np.full((scores.shape[0], int(counts.max(initial=0))), -np.inf, dtype=np.float32)
    out_ids = np.full(out_scores.shape, -1, dtype=np.int64)
    out_scores[row_ids, pos] = values
    out_ids[row_ids, pos] = col_ids + offset
    return out_scores, out_ids


def scan(queries: Any, shard: np.ndarray, k: int, offset: int, device: str,
         best: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """`best` merged with the top k of one shard (ids from `offset`), block by block on `device`."""
    import torch

    rows = max(1, BLOCK_ELEMENTS // max(1, queries.shape[0]))
    for lo in range(0, len(shard), rows):
        block = torch.from_numpy(np.array(shard[lo : lo + rows], dtype=np.float32))  # a copy: the mmap is read-only
        scores = queries @ to_device(block, device).T
        best = merge_topk(best, block_candidates(scores, k, offset + lo), k)
    return best


def to_device(tensor: Any, device: str) -> Any:
    """The GPU branch of the scan: a host tensor moved to a CUDA device (a no-op on the CPU)."""
    return tensor if device == "cpu" else tensor.to(device, non_blocking=True)


def flat_search(shard_paths: Iterable[Path], q: np.ndarray, k: int, device: str = "cpu",
                threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Exact top-k of every query row of q over the shards, in order (ids count across shards):
    (scores, ids), each (queries x k), padded with (-inf, -1) where the shards hold fewer."""
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    queries = to_device(torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32)), device)
    best = empty_topk(len(q))
    offset = 0
    with torch.inference_mode():
        for path in shard_paths:
            shard = np.load(path, mmap_mode="r")
            best = scan(queries, shard, k, offset, device, best)
            offset += len(shard)
    pad = k - best[0].shape[1]
    if pad > 0:  # fewer documents than k
        best = merge_topk(best, (np.full((len(q), pad), -np.inf, np.float32), np.full((len(q), pad), -1, np.int64)), k)
    return best
