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

from cqabench import retrievers
from cqabench.datasets.common import IdDigests
from cqabench.errors import DataError
from cqabench.io import iter_parquet_batches, write_json
from cqabench.retrievers.base import Doc, QueryText, Results
from cqabench.retrievers.decomposition import STOP_WORD_LIST, decomposed_search
from cqabench.runs import ranked, read_run, write_run
from cqabench.tables import document_text

log = logging.getLogger(__name__)


def corpus_rows(corpus: str | Path) -> int:
    """The corpus' row count from the Parquet footer (no row is read)."""
    corpus = Path(corpus)
    if not corpus.is_file():
        raise DataError(corpus, None, "-", "corpus file not found")
    return int(pq.ParquetFile(corpus).metadata.num_rows)


def _row_batches(
    corpus: Path, rows: tuple[int, int] | None, batch_size: int, columns: list[str] | None = None
) -> Iterator[Any]:
    """Record batches of the rows [start, stop) (all rows when None), reading only the row
    groups that overlap them: a part job of a 21M-passage corpus skips the others unread.
    Read without pre-buffering, as `io.iter_parquet_batches` says why."""
    if rows is None:
        yield from iter_parquet_batches(corpus, batch_size, columns)
        return
    pf = pq.ParquetFile(corpus, pre_buffer=False)
    start, stop = rows
    offset = 0
    for group in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(group).num_rows
        lo, hi = max(start, offset), min(stop, offset + n)
        if lo < hi:
            at = offset
            for batch in pf.iter_batches(batch_size=batch_size, row_groups=[group], columns=columns, use_threads=False):
                a, b = max(lo - at, 0), min(hi - at, len(batch))
                if a < b:
                    yield batch.slice(a, b - a)
                at += len(batch)
        offset += n
        if offset >= stop:
            break


def iter_documents(
    corpus: str | Path, serialization: str, rows: tuple[int, int] | None = None
) -> Iterator[tuple[str, str, str, str]]:
    """(docid, title, text, kind) of every corpus row, tables serialized; one pass, batch by batch.

    The one reader of corpus documents for indexing and for the exports (`cqabench.beir`), so an
    exported document is exactly the one our retrievers index, checked the same way. `rows`
    (start, stop) reads only that contiguous row range (an encode-part job's share); docids are
    then checked unique within it, and the gather step checks them across the parts.
    """
    corpus = Path(corpus)
    if not corpus.is_file():
        raise DataError(corpus, None, "-", "corpus file not found")
    # Ids as 8-byte digests, not a set of them (that is 1.7 GB at 21M passages): a repeat is
    # therefore reported after the last document, named by a second pass over the docid column;
    # every consumer writes its output atomically, so nothing half-made appears.
    digests = IdDigests()
    for batch in _row_batches(corpus, rows, 4096):
        for row in batch.to_pylist():
            docid = row.get("docid")
            if not docid:
                raise DataError(corpus, row.get("title"), "docid", "empty document id")
            digests.add(docid)
            text = document_text(row, serialization)
            title = row.get("title") or ""
            if not text.strip() and not title.strip():
                raise DataError(corpus, docid, "text", "title and text are both empty")
            yield docid, title, text, row.get("kind") or "text"
    candidates = digests.repeated()
    seen: set[str] = set()
    for batch in _row_batches(corpus, rows, 65_536, ["docid"]) if candidates else ():
        for docid in batch.column("docid").to_pylist():
            if IdDigests.digest(docid) in candidates:
                if docid in seen:
                    raise DataError(corpus, docid, "docid", "duplicate document id")
                seen.add(docid)


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
    """IR-Q / IR-D (see `cqabench.retrievers.decomposition`); the step log records every query sent."""
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
    """A fused run (`cqabench.retrievers.fusion`) over every question of `queries`, written in both forms.

    `settings` is the resolved fusion (`Plan.pipeline_settings`); `runs` are its inputs' files in
    the order of its `fuse` list. A query id of an input that is not in `queries` means an input
    of another dataset split, a DataError rather than a fusion that scores zero.
    """
    from cqabench.retrievers import fusion

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
    """A cross-encoder reranking (`cqabench.retrievers.rerank`) of `run`'s top `depth`, written in
    both forms; `out_log` records the model, the pairs scored and how many were truncated."""
    from cqabench.retrievers import rerank

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
        from cqabench.report.provenance import retriever_model

        write_json({"settings": settings, "input": str(run), "serialization": serialization, **record,
                    **retriever_model(settings)}, out_log)  # fmt: skip
    return results
