"""Run files: what a retriever returned, in TREC text (for trec_eval and other tools) and Parquet.

A run in memory is either ranked (`Results`: {qid: [(docid, score), ...]} best first) or scored
(`Run`: {qid: {docid: score}}, what pytrec_eval takes). Ranks are always derived from scores
the way trec_eval orders a run (score descending, ties by docid descending), so the rank column
we write, the order StrategyQA Recall@10 reads, and what trec_eval scores never disagree; the
rank column of an imported TREC file is ignored, as trec_eval ignores it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cqabench.common.errors import DataError
from cqabench.common.io import atomic_path, write_parquet
from cqabench.data.datasets.common import read_json, text_lines
from cqabench.retrieval.base import Results, rank

Run = dict[str, dict[str, float]]

RUN_SCHEMA = pa.schema([("qid", pa.string()), ("docid", pa.string()), ("rank", pa.int32()), ("score", pa.float64())])
FORMATS = ("trec", "parquet", "json")


def ranked(run: Mapping[str, Mapping[str, float]], k: int | None = None) -> Results:
    """Scored run -> ranked run, in trec_eval order, optionally cut to k per query."""
    return {qid: rank(docs.items(), k if k is not None else len(docs)) for qid, docs in run.items()}


def scored(results: Results) -> Run:
    return {qid: dict(pairs) for qid, pairs in results.items()}


def _check_ids(results: Results, path: Path) -> None:
    """TREC is whitespace-separated: an id with a space would shift every column after it."""
    for qid, pairs in results.items():
        if not qid or any(c.isspace() for c in qid):
            raise DataError(path, qid, "qid", "query id is empty or contains whitespace")
        for docid, score in pairs:
            if not docid or any(c.isspace() for c in docid):
                raise DataError(path, qid, "docid", f"document id {docid!r} is empty or contains whitespace")
            if not math.isfinite(score):
                raise DataError(path, qid, "score", f"score of {docid!r} is {score}")


def write_trec(results: Results, path: str | Path, tag: str) -> None:
    path = Path(path)
    _check_ids(results, path)
    if not tag or any(c.isspace() for c in tag):
        raise DataError(path, None, "tag", f"run tag {tag!r} is empty or contains whitespace")
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for qid, pairs in results.items():
            for position, (docid, score) in enumerate(rank(pairs, len(pairs)), start=1):
                fh.write(f"{qid} Q0 {docid} {position} {score!r} {tag}\n")


def write_parquet_run(results: Results, path: str | Path) -> None:
    path = Path(path)
    _check_ids(results, path)
    qids: list[str] = []
    docids: list[str] = []
    ranks: list[int] = []
    scores: list[float] = []
    for qid, pairs in results.items():
        for position, (docid, score) in enumerate(rank(pairs, len(pairs)), start=1):
            qids.append(qid)
            docids.append(docid)
            ranks.append(position)
            scores.append(score)
    table = pa.table([qids, docids, ranks, scores], schema=RUN_SCHEMA)
    write_parquet(table, path)


def write_run(results: Results, trec: str | Path | None, parquet: str | Path | None, tag: str) -> None:
    if trec is not None:
        write_trec(results, trec, tag)
    if parquet is not None:
        write_parquet_run(results, parquet)


def _add(run: Run, path: Path, where: object, qid: str, docid: str, score: float) -> None:
    if not math.isfinite(score):
        raise DataError(path, where, "score", f"score {score} is not a finite number")
    docs = run.setdefault(qid, {})
    if docid in docs:
        raise DataError(path, where, "docid", f"document {docid!r} appears twice for query {qid!r}")
    docs[docid] = score


def _read_trec(path: Path) -> Run:
    run: Run = {}
    for lineno, line in text_lines(path):  # bad bytes: a DataError naming the line
        parts = line.split()
        if not parts:
            continue
        where = f"line {lineno}"
        if len(parts) != 6:
            raise DataError(path, where, "-", f"expected 6 columns (qid Q0 docid rank score tag), got {len(parts)}")
        qid, _, docid, rank_text, score_text, _ = parts
        try:
            int(rank_text)
            score = float(score_text)
        except ValueError:
            raise DataError(
                path, where, "rank/score", f"rank {rank_text!r} or score {score_text!r} is not a number"
            ) from None
        _add(run, path, where, qid, docid, score)
    return run


def _read_parquet(path: Path) -> Run:
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(path, None, "-", f"not a readable Parquet file ({exc})") from None
    missing = {"qid", "docid", "score"} - set(table.column_names)
    if missing:
        raise DataError(path, None, ", ".join(sorted(missing)), "column missing")
    run: Run = {}
    columns = table.select(["qid", "docid", "score"]).to_pydict()
    for i, (qid, docid, score) in enumerate(zip(columns["qid"], columns["docid"], columns["score"])):
        if qid is None or docid is None or score is None:
            raise DataError(path, f"row {i}", "qid/docid/score", "null value")
        _add(run, path, f"row {i}", str(qid), str(docid), float(score))
    return run


def _read_json(path: Path) -> Run:
    raw = read_json(path)  # bad UTF-8, invalid JSON and lone surrogates named by line or record
    if not isinstance(raw, dict):
        raise DataError(path, None, "-", "expected an object {qid: {docid: score}}")
    run: Run = {}
    for qid, docs in raw.items():
        if not isinstance(docs, dict):
            raise DataError(path, qid, "-", "expected an object {docid: score}")
        run[str(qid)] = {}
        for docid, score in docs.items():
            if not isinstance(score, (int, float)) or isinstance(score, bool):
                raise DataError(path, qid, docid, f"score must be a number, got {type(score).__name__}")
            _add(run, path, qid, str(qid), str(docid), float(score))
    return run


def detect_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".json":
        return "json"
    return "trec"  # .trec, .run, .txt, or none: TREC is the common interchange form


def read_run(path: str | Path, fmt: str | None = None) -> Run:
    """{qid: {docid: score}} from a TREC, Parquet or JSON run (format from the suffix if not given)."""
    path = Path(path)
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise DataError(path, None, "format", f"unknown run format {fmt!r}; valid: {', '.join(FORMATS)}")
    if not path.is_file():
        raise DataError(path, None, "-", "run file not found")
    run = {"trec": _read_trec, "parquet": _read_parquet, "json": _read_json}[fmt](path)
    if not any(run.values()):
        # An empty run would score 0.0 on every measure and give a RAG cell no context while its
        # rows said k documents: refused here, where import, evaluation, fusion, rerank and the
        # cell inputs all read a run (as `prepare` refuses a raw file without questions).
        raise DataError(
            path,
            None,
            "-",
            f"the run ranks no document (an empty {fmt} file, blank lines or "
            "empty rankings only): nothing to score or fuse; is it the right file?",
        )
    return run
