"""raw files → the four canonical Parquet files of one (dataset, split), checked before writing."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

import pyarrow.parquet as pq

from cqabench.datasets import loader
from cqabench.datasets.common import check_raw_file
from cqabench.errors import ConfigError, DataError
from cqabench.io import atomic_files
from cqabench.schema import ANSWER_TYPES, DOC_KINDS, CanonicalData, Query

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


def select_questions(data: CanonicalData, dataset: str, *, limit: int | None = None, hops: list[int] | None = None,
                     answerable_only: bool = False) -> CanonicalData:
    """The questions a config asks for, in file order: `hops` (MuSiQue: keep these hop counts),
    `answerable_only` (MuSiQue: drop unanswerable records), then the first `limit` of what is
    left. Qrels and answers follow the kept questions; the corpus stays that of the whole file,
    so which questions are evaluated never changes what is searched (DEXTER searched one pooled
    corpus whatever subset it evaluated: the first 1,200 2Wiki questions, MuSiQue's 2-hop ones)."""
    check_limit(dataset, limit)
    if (hops or answerable_only) and dataset not in HOP_DATASETS:
        raise ConfigError(f"{dataset}: hops / answerable_only select MuSiQue questions only "
                          f"(datasets: {', '.join(HOP_DATASETS)})")
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


def prepare(dataset: str, split: str, files: Mapping[str, Path], out_dir: Path, limit: int | None = None,
            hops: list[int] | None = None, answerable_only: bool = False) -> CanonicalData:
    """Load one (dataset, split), select its questions (`select_questions`), check, write.

    The loader reads the whole file (no limit), so the corpus is the file's whatever `limit`,
    `hops` or `answerable_only` select."""
    module = loader(dataset)
    check_limit(dataset, limit)
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
    loaded = module.load(files, split, limit=None)
    if not loaded.queries:
        # An empty file (0 bytes, `[]`, only blank lines) would otherwise become four empty
        # tables and, downstream, a metrics.json without metrics.
        raise DataError(main_file, None, "-", "no questions in the file (an empty file or an empty list); "
                        "is it the right file, or a download that was cut short?")
    data = select_questions(loaded, dataset, limit=limit, hops=hops, answerable_only=answerable_only)
    if not data.queries:
        raise ConfigError(f"{dataset}/{split}: the question selection (hops {hops}, answerable_only "
                          f"{answerable_only}) keeps none of the {len(loaded.queries)} questions of {main_file}")
    if data is not loaded:
        log.info("%s/%s: kept %d of %d questions (limit %s, hops %s, answerable_only %s); the corpus is the whole file's",
                 dataset, split, len(data.queries), len(loaded.queries), limit, hops, answerable_only)
    validate(data, main_file)
    tables = data.tables()
    # All four only after every check passed, and as one: a failed or killed run leaves none of
    # them (and no old table beside a new one); see io.atomic_files.
    out_dir = Path(out_dir)
    with atomic_files({name: out_dir / f"{name}.parquet" for name in TABLES}) as tmp:
        for name in TABLES:
            pq.write_table(tables[name], tmp[name])
    log.info(
        "%s/%s: %d queries, %d documents, %d qrels, %d answers",
        dataset, split, len(data.queries), len(data.corpus), len(data.qrels), len(data.answers),
    )
    return data
