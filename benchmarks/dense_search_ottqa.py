"""Exact dense search on OTT-QA dev: the old scan and merge (faiss per shard, heap merge per query)
against the new one (cqabench.retrieval.exact: torch blocks, vectorised merge), same vectors.

    python benchmarks/dense_search_ottqa.py [--index DIR] [--queries N] [--shard-rows 250] [--threads 1]

--index: a built flat dense index (default: the default run's OTT-QA MiniLM index,
results/sample/index/ottqa/pipe/minilm, read only). Queries: the OTT-QA dev questions
(benchmarks/dense_ottqa.py's `load`), encoded once with the index's own query encoder. The index's
vectors are also cut into shards of --shard-rows rows in a temporary folder, so the merge runs
over many shards as it does on a large corpus. Prints, per layout: old and new wall seconds of
the scan+merge, the merge alone (both merges fed the same faiss per-shard results), and the
checks: the merges' ids and scores identical; old vs new search ids identical and max |score
difference| (torch's and faiss's float32 products may differ in the last bit).
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "benchmarks"))
DEFAULT_INDEX = REPO / "results" / "sample" / "index" / "ottqa" / "pipe" / "minilm"


def faiss_shard_topk(shard: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One shard's top-k as the old code computed it: faiss.IndexFlatIP over the shard."""
    import faiss

    index = faiss.IndexFlatIP(shard.shape[1])
    index.add(np.ascontiguousarray(shard))
    return index.search(q, min(k, len(shard)))


def old_merge(
    per_shard: list[tuple[np.ndarray, np.ndarray, int]], n_queries: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The merge of cqabench before issue 37 (dense._flat_search at a5c0ea6), verbatim in effect:
    per query, a heap of (score, -id) over the running best and each shard's (scores, ids + offset)."""
    best: list[list[tuple[float, int]]] = [[] for _ in range(n_queries)]
    for scores, ids, offset in per_shard:
        for row in range(n_queries):
            merged = best[row] + [(float(s), int(i) + offset) for s, i in zip(scores[row], ids[row]) if i >= 0]
            best[row] = heapq.nlargest(k, merged, key=lambda p: (p[0], -p[1]))
    out_scores = np.full((n_queries, k), -np.inf, dtype=np.float32)
    out_ids = np.full((n_queries, k), -1, dtype=np.int64)
    for row, hits in enumerate(best):
        for col, (s, i) in enumerate(hits):
            out_scores[row, col], out_ids[row, col] = s, i
    return out_scores, out_ids


def new_merge(
    per_shard: list[tuple[np.ndarray, np.ndarray, int]], n_queries: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The same per-shard results through cqabench.retrieval.exact.merge_topk."""
    from cqabench.retrieval.exact import empty_topk, merge_topk

    best = empty_topk(n_queries)
    for scores, ids, offset in per_shard:
        best = merge_topk(best, (scores, np.where(ids >= 0, ids + offset, -1)), k)
    return best


def old_search(paths: list[Path], q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    per_shard, offset = [], 0
    for path in paths:
        shard = np.load(path, mmap_mode="r")
        per_shard.append((*faiss_shard_topk(shard, q, k), offset))
        offset += len(shard)
    return old_merge(per_shard, len(q), k)


def encode_queries(index: Path, n: int | None) -> np.ndarray:
    from dense_ottqa import load

    from cqabench.retrieval import dense

    _, queries, _ = load(None, n)
    settings = json.loads((index / "settings.json").read_text(encoding="utf-8"))
    run = dense.resolve(settings)
    return dense._Encoders(run, index).encode_queries([text for _, text in queries], 32)


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def compare(label: str, paths: list[Path], q: np.ndarray, k: int, threads: int) -> None:
    from cqabench.retrieval.exact import flat_search

    (old_s, old_i), t_old = timed(old_search, paths, q, k)
    (new_s, new_i), t_new = timed(flat_search, paths, q, k, "cpu", threads)
    per_shard, offset = [], 0
    for path in paths:
        shard = np.load(path, mmap_mode="r")
        per_shard.append((*faiss_shard_topk(shard, q, k), offset))
        offset += len(shard)
    (mo_s, mo_i), t_mo = timed(old_merge, per_shard, len(q), k)
    (mn_s, mn_i), t_mn = timed(new_merge, per_shard, len(q), k)
    merge_equal = np.array_equal(mo_i, mn_i) and np.array_equal(mo_s, mn_s)
    same_ids = float((old_i == new_i).mean())
    print(f"{label}: {len(paths)} shards, {len(q)} queries, k {k}")
    print(f"  scan+merge  old (faiss + heap) {t_old:8.3f} s   new (torch + vectorised) {t_new:8.3f} s")
    print(f"  merge alone old {t_mo:8.3f} s   new {t_mn:8.3f} s   identical ids and scores: {merge_equal}")
    diff_rows = np.flatnonzero((old_i != new_i).any(axis=1))
    # where the sets differ, only documents tied (to 1e-6) with the k-th score may differ
    ties_only = all(np.abs(np.sort(old_s[r]) - np.sort(new_s[r])).max() <= 1e-6 for r in diff_rows)
    print(
        f"  search old vs new: ids equal at {same_ids:.6f} of ranks ({len(diff_rows)} queries differ, "
        f"same scores there to 1e-6: {ties_only}), max |score diff| {float(np.abs(old_s - new_s).max()):.3g}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, default=DEFAULT_INDEX)
    ap.add_argument("--queries", type=int, default=None, help="first N dev questions (default all)")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--shard-rows", type=int, default=250)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import faiss
    import torch

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    meta = json.loads((args.index / "dense.json").read_text(encoding="utf-8"))
    q = encode_queries(args.index, args.queries)
    paths = [args.index / "shards" / name for name in meta["shards"]]
    k = min(args.k, int(meta["count"]))
    compare(f"index as built ({args.index})", paths, q, k, args.threads)
    vectors = np.concatenate([np.load(p) for p in paths])
    with tempfile.TemporaryDirectory(prefix="cqabench-search-") as tmp:
        cut = []
        for n, lo in enumerate(range(0, len(vectors), args.shard_rows)):
            cut.append(Path(tmp) / f"{n:05d}.npy")
            np.save(cut[-1], vectors[lo : lo + args.shard_rows])
        compare(f"same vectors in shards of {args.shard_rows}", cut, q, k, args.threads)


if __name__ == "__main__":
    main()
