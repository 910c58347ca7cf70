"""Reading a corpus batch by batch holds a bounded amount of Arrow memory, whatever the file's size.

pyarrow's default reader (pre_buffer=True) kept the buffered column chunks of every row group
read until the iterator ended: export-beir, pool-corpus and indexing grew by about 290 bytes per
passage (benchmarks/scale_corpus.py, docs/data.md "Memory and disk at scale").
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cqabench.common.io import iter_parquet_batches
from cqabench.data.documents import iter_documents
from cqabench.data.schema import CORPUS_SCHEMA

ROWS, GROUP, TEXT_BYTES = 60_000, 1_000, 500  # 60 MB of incompressible text, 60 row groups of 1 MB


def _corpus(path: Path) -> list[str]:
    """A corpus file of ROWS documents whose text is random hex (so Parquet cannot shrink it)."""
    docids = [f"d{i:06d}" for i in range(ROWS)]
    texts = [os.urandom(TEXT_BYTES).hex() for _ in range(ROWS)]
    cols = {
        "docid": docids,
        "title": [""] * ROWS,
        "text": texts,
        "kind": ["text"] * ROWS,
        "table_header": [[]] * ROWS,
        "table_rows": [[]] * ROWS,
    }
    pq.write_table(pa.table(cols, schema=CORPUS_SCHEMA), path, row_group_size=GROUP)
    return docids


def test_batches_hold_bounded_arrow_memory(tmp_path: Path) -> None:
    path = tmp_path / "corpus.parquet"
    docids = _corpus(path)
    base = pa.total_allocated_bytes()
    peak, seen = 0, []
    for batch in iter_parquet_batches(path, 4096, ["docid", "text"]):
        peak = max(peak, pa.total_allocated_bytes() - base)
        seen.extend(batch.column(0).to_pylist())
    assert seen == docids
    # One 4096-row batch is 4 MB of text; the whole file is 60 MB. Retaining what was read
    # would pass 50 MB by the end.
    assert peak < 16 * 2**20, peak


def test_iter_documents_holds_bounded_arrow_memory(tmp_path: Path) -> None:
    path = tmp_path / "corpus.parquet"
    docids = _corpus(path)
    base = pa.total_allocated_bytes()
    peak, seen = 0, []
    for docid, _title, text, _kind in iter_documents(path, "pipe"):
        if len(seen) % 1000 == 0:
            peak = max(peak, pa.total_allocated_bytes() - base)
        assert len(text) == 2 * TEXT_BYTES
        seen.append(docid)
    assert seen == docids
    assert peak < 16 * 2**20, peak
