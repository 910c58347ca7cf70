"""MuSiQue: multi-hop questions, each with 20 paragraphs of which some support the answer.

The corpus is every paragraph of the kept questions, supporting or not (the distractors are
what makes retrieval hard), deduplicated by content id so that a paragraph repeated across
questions, or shared with 2WikiMultihopQA, is one document. Unanswerable records
(MuSiQue-Full) are kept; `answerable` is recorded in meta.

Gold (`relevance`, config `datasets.musique.relevance`):
- `paper` (default): every paragraph paired with the question, relevance 1. DEXTER §3.1 "for
  qrels ... we use the contexts given for each question"; the toolkit's MusiqueQaDataLoader
  marks every paragraph of its file gold and never reads `is_supporting`.
- `supporting`: only the `is_supporting` paragraphs (a stricter, different benchmark).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import (
    Record,
    check_relevance,
    collect,
    field,
    ordered_unique,
    os_error,
    read_json_list,
    read_jsonl,
    text_docid,
)
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True}
RELEVANCE: dict[str, str] = {
    "paper": "every paragraph paired with the question (DEXTER §3.1, the toolkit's loader)",
    "supporting": "only the question's is_supporting paragraphs",
}


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (position label, record) from either the official .jsonl or a JSON list.

    The format is detected from the first non-blank character, not the file name, because
    copies of MuSiQue circulate as both under either extension.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096).decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
    except OSError as exc:
        raise os_error(path, exc) from None
    if head.startswith("["):
        data = read_json_list(path, "records")
        for i, rec in enumerate(data):
            yield f"index {i}", rec
    else:
        for lineno, rec in read_jsonl(path):
            yield f"line {lineno}", rec


def _hops(qid: str) -> str:
    """'3hop1__…' -> '3hop': the hop count; the composition shape (3hop1/3hop2) goes to meta."""
    m = re.match(r"(\d+hop)", qid)
    return m.group(1) if m else ""


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """Each question's new paragraphs, qrels, query and answer, record by record (a .jsonl file
    is read line by line). `relevance`: which paragraphs are gold (RELEVANCE)."""
    every = check_relevance("musique", RELEVANCE, relevance) == "paper"
    path = Path(files["questions"])
    records = islice(_records(path), limit)
    seen_docs: set[str] = set()
    seen_qids: set[str] = set()
    for pos, rec in records:
        qid = field(rec, "id", str, path, pos)
        if qid in seen_qids:
            raise DataError(path, qid, "id", "duplicate question id")
        seen_qids.add(qid)
        question = field(rec, "question", str, path, qid)
        answer = field(rec, "answer", str, path, qid)
        aliases = field(rec, "answer_aliases", list, path, qid) if "answer_aliases" in rec else []
        if not all(isinstance(a, str) for a in aliases):
            raise DataError(path, qid, "answer_aliases", "expected a list of strings")
        answerable = rec.get("answerable", True)
        if not isinstance(answerable, bool):
            raise DataError(path, qid, "answerable", f"expected bool, got {type(answerable).__name__}")

        by_idx: dict[int, str] = {}  # paragraph idx -> docid, to resolve decomposition support
        gold: set[str] = set()
        for j, par in enumerate(field(rec, "paragraphs", list, path, qid)):
            where = f"paragraphs[{j}]"
            idx = field(par, "idx", int, path, f"{qid} {where}")
            title = field(par, "title", str, path, f"{qid} {where}")
            text = field(par, "paragraph_text", str, path, f"{qid} {where}")
            supporting = field(par, "is_supporting", bool, path, f"{qid} {where}")
            if idx in by_idx:
                raise DataError(path, qid, f"{where}.idx", f"duplicate paragraph idx {idx}")
            docid = text_docid(title, text)
            by_idx[idx] = docid
            if docid not in seen_docs:
                seen_docs.add(docid)
                yield Document(docid=docid, title=title, text=text)
            if (every or supporting) and docid not in gold:  # one qrel even if the paragraph repeats
                gold.add(docid)
                yield Qrel(qid=qid, docid=docid, relevance=1)

        sub_questions: list[str] = []
        sub_answers: list[str] = []
        sub_support: list[str | None] = []
        for j, step in enumerate(field(rec, "question_decomposition", list, path, qid)):
            where = f"question_decomposition[{j}]"
            sub_questions.append(field(step, "question", str, path, f"{qid} {where}"))
            sub_answers.append(field(step, "answer", str, path, f"{qid} {where}"))
            support = step.get("paragraph_support_idx") if isinstance(step, dict) else None
            if support is None:  # MuSiQue-Full unanswerable steps carry no support
                sub_support.append(None)
                continue
            if not isinstance(support, int) or isinstance(support, bool):
                problem = f"expected int, got {type(support).__name__}"
                raise DataError(path, qid, f"{where}.paragraph_support_idx", problem)
            if support not in by_idx:
                problem = f"names paragraph idx {support}, absent from paragraphs"
                raise DataError(path, qid, f"{where}.paragraph_support_idx", problem)
            sub_support.append(by_idx[support])

        yield (
            Query(
                qid=qid,
                question=question,
                question_type=_hops(qid),
                decomposition=sub_questions,
                meta=json.dumps(
                    {
                        "answerable": answerable,
                        "shape": qid.split("__", 1)[0] if "__" in qid else "",
                        "decomposition_answers": sub_answers,
                        "decomposition_support": sub_support,
                    },
                    ensure_ascii=False,
                ),
            )
        )
        yield Answer(qid=qid, answer_type="aliases", aliases=ordered_unique([answer, *aliases]))


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper") -> tuple[bool, str]:
    """Planning-time: gold comes from the question file itself (each record's paragraphs, all
    or the `is_supporting` ones by `relevance`), so (True, "")."""
    return True, ""
