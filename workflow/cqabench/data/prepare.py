"""raw files → the four canonical Parquet files of one (dataset, split), checked before they appear.

The corpus streams from the loader to disk (see `prepare`); peak memory does not grow with it."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

import pyarrow.parquet as pq

from cqabench.common.errors import ConfigError, DataError
from cqabench.common.io import RowGroupWriter, atomic_files, iter_parquet_batches
from cqabench.data.datasets import loader
from cqabench.data.datasets.common import IdDigests, check_raw_file, check_relevance
from cqabench.data.schema import (
    ANSWER_TYPES,
    CORPUS_SCHEMA,
    DOC_KINDS,
    CanonicalData,
    Document,
    Qrel,
    Query,
)

log = logging.getLogger(__name__)
TABLES = ("queries", "corpus", "qrels", "answers")


def check_document(d: Document, source: Path) -> None:
    """A corpus row every later stage can read: a known kind, a table with cells."""
    if d.kind not in DOC_KINDS:
        raise DataError(source, d.docid, "kind", f"unknown document kind {d.kind!r}")
    if d.kind != "text" and (not d.table_header or not d.table_rows):
        raise DataError(source, d.docid, "table", "empty table")


def validate(data: CanonicalData, source: Path, docids: IdDigests | None = None) -> None:
    """Invariants every later stage relies on; `source` names the raw file in errors.

    `docids`: the corpus's ids when it was streamed to disk (`data.corpus` then empty and its
    documents already checked with `check_document`); otherwise `data.corpus` is checked here."""
    qids: set[str] = set()
    for q in data.queries:
        if not q.qid:
            raise DataError(source, q.qid, "qid", "empty question id")
        if q.qid in qids:
            raise DataError(source, q.qid, "qid", "duplicate question id")
        if not q.question.strip():
            raise DataError(source, q.qid, "question", "empty question text")
        qids.add(q.qid)
    if docids is None:
        docids = IdDigests()
        for d in data.corpus:
            check_document(d, source)
            docids.add(d.docid)
    for r in data.qrels:
        if r.qid not in qids:
            raise DataError(source, r.qid, "qrels.qid", "qrel for a question that is not in the split")
    absent = set(docids.missing(dict.fromkeys(r.docid for r in data.qrels)))
    for r in data.qrels:
        if r.docid in absent:
            raise DataError(source, r.qid, "qrels.docid", f"gold document {r.docid!r} is absent from the corpus")
    for a in data.answers:
        if a.qid not in qids:
            raise DataError(source, a.qid, "answers.qid", "answer for a question that is not in the split")
        if a.answer_type not in ANSWER_TYPES:
            raise DataError(source, a.qid, "answer_type", f"unknown answer type {a.answer_type!r}")


def _check_unique_docids(corpus_file: Path, docids: IdDigests, source: Path) -> None:
    """Every docid once: the retrieval corpus of a single dataset is this file itself (see
    corpora.pool). Candidates come from the digests; the written file names the real repeat."""
    candidates = docids.repeated()
    if not candidates:
        return
    seen: set[str] = set()
    for batch in iter_parquet_batches(corpus_file, 65_536, ["docid"]):
        for docid in batch.column(0).to_pylist():
            if IdDigests.digest(docid) in candidates:
                if docid in seen:
                    raise DataError(source, docid, "docid", "two documents of the corpus share this id")
                seen.add(docid)


# Question filters a dataset supports beyond `limit` (the paper's selections, e.g. DEXTER's
# "MuSiQue answerable dev, 2-hop only"), by dataset.
HOP_DATASETS = ("musique",)  # the hop count is in the question id ("2hop1__...") -> question_type "2hop"


def _answerable(q: Query) -> bool:
    try:
        return bool(json.loads(q.meta or "{}").get("answerable", True))
    except ValueError:
        return True


def check_limit(dataset: str, limit: object) -> None:
    """`limit` is a count of questions: null (all) or >= 1. A negative one would slice off the
    last questions ([:-1]) and 0 would keep none, both silently."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"{dataset}: limit must be a whole number of questions >= 1 (or null for all), got {limit!r}")


def select_questions(
    data: CanonicalData,
    dataset: str,
    *,
    limit: int | None = None,
    hops: list[int] | None = None,
    answerable_only: bool = False,
) -> CanonicalData:
    """The questions a config asks for, in file order: `hops` (MuSiQue: keep these hop counts),
    `answerable_only` (MuSiQue: drop unanswerable records), then the first `limit` of what is
    left. Qrels and answers follow the kept questions; the corpus stays that of the whole file,
    so which questions are evaluated never changes what is searched (DEXTER searched one pooled
    corpus whatever subset it evaluated: the first 1,200 2Wiki questions, MuSiQue's 2-hop ones)."""
    check_limit(dataset, limit)
    if (hops or answerable_only) and dataset not in HOP_DATASETS:
        raise ConfigError(
            f"{dataset}: hops / answerable_only select MuSiQue questions only (datasets: {', '.join(HOP_DATASETS)})"
        )
    queries = list(data.queries)
    if hops:
        wanted = {f"{int(h)}hop" for h in hops}
        queries = [q for q in queries if q.question_type in wanted]
    if answerable_only:
        queries = [q for q in queries if _answerable(q)]
    if limit is not None:
        queries = queries[:limit]
    if len(queries) == len(data.queries):
        return data
    kept = {q.qid for q in queries}
    return CanonicalData(
        queries=queries,
        corpus=data.corpus,
        qrels=[r for r in data.qrels if r.qid in kept],
        answers=[a for a in data.answers if a.qid in kept],
    )


def prepare(
    dataset: str,
    split: str,
    files: Mapping[str, Path],
    out_dir: Path,
    limit: int | None = None,
    hops: list[int] | None = None,
    answerable_only: bool = False,
    relevance: str = "paper",
) -> CanonicalData:
    """Load one (dataset, split), select its questions (`select_questions`), check, write.

    `relevance`: the loader's relevance mode (its RELEVANCE; config `datasets.<name>.relevance`),
    which decides the qrels and, for FinQA, the corpus itself; checked before any file is read.

    The loader's records stream through: each document is checked and written to corpus.parquet
    in row groups as it is read (io.RowGroupWriter), so memory holds the questions, qrels and
    answers but never the corpus (docids only as 8-byte digests, for the checks). The loader
    reads the whole file (no limit), so the corpus is the file's whatever `limit`, `hops` or
    `answerable_only` select. Returns the kept questions, qrels and answers (`corpus` empty:
    the documents are in corpus.parquet)."""
    module = loader(dataset)
    check_limit(dataset, limit)
    check_relevance(dataset, module.RELEVANCE, relevance)
    missing = [role for role, required in module.RAW_FILES.items() if required and role not in files]
    unknown = sorted(set(files) - set(module.RAW_FILES))
    if missing or unknown:
        raise ConfigError(
            f"{dataset}/{split}: raw files missing roles {missing} / unknown roles {unknown}; "
            f"valid roles: {sorted(module.RAW_FILES)}"
        )
    for role, path in files.items():
        check_raw_file(Path(path), role)
    main_file = Path(files.get("questions", next(iter(files.values()))))
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    try:
        data, n_docs = _stream_and_write(
            module, dataset, split, files, main_file, out_dir, limit, hops, answerable_only, relevance
        )
    except BaseException:
        # The tables are written as they are read, into temporaries that a failure removes; a
        # folder this run made for them goes too, so a failed prepare leaves nothing behind.
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    log.info(
        "%s/%s (relevance %s): %d queries, %d documents, %d qrels (%d relevant), %d answers",
        dataset,
        split,
        relevance,
        len(data.queries),
        n_docs,
        len(data.qrels),
        sum(1 for r in data.qrels if r.relevance > 0),
        len(data.answers),
    )
    return data


def _stream_and_write(
    module: ModuleType,
    dataset: str,
    split: str,
    files: Mapping[str, Path],
    main_file: Path,
    out_dir: Path,
    limit: int | None,
    hops: list[int] | None,
    answerable_only: bool,
    relevance: str,
) -> tuple[CanonicalData, int]:
    """The body of `prepare`: (the kept questions, qrels and answers; the number of documents)."""
    loaded = CanonicalData()
    docids = IdDigests()
    # All four only after every check passed, and as one: a failed or killed run leaves none of
    # them (and no old table beside a new one); see io.atomic_files.
    with atomic_files({name: out_dir / f"{name}.parquet" for name in TABLES}) as tmp:
        with RowGroupWriter(tmp["corpus"], CORPUS_SCHEMA) as corpus:
            for rec in module.records(files, split, limit=None, relevance=relevance):
                if isinstance(rec, Document):
                    check_document(rec, main_file)
                    docids.add(rec.docid)
                    corpus.add(asdict(rec))
                elif isinstance(rec, Query):
                    loaded.queries.append(rec)
                elif isinstance(rec, Qrel):
                    loaded.qrels.append(rec)
                else:
                    loaded.answers.append(rec)
        if not loaded.queries:
            # An empty file (0 bytes, `[]`, only blank lines) would otherwise become four empty
            # tables and, downstream, a metrics.json without metrics.
            raise DataError(
                main_file,
                None,
                "-",
                "no questions in the file (an empty file or an empty list); "
                "is it the right file, or a download that was cut short?",
            )
        data = select_questions(loaded, dataset, limit=limit, hops=hops, answerable_only=answerable_only)
        if not data.queries:
            raise ConfigError(
                f"{dataset}/{split}: the question selection (hops {hops}, answerable_only "
                f"{answerable_only}) keeps none of the {len(loaded.queries)} questions of {main_file}"
            )
        if data is not loaded:
            log.info(
                "%s/%s: kept %d of %d questions (limit %s, hops %s, answerable_only %s); "
                "the corpus is the whole file's",
                dataset,
                split,
                len(data.queries),
                len(loaded.queries),
                limit,
                hops,
                answerable_only,
            )
        validate(data, main_file, docids)
        _check_unique_docids(tmp["corpus"], docids, main_file)
        tables = data.tables()
        for name in ("queries", "qrels", "answers"):
            pq.write_table(tables[name], tmp[name])
    return data, corpus.rows
