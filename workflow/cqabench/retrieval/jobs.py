"""The retrieval stage's jobs on files: index a corpus, search queries, import an external run.

Each job reads the canonical Parquet tables, calls the retriever registry, and writes its
outputs atomically; the CLI and the benchmark scripts both call these.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from cqabench import retrieval as retrievers
from cqabench.common.errors import DataError
from cqabench.common.io import write_json
from cqabench.data.documents import iter_documents
from cqabench.retrieval.base import Doc, QueryText, Results
from cqabench.retrieval.decomposition import STOP_WORD_LIST, decomposed_search
from cqabench.retrieval.runs import ranked, read_run, write_run

log = logging.getLogger(__name__)


def read_documents(corpus: str | Path, serialization: str, rows: tuple[int, int] | None = None) -> Iterator[Doc]:
    """(docid, title, text) of every corpus row (or of `rows`), tables serialized; batch by batch."""
    for docid, title, text, _kind in iter_documents(corpus, serialization, rows):
        yield docid, title, text


def read_query_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "-", "queries file not found")
    rows = pq.read_table(path).to_pylist()
    seen: set[str] = set()
    for row in rows:
        if not row.get("qid"):
            raise DataError(path, row.get("question"), "qid", "empty query id")
        if row["qid"] in seen:
            raise DataError(path, row["qid"], "qid", "duplicate query id")
        seen.add(row["qid"])
    return rows


def index_corpus(corpus: str | Path, serialization: str, settings: Mapping[str, Any], out: str | Path) -> None:
    started = time.perf_counter()
    retrievers.build_index(read_documents(corpus, serialization), Path(out), settings)
    log.info("indexed %s (%s) in %.1f s", corpus, serialization, time.perf_counter() - started)


def search_queries(
    index: str | Path, queries: str | Path, settings: Mapping[str, Any], k: int,
    out_trec: str | Path | None, out_parquet: str | Path | None, tag: str,
) -> Results:  # fmt: skip
    """Every question of `queries` searched as it is; the run written in both forms."""
    pairs: list[QueryText] = [(r["qid"], r["question"]) for r in read_query_rows(queries)]
    results = retrievers.search(Path(index), pairs, k, settings)
    write_run(results, out_trec, out_parquet, tag)
    return results


def decompose_queries(
    index: str | Path, queries: str | Path, settings: Mapping[str, Any], kind: str, k: int,
    out_trec: str | Path | None, out_parquet: str | Path | None, out_log: str | Path | None, tag: str,
) -> Results:  # fmt: skip
    """IR-Q / IR-D (see `cqabench.retrieval.decomposition`); the step log records every query sent."""
    rows = read_query_rows(queries)
    results, steps = decomposed_search(
        rows, kind, lambda qs, depth: retrievers.search(Path(index), qs, depth, settings), k, str(queries)
    )
    write_run(results, out_trec, out_parquet, tag)
    if out_log is not None:
        skipped = sum(1 for s in steps if s["status"] != "sent" and s["step"] >= 0)
        empty = sum(1 for s in steps if s["step"] < 0)
        write_json(
            {"kind": kind, "k": k, "stop_words": STOP_WORD_LIST, "steps_skipped": skipped,
             "questions_without_query": empty, "steps": steps},
            out_log,
        )  # fmt: skip
    return results


def import_run(
    path: str | Path, fmt: str | None, queries: str | Path, k: int | None,
    out_trec: str | Path | None, out_parquet: str | Path | None, tag: str,
) -> Results:  # fmt: skip
    """An external run in our two forms, ranked by its scores and checked against the queries."""
    run = read_run(path, fmt)
    known = {r["qid"] for r in read_query_rows(queries)}
    unknown = sorted(set(run) - known)
    if unknown:
        raise DataError(
            path, unknown[0], "qid",
            f"{len(unknown)} query id(s) of the run are not in {queries} (first: {json.dumps(unknown[:3])}); "
            "is the run for another dataset or split?",
        )  # fmt: skip
    results = ranked(run, k)
    for qid in sorted(known - set(results)):
        results[qid] = []  # a query the external system left out retrieved nothing
    write_run(results, out_trec, out_parquet, tag)
    return results


def fuse_runs(
    runs: list[str | Path], queries: str | Path, settings: Mapping[str, Any],
    out_trec: str | Path | None, out_parquet: str | Path | None, tag: str,
) -> Results:  # fmt: skip
    """A fused run (`cqabench.retrieval.fusion`) over every question of `queries`, written in both forms.

    `settings` is the resolved fusion (`Plan.pipeline_settings`); `runs` are its inputs' files in
    the order of its `fuse` list. A query id of an input that is not in `queries` means an input
    of another dataset split, a DataError rather than a fusion that scores zero.
    """
    from cqabench.retrieval import fusion

    qids = [r["qid"] for r in read_query_rows(queries)]
    known = set(qids)
    inputs = []
    for path in runs:
        run = read_run(path)
        unknown = sorted(set(run) - known)
        if unknown:
            raise DataError(path, unknown[0], "qid", f"{len(unknown)} query id(s) are not in {queries}: "
                            "is this run of another dataset or split?")  # fmt: skip
        inputs.append(ranked(run))
    results = fusion.fuse(inputs, fusion.resolve(settings, int(settings.get("depth") or 100)), qids)
    write_run(results, out_trec, out_parquet, tag)
    return results


def rerank_run(
    run: str | Path, queries: str | Path, corpus: str | Path, serialization: str, settings: Mapping[str, Any],
    out_trec: str | Path | None, out_parquet: str | Path | None, out_log: str | Path | None, tag: str,
) -> Results:  # fmt: skip
    """A cross-encoder reranking (`cqabench.retrieval.rerank`) of `run`'s top `depth`, written in
    both forms; `out_log` records the model, the pairs scored and how many were truncated."""
    from cqabench.retrieval import rerank

    settings = rerank.resolve(settings)
    rows = read_query_rows(queries)
    questions = {r["qid"]: r["question"] for r in rows}
    source = ranked(read_run(run))
    unknown = sorted(set(source) - set(questions))
    if unknown:
        raise DataError(run, unknown[0], "qid", f"{len(unknown)} query id(s) are not in {queries}: "
                        "is this run of another dataset or split?")  # fmt: skip
    for qid in questions:
        source.setdefault(qid, [])  # a question its input retrieved nothing for stays, empty
    wanted = rerank.needed_docids(source, int(settings["depth"]))
    documents = rerank.collect_documents(read_documents(corpus, serialization), wanted)
    results, record = rerank.rerank(source, questions, documents, settings)
    write_run(results, out_trec, out_parquet, tag)
    if out_log is not None:
        from cqabench.models.provenance import retriever_model

        write_json({"settings": settings, "input": str(run), "serialization": serialization, **record,
                    **retriever_model(settings)}, out_log)  # fmt: skip
    return results
