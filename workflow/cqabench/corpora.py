"""Pool the prepared corpora of several datasets into one deduplicated retrieval corpus.

DEXTER casts MuSiQue and 2WikiMultihopQA to one shared open-domain corpus; content ids
(see datasets.common.text_docid) make the same paragraph one document however many
questions or datasets carry it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cqabench.errors import DataError
from cqabench.io import write_parquet
from cqabench.schema import CORPUS_SCHEMA


def pool(corpus_files: Sequence[Path], out: Path) -> pa.Table:
    parts = [pq.read_table(p, schema=CORPUS_SCHEMA) for p in corpus_files]
    table = pa.concat_tables(parts) if parts else CORPUS_SCHEMA.empty_table()
    seen: dict[str, int] = {}
    keep = []
    texts = table.column("text").to_pylist()
    titles = table.column("title").to_pylist()
    for i, docid in enumerate(table.column("docid").to_pylist()):
        if docid in seen:
            j = seen[docid]
            if (titles[i], texts[i]) != (titles[j], texts[j]):
                raise DataError(corpus_files[0], docid, "docid", "two different documents share this id")
            continue
        seen[docid] = i
        keep.append(i)
    pooled = table.take(pa.array(keep, type=pa.int64())) if keep else table
    pooled = pooled.sort_by([("docid", "ascending")]) if pooled.num_rows else pooled
    write_parquet(pooled, out)
    return pooled


def docids(table: pa.Table) -> set[str]:
    return set(pc.unique(table.column("docid")).to_pylist())
