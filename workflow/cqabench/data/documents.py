"""Corpus documents as every consumer reads them: the retrievers' indexes, the exports, the prompts.

`iter_documents` is the one reader of a canonical corpus (tables serialized, ids checked unique,
batch by batch), so an exported document is exactly the one our retrievers index; a Pyserini /
Anserini `JsonCollection` record (`collection_record`) is what our BM25 index holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from cqabench.common.errors import DataError
from cqabench.common.io import iter_parquet_batches
from cqabench.data.datasets.common import IdDigests
from cqabench.data.tables import document_text


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

    The one reader of corpus documents for indexing and for the exports (`cqabench.data.beir`), so an
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


def collection_record(docid: str, title: str, text: str) -> dict[str, str]:
    """One Anserini / Pyserini JsonCollection document, exactly as our BM25 index holds it.

    `contents` is the text, `title` an extra field (indexed because `build_index` passes
    `-fields title`). Anserini skips a document whose contents are empty, so a title-only
    document keeps its title as contents and stays findable. Our BM25 index
    (`cqabench.retrieval.bm25`) and the Pyserini export (`cqabench.data.beir`) are built from these
    same records, so an index built from the export equals ours.
    """
    contents = text if text.strip() else title
    return {"id": docid, "contents": contents, "title": title}
