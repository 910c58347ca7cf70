"""Pool the prepared corpora of several datasets into one deduplicated retrieval corpus.

DEXTER casts MuSiQue and 2WikiMultihopQA to one shared open-domain corpus; content ids
(see datasets.common.text_docid) make the same paragraph one document however many
questions or datasets carry it.

Bounded memory at any size: the inputs are cut into sorted runs on disk (RUN_ROWS rows each),
then merged; equal docids meet side by side in the merge, so de-duplication compares a document
with the one before it and never holds the texts (or the ids) of the corpus. The output is
sorted by docid and written in row groups.

A corpus of one prepared file (a dataset searched in its own corpus) is not copied: the output
is a hard link to it (a copy only where the file system cannot link), so it is stored once, in
prepare's row order. `prepare` guarantees its docids are unique; a file that repeats one (not
written by prepare) is pooled like several files instead.
"""

from __future__ import annotations

import heapq
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cqabench.common.errors import DataError
from cqabench.common.io import RowGroupWriter, atomic_path, iter_parquet_batches, scratch_dir
from cqabench.data.datasets.common import IdDigests
from cqabench.data.schema import CORPUS_SCHEMA

log = logging.getLogger(__name__)

RUN_ROWS = 100_000  # rows sorted in memory at once (one run)
FAN_IN = 16  # runs merged at once (more are merged in levels)
GROUP_ROWS = 1_024  # row group of a run file: what the merge holds of each open run


def _check_schema(path: Path) -> None:
    if not path.is_file():
        raise DataError(path, None, "-", "corpus file not found")
    schema = pq.read_schema(path)
    for name in CORPUS_SCHEMA.names:
        if name not in schema.names:
            raise DataError(path, None, name, "missing column of the corpus schema")


def _batches(path: Path, batch_size: int) -> Iterator[pa.Table]:
    for batch in iter_parquet_batches(path, batch_size, CORPUS_SCHEMA.names):
        yield pa.Table.from_batches([batch]).cast(CORPUS_SCHEMA)


def _unique_docids(path: Path) -> bool:
    """Whether every docid of `path` occurs once (8-byte digests; a candidate is checked exactly)."""
    digests = IdDigests()
    for batch in iter_parquet_batches(path, 65_536, ["docid"]):
        for docid in batch.column(0).to_pylist():
            digests.add(docid)
    candidates = digests.repeated()
    seen: set[str] = set()
    for batch in iter_parquet_batches(path, 65_536, ["docid"]) if candidates else ():
        for docid in batch.column(0).to_pylist():
            if IdDigests.digest(docid) in candidates:
                if docid in seen:
                    return False
                seen.add(docid)
    return True


def _link(src: Path, out: Path) -> None:
    """`out` becomes `src` itself (a hard link), atomically; a copy where linking is refused."""
    with atomic_path(out) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError as exc:  # another file system, or one without hard links
            log.warning("cannot hard-link %s to %s (%s); copying it", src, out, exc)
            shutil.copyfile(src, tmp)


def _sorted_runs(corpus_files: Sequence[Path], scratch: Path, run_rows: int, group_rows: int) -> list[Path]:
    """Cut the inputs, in order, into runs sorted (stably) by docid; returns their files in order.

    Runs are written in row groups of `group_rows`, the rows the merge reads of each at a time
    (a reader decodes whole row groups)."""
    runs: list[Path] = []
    for path in corpus_files:
        for table in _batches(path, run_rows):
            if table.num_rows == 0:
                continue
            run = scratch / f"run-{len(runs):06d}.parquet"
            pq.write_table(
                table.take(pc.sort_indices(table, sort_keys=[("docid", "ascending")])), run, row_group_size=group_rows
            )
            runs.append(run)
    return runs


def _run_rows(run: Path, index: int, batch_size: int) -> Iterator[tuple[str, int, int, dict[str, Any]]]:
    seq = 0
    for table in _batches(run, batch_size):
        for row in table.to_pylist():
            yield row["docid"], index, seq, row
            seq += 1


def _merged(runs: Sequence[Path], source: Path) -> Iterator[dict[str, Any]]:
    """The rows of sorted `runs` in docid order, each docid once (its first row: runs in order,
    then row order); a repeat must have the first one's title and text."""
    merged = heapq.merge(*(_run_rows(run, i, GROUP_ROWS) for i, run in enumerate(runs)))
    last: dict[str, Any] | None = None
    for docid, _run, _seq, row in merged:
        if last is not None and docid == last["docid"]:
            if (row["title"], row["text"]) != (last["title"], last["text"]):
                raise DataError(source, docid, "docid", "two different documents share this id")
            continue
        yield row
        last = row


def pool(corpus_files: Sequence[Path], out: Path, run_rows: int = RUN_ROWS) -> int:
    """Write the pooled corpus of `corpus_files` to `out`; returns its number of documents.

    A docid met again keeps its first document (inputs in the order given), after checking the
    two have the same title and text; two different documents under one id are an error."""
    corpus_files = [Path(p) for p in corpus_files]
    out = Path(out)
    for path in corpus_files:
        _check_schema(path)
    if len(corpus_files) == 1 and _unique_docids(corpus_files[0]):
        _link(corpus_files[0], out)
        rows = pq.ParquetFile(out).metadata.num_rows
        log.info("%s: %d documents, the prepared corpus itself (%s, not copied)", out, rows, corpus_files[0])
        return rows
    with scratch_dir(out) as scratch:
        runs = _sorted_runs(corpus_files, scratch, run_rows, GROUP_ROWS)
        n_runs, level = len(runs), 0
        # At most FAN_IN runs are open at once (each reader holds a row group or more), so memory
        # does not grow with the number of runs; consecutive runs merge into one, keeping order.
        while len(runs) > FAN_IN:
            level += 1
            merged_runs: list[Path] = []
            for i in range(0, len(runs), FAN_IN):
                run = scratch / f"run-{level}-{len(merged_runs):06d}.parquet"
                with RowGroupWriter(run, CORPUS_SCHEMA, rows_per_group=GROUP_ROWS) as writer:
                    for row in _merged(runs[i : i + FAN_IN], corpus_files[0]):
                        writer.add(row)
                for done in runs[i : i + FAN_IN]:
                    done.unlink()
                merged_runs.append(run)
            runs = merged_runs
        with atomic_path(out) as tmp, RowGroupWriter(tmp, CORPUS_SCHEMA) as writer:
            for row in _merged(runs, corpus_files[0]):
                writer.add(row)
    log.info(
        "%s: %d documents pooled from %d files (%d sorted runs, %d merge levels)",
        out,
        writer.rows,
        len(corpus_files),
        n_runs,
        level + 1,
    )
    return writer.rows


def docids(table: pa.Table) -> set[str]:
    return set(pc.unique(table.column("docid")).to_pylist())
