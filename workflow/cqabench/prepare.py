"""raw files → the four canonical Parquet files of one (dataset, split), checked before writing."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from cqabench.datasets import loader
from cqabench.errors import ConfigError, DataError
from cqabench.io import write_parquet
from cqabench.schema import ANSWER_TYPES, DOC_KINDS, CanonicalData

log = logging.getLogger(__name__)
TABLES = ("queries", "corpus", "qrels", "answers")


def validate(data: CanonicalData, source: Path) -> None:
    """Invariants every later stage relies on; `source` names the raw file in errors."""
    qids: set[str] = set()
    for q in data.queries:
        if not q.qid:
            raise DataError(source, q.qid, "qid", "empty question id")
        if q.qid in qids:
            raise DataError(source, q.qid, "qid", "duplicate question id")
        if not q.question.strip():
            raise DataError(source, q.qid, "question", "empty question text")
        qids.add(q.qid)
    docids: set[str] = set()
    for d in data.corpus:
        if d.kind not in DOC_KINDS:
            raise DataError(source, d.docid, "kind", f"unknown document kind {d.kind!r}")
        if d.kind != "text" and (not d.table_header or not d.table_rows):
            raise DataError(source, d.docid, "table", "empty table")
        docids.add(d.docid)
    for r in data.qrels:
        if r.qid not in qids:
            raise DataError(source, r.qid, "qrels.qid", "qrel for a question that is not in the split")
        if r.docid not in docids:
            raise DataError(source, r.qid, "qrels.docid", f"gold document {r.docid!r} is absent from the corpus")
    for a in data.answers:
        if a.qid not in qids:
            raise DataError(source, a.qid, "answers.qid", "answer for a question that is not in the split")
        if a.answer_type not in ANSWER_TYPES:
            raise DataError(source, a.qid, "answer_type", f"unknown answer type {a.answer_type!r}")


def prepare(dataset: str, split: str, files: Mapping[str, Path], out_dir: Path, limit: int | None = None) -> CanonicalData:
    module = loader(dataset)
    missing = [role for role, required in module.RAW_FILES.items() if required and role not in files]
    unknown = sorted(set(files) - set(module.RAW_FILES))
    if missing or unknown:
        raise ConfigError(
            f"{dataset}/{split}: raw files missing roles {missing} / unknown roles {unknown}; "
            f"valid roles: {sorted(module.RAW_FILES)}"
        )
    data = module.load(files, split, limit=limit)
    main_file = files.get("questions", next(iter(files.values())))
    validate(data, Path(main_file))
    tables = data.tables()
    # Write all four only after every check passed, each atomically.
    for name in TABLES:
        write_parquet(tables[name], Path(out_dir) / f"{name}.parquet")
    log.info(
        "%s/%s: %d queries, %d documents, %d qrels, %d answers",
        dataset, split, len(data.queries), len(data.corpus), len(data.qrels), len(data.answers),
    )
    return data
