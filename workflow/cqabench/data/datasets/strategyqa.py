"""StrategyQA: yes/no questions whose reasoning steps were annotated with evidence paragraphs.

`evidence` holds, per annotator, per decomposition step, a list of items; an item is either
a list of paragraph ids ("Title-N") or the marker "operation" / "no_evidence". The canonical
`Query.evidence` keeps the per-annotator, per-step structure with the markers turned into
empty lists, because StrategyQA Recall@10 is defined per annotator over those steps.

The ids only resolve to text through the official `strategyqa_train_paragraphs.json`
(role "paragraphs"): one JSON object `{"Title-N": {"title": "Title", "content": ..., ...}}`,
the id being the article title, a hyphen and the paragraph's index in it. Without the file
the corpus and qrels are empty: answer metrics work, but retrieval Recall cannot be computed.

Qrels (`relevance`, config `datasets.strategyqa.relevance`):
- `paper` (default): DEXTER §3.1, the passages "whose titles the annotators looked up", grade
  1: every corpus paragraph whose `title` equals the title of a paragraph some annotator cited
  (the cited paragraph's own `title` field, read from the file), pooled over the annotators
  (annotator ""). The toolkit's StrategyQADataLoader maps each title to the first corpus entry
  with that title only; the paper's wording, which we follow, is every passage of it.
- `paragraphs`: the cited paragraph ids themselves, one qrel per annotator citing it.
`Query.evidence` (per annotator and step, used by StrategyQA's Recall@10) is the same in both.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterator, Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import (
    Record,
    check_relevance,
    collect,
    field,
    iter_json_object,
    limited,
    read_json_list,
    read_jsonl,
)
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True, "paragraphs": False, "decompositions": False}

RELEVANCE: dict[str, str] = {
    "paper": "every paragraph with the title of a paragraph an annotator cited (DEXTER §3.1)",
    "paragraphs": "the paragraph ids the annotators cited",
}

MARKERS = ("operation", "no_evidence")


def _strings(rec: dict[str, Any], key: str, path: Path, qid: str) -> list[str]:
    values = field(rec, key, list, path, qid)
    if not all(isinstance(v, str) for v in values):
        raise DataError(path, qid, key, "expected a list of strings")
    return values


def _evidence(raw: list, path: Path, qid: str) -> list[list[list[str]]]:
    """Annotator -> step -> paragraph ids, markers dropped (a step of only markers is [])."""
    out: list[list[list[str]]] = []
    for a, annotator in enumerate(raw):
        if not isinstance(annotator, list):
            raise DataError(path, qid, f"evidence[{a}]", "expected a list of steps")
        steps: list[list[str]] = []
        for s, step in enumerate(annotator):
            if not isinstance(step, list):
                raise DataError(path, qid, f"evidence[{a}][{s}]", "expected a list of evidence items")
            ids: list[str] = []
            for k, item in enumerate(step):
                where = f"evidence[{a}][{s}][{k}]"
                if isinstance(item, str):
                    if item not in MARKERS:
                        raise DataError(path, qid, where, f"unknown marker {item!r}; expected one of {MARKERS}")
                elif isinstance(item, list) and all(isinstance(p, str) for p in item):
                    ids.extend(p for p in item if p not in ids)
                else:
                    raise DataError(path, qid, where, "expected a list of paragraph ids or a marker string")
            steps.append(ids)
        out.append(steps)
    return out


def iter_paragraphs(path: Path) -> Iterator[Document]:
    """The paragraphs of strategyqa_train_paragraphs.json (one object {"Title-N": {title,
    content, ...}}: the paragraphs annotators matched as evidence for the train questions, not
    the 36.6M-paragraph corpus) one at a time (common.iter_json_object)."""
    for _line, pid, par in iter_json_object(path, "paragraphs by id"):
        title = field(par, "title", str, path, pid)
        content = field(par, "content", str, path, pid)
        yield Document(docid=pid, title=title, text=content)


def _predicted(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for lineno, rec in read_jsonl(path):
        qid = field(rec, "qid", str, path, f"line {lineno}")
        steps = field(rec, "decomposition", list, path, qid)
        if not all(isinstance(s, str) for s in steps):
            raise DataError(path, qid, "decomposition", "expected a list of strings")
        out[qid] = steps
    return out


def id_title(pid: str) -> str:
    """The article title a paragraph id names: "Albany, Georgia-1" -> "Albany, Georgia" (the id
    itself when it has no "-<index>" suffix). Only a first guess, to know which titles to keep
    while the file streams by; the cited paragraph's `title` field decides (`_paper_qrels`)."""
    head, sep, tail = pid.rpartition("-")
    return head if sep and tail.isdigit() else pid


def _cited(q: Query) -> list[str]:
    """The paragraph ids of a question's evidence, every annotator, first citation first."""
    return list(dict.fromkeys(p for steps in q.evidence for step in steps for p in step))


def _absent(path: Path, ppath: Path, queries: list[Query], found: Container[str]) -> None:
    """A cited id the paragraph file lacks: DataError naming the first question citing it."""
    for q in queries:
        for a, steps in enumerate(q.evidence):
            for pid in dict.fromkeys(p for step in steps for p in step):
                if pid not in found:
                    raise DataError(
                        path, q.qid, "evidence", f"paragraph id {pid!r} (annotator {a}) is absent from {ppath}"
                    )


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """The paragraphs as they are read, then each question's qrels, query and answer.

    Questions are read and checked first, so only their evidence ids (mode `paper`: and the
    paragraphs of the titles they name) are remembered while the paragraph file streams by; an
    evidence id the file lacks is reported after it, naming the first question (in file order)
    that cites it. `relevance`: RELEVANCE."""
    by_title_mode = check_relevance("strategyqa", RELEVANCE, relevance) == "paper"
    path = Path(files["questions"])
    raw = read_json_list(path, "questions")
    dpath = Path(files["decompositions"]) if files.get("decompositions") else None
    predicted = _predicted(dpath) if dpath is not None else {}

    queries: list[Query] = []
    answers: list[Answer] = []
    seen_qids: set[str] = set()
    for i, rec in enumerate(limited(raw, limit)):
        qid = field(rec, "qid", str, path, f"index {i}")
        if qid in seen_qids:
            raise DataError(path, qid, "qid", "duplicate question id")
        seen_qids.add(qid)
        question = field(rec, "question", str, path, qid)
        answer = field(rec, "answer", bool, path, qid)
        evidence = _evidence(field(rec, "evidence", list, path, qid), path, qid)
        meta: dict[str, Any] = {"term": rec.get("term", ""), "description": rec.get("description", "")}
        if dpath is not None:
            if qid not in predicted:
                raise DataError(dpath, qid, "qid", "no predicted decomposition for this question")
            meta["predicted_decomposition"] = predicted[qid]
        queries.append(
            Query(
                qid=qid,
                question=question,
                decomposition=_strings(rec, "decomposition", path, qid),
                facts=_strings(rec, "facts", path, qid),
                evidence=evidence,
                meta=json.dumps(meta, ensure_ascii=False),
            )
        )
        answers.append(Answer(qid=qid, answer_type="boolean", boolean=answer, aliases=["yes" if answer else "no"]))
    del raw, predicted

    ppath = Path(files["paragraphs"]) if files.get("paragraphs") else None
    if ppath is not None:
        wanted = {p for q in queries for p in _cited(q)}
        guessed = {id_title(p) for p in wanted} if by_title_mode else set()
        title_of: dict[str, str] = {}  # cited id -> its title field
        by_title: dict[str, list[str]] = {}  # (paper) a guessed title -> its paragraphs, file order
        for doc in iter_paragraphs(ppath):
            if doc.docid in wanted:
                title_of[doc.docid] = doc.title
            if doc.title in guessed:
                by_title.setdefault(doc.title, []).append(doc.docid)
            yield doc
        _absent(path, ppath, queries, title_of)
        if by_title_mode:
            yield from _paper_qrels(queries, title_of, by_title, ppath)
        else:
            for q in queries:
                for a, steps in enumerate(q.evidence):
                    for pid in dict.fromkeys(p for step in steps for p in step):
                        yield Qrel(qid=q.qid, docid=pid, relevance=1, annotator=str(a))
    yield from queries
    yield from answers


def _paper_qrels(
    queries: list[Query], title_of: Mapping[str, str], by_title: dict[str, list[str]], ppath: Path
) -> Iterator[Qrel]:
    """Mode `paper`: per question, every paragraph of each cited paragraph's title (titles in
    first-citation order, paragraphs in file order), relevance 1. A cited paragraph whose title
    field differs from what its id suggests (`id_title`) costs a second pass over the file for
    the paragraphs of that title."""
    missed = {t for t in title_of.values() if t not in by_title}
    if missed:
        for doc in iter_paragraphs(ppath):
            if doc.title in missed:
                by_title.setdefault(doc.title, []).append(doc.docid)
    for q in queries:
        titles = dict.fromkeys(title_of[p] for p in _cited(q))
        for docid in dict.fromkeys(d for t in titles for d in by_title[t]):
            yield Qrel(qid=q.qid, docid=docid, relevance=1)


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper") -> tuple[bool, str]:
    """Planning-time: the evidence ids resolve to documents (qrels) only through the paragraph
    file; without the role `load` writes no corpus and no qrels. A configured paragraph file
    that is not there yet will be downloaded, so it counts."""
    if not files.get("paragraphs"):
        return False, (
            "StrategyQA's gold paragraphs resolve only with the `paragraphs` file "
            "(strategyqa_train_paragraphs.json), which is not configured for this split"
        )
    return True, ""
