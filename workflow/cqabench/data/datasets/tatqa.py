"""TAT-QA: questions over one financial-report table plus the paragraphs around it.

Corpus: per context, one table document (docid = table uid) and one text document per
paragraph (docid = paragraph uid); TAT-QA has no titles, so titles are empty. Gold follows
`answer_from`: the table when it is "table" or "table-text", and the paragraphs listed in
`rel_paragraphs` when it is "text" or "table-text" (five dev questions answered from the table
also list paragraphs; those are not gold, as the annotation says the answer came from the
table, and as the toolkit's `'text' in answer_from` test has it). How a `rel_paragraphs` entry
names a paragraph is `relevance` (config `datasets.tatqa.relevance`):
- `paper` (default): as the toolkit's TATQADataLoader, by list position, `paragraphs[int(p)-1]`;
- `order`: the paragraph whose `order` field is int(p);
- `rows`: as `paper`, but the table keeps its raw orientation (below).
The two paragraph rules agree on every question of the official dev file (278 contexts, 926
entries; each context's paragraphs are listed in order 1..n) and of the bundled sample.

Table orientation. `paper` and `order`: the table transposed, as the toolkit's TATQADataLoader
builds its table evidence (`zip(*table)`, TATQADataLoader.py:39): the header is the raw table's
first *column* (the row labels), each further column a row. That is the only table text of
TAT-QA the toolkit's code shows (its oracle context); its corpus file `tatqa_corpus.json` was
never released, so the retrieval corpus takes the same orientation (the one the code shows,
and one text per document for retrieval and oracle alike). `rows`: header = the first raw row,
the rest are rows; TAT-QA tables often have two or three header rows (a period banner above
the years), which then stay as ordinary rows. The table is a grid in every TAT-QA file (no
ragged rows), so transposing loses no cell. docs/fidelity.md gives the measured effect.

Answers: span / multi-span -> answer_type "aliases" with the spans; for multi-span every span
must be produced, which `numeric_type == "multi-span"` tells the metrics (a single span is
`numeric_type == "span"`). arithmetic / count -> answer_type "number" with the value, the
`scale` (thousand, million, billion, percent) and the `derivation` as `program`.
With a question limit, the corpus holds only the contexts of the kept questions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import Record, check_relevance, collect, field, finite, read_json_list
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True}
RELEVANCE: dict[str, str] = {
    "paper": "rel_paragraphs by list position, paragraphs[int(p)-1], as the toolkit's loader",
    "order": "rel_paragraphs by the paragraphs' order field; the table transposed as in paper",
    "rows": "rel_paragraphs as paper; the table in its raw orientation (header = first raw row)",
}

SPAN_TYPES = ("span", "multi-span")
NUMBER_TYPES = ("arithmetic", "count")
ANSWER_FROM = ("table", "text", "table-text")


def header_and_rows(grid: object, path: Path, rec: object, name: str) -> tuple[list[str], list[list[str]]]:
    """Split a grid of string cells into (first row, other rows), refusing an empty table.

    Shared by every table loader: a table without a header or without a body row cannot be
    serialized into anything a retriever or a model can use, so it is bad input, not a
    document.
    """
    if not isinstance(grid, list):
        raise DataError(path, rec, name, f"expected a list of rows, got {type(grid).__name__}")
    for i, row in enumerate(grid):
        if not isinstance(row, list):
            raise DataError(path, rec, f"{name}[{i}]", f"expected a list of cells, got {type(row).__name__}")
        for j, cell in enumerate(row):
            if not isinstance(cell, str):
                raise DataError(path, rec, f"{name}[{i}][{j}]", f"expected str, got {type(cell).__name__}")
    if not grid or not grid[0]:
        raise DataError(path, rec, name, "empty table: no header row")
    if len(grid) < 2:
        raise DataError(path, rec, name, "empty table: a header but no rows")
    return list(grid[0]), [list(r) for r in grid[1:]]


def _number(value: Any, path: Path, rec: str) -> float:
    """Arithmetic answers are JSON numbers, count answers numeric strings ("4")."""
    if isinstance(value, bool):
        raise DataError(path, rec, "answer", "expected a number, got bool")
    if isinstance(value, (int, float)):
        return finite(float(value), path, rec, "answer")
    if isinstance(value, str):
        try:
            number = float(value.replace(",", ""))
        except ValueError:
            pass
        else:
            return finite(number, path, rec, "answer")
    raise DataError(path, rec, "answer", f"expected a number, got {value!r}")


def _answer(q: dict[str, Any], path: Path, qid: str) -> Answer:
    kind = field(q, "answer_type", str, path, qid)
    scale = field(q, "scale", str, path, qid)
    derivation = q.get("derivation", "") or ""
    if not isinstance(derivation, str):
        raise DataError(path, qid, "derivation", f"expected str, got {type(derivation).__name__}")
    if kind in SPAN_TYPES:
        spans = field(q, "answer", list, path, qid)
        if not spans or not all(isinstance(s, str) for s in spans):
            raise DataError(path, qid, "answer", "expected a non-empty list of strings for a span answer")
        return Answer(
            qid=qid, answer_type="aliases", aliases=list(spans), scale=scale, numeric_type=kind, program=derivation
        )
    if kind in NUMBER_TYPES:
        raw = field(q, "answer", (int, float, str), path, qid)
        return Answer(
            qid=qid,
            answer_type="number",
            aliases=[str(raw)],
            number=_number(raw, path, qid),
            scale=scale,
            numeric_type=kind,
            program=derivation,
        )
    valid = ", ".join(SPAN_TYPES + NUMBER_TYPES)
    raise DataError(path, qid, "answer_type", f"unknown answer type {kind!r}; valid: {valid}")


def transposed(grid: list[list[str]]) -> list[list[str]]:
    """The table's columns as rows: the toolkit's `zip(*table)`. TAT-QA tables are grids (every
    row as wide as the first; checked by the caller), so nothing is cut."""
    return [list(column) for column in zip(*grid)]


def _table_grid(table: dict[str, Any], path: Path, uid: str, raw_rows: bool) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a context's table in the mode's orientation (module docstring)."""
    grid = field(table, "table", list, path, uid)
    header, rows = header_and_rows(grid, path, uid, "table.table")
    if raw_rows:
        return header, rows
    for i, row in enumerate(rows, start=1):
        if len(row) != len(header):
            raise DataError(
                path,
                uid,
                f"table.table[{i}]",
                f"{len(row)} cells where the first row has {len(header)}: a ragged table cannot be "
                "transposed (relevance mode rows keeps the raw orientation)",
            )
    return header_and_rows(transposed(grid), path, uid, "table.table (transposed)")


def _paragraph(
    r: Any, by_order: Mapping[int, str], listed: list[str], positional: bool, path: Path, qid: str, context: str
) -> str:
    """The uid a `rel_paragraphs` entry names: by list position (mode `paper`) or by `order`."""
    try:
        n = int(r)
    except (TypeError, ValueError):
        raise DataError(path, qid, "rel_paragraphs", f"{r!r} is not a paragraph order") from None
    if positional:
        if not 1 <= n <= len(listed):
            raise DataError(
                path,
                qid,
                "rel_paragraphs",
                f"paragraph {r!r} does not exist in context {context} ({len(listed)} paragraphs)",
            )
        return listed[n - 1]
    if n not in by_order:
        raise DataError(path, qid, "rel_paragraphs", f"paragraph order {r!r} does not exist in context {context}")
    return by_order[n]


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """Per context: its questions' qrels, answers and queries, then (if it kept a question) its
    documents. Uids are checked unique over the file. `relevance`: RELEVANCE."""
    mode = check_relevance("tatqa", RELEVANCE, relevance)
    positional = mode != "order"
    path = Path(files["questions"])
    contexts = read_json_list(path, "contexts")
    n_queries = 0
    seen_docids: set[str] = set()
    seen_qids: set[str] = set()
    for c, ctx in enumerate(contexts):
        if limit is not None and n_queries >= limit:
            break
        table = field(ctx, "table", dict, path, f"index {c}")
        table_uid = field(table, "uid", str, path, f"index {c}")
        header, rows = _table_grid(table, path, table_uid, raw_rows=mode == "rows")
        docs = [Document(docid=table_uid, title="", text="", kind="table", table_header=header, table_rows=rows)]
        by_order: dict[int, str] = {}
        for j, par in enumerate(field(ctx, "paragraphs", list, path, table_uid)):
            where = f"{table_uid} paragraphs[{j}]"
            uid = field(par, "uid", str, path, where)
            order = field(par, "order", int, path, where)
            if order in by_order:
                raise DataError(path, where, "order", f"duplicate paragraph order {order}")
            by_order[order] = uid
            docs.append(Document(docid=uid, title="", text=field(par, "text", str, path, where)))
        questions = field(ctx, "questions", list, path, table_uid)
        if limit is not None:
            questions = questions[: limit - n_queries]
        for j, q in enumerate(questions):
            qid = field(q, "uid", str, path, f"{table_uid} questions[{j}]")
            if qid in seen_qids:
                raise DataError(path, qid, "uid", "duplicate question uid")
            seen_qids.add(qid)
            source = field(q, "answer_from", str, path, qid)
            if source not in ANSWER_FROM:
                raise DataError(path, qid, "answer_from", f"unknown value {source!r}; valid: {', '.join(ANSWER_FROM)}")
            rel = field(q, "rel_paragraphs", list, path, qid)
            gold: list[str] = [table_uid] if source in ("table", "table-text") else []
            if source in ("text", "table-text"):
                listed = [d.docid for d in docs[1:]]
                for r in rel:
                    uid = _paragraph(r, by_order, listed, positional, path, qid, table_uid)
                    if uid not in gold:
                        gold.append(uid)
            yield from (Qrel(qid=qid, docid=d, relevance=1) for d in gold)
            yield _answer(q, path, qid)
            kind = q["answer_type"]
            yield (
                Query(
                    qid=qid,
                    question=field(q, "question", str, path, qid),
                    question_type=kind,
                    meta=json.dumps(
                        {
                            "answer_from": source,
                            "rel_paragraphs": rel,
                            "req_comparison": q.get("req_comparison"),
                            "context": table_uid,
                        },
                        ensure_ascii=False,
                    ),
                )
            )
            n_queries += 1
        if questions:
            # Uids are meant to be unique across the file; a repeat would silently merge two contexts.
            for doc in docs:
                if doc.docid in seen_docids:
                    raise DataError(path, doc.docid, "uid", "the same uid names two documents")
                seen_docids.add(doc.docid)
            yield from docs


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper") -> tuple[bool, str]:
    """Planning-time: gold comes from the question file itself (each question's `answer_from` / `rel_paragraphs`), so (True, "")."""
    return True, ""
