"""2WikiMultihopQA: multi-hop questions over Wikipedia, each with 10 context paragraphs.

A context paragraph is `[title, [sentences]]`; its document text is the sentences joined by
one space, which is how the released 2Wiki passage corpora (e.g. the 6,119-passage distractor
corpus) write them, so the same paragraph gets the same content id from either source.
Every question of the file is loaded: only an explicit `limit` caps them.

Gold (`relevance`, config `datasets.2wikimultihopqa.relevance`), relevance 1:
- `paper` (default): all the question's context paragraphs (10 in the release, most of them
  distractors). DEXTER §3.1 "we use the contexts given for each question"; the toolkit's
  WikiMultihopQADataLoader marks every context paragraph gold, with no supporting-facts filter.
- `supporting`: the context paragraphs whose title appears in `supporting_facts`.
`supporting_facts` is checked (and kept in meta) in both modes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import (
    Record,
    check_relevance,
    collect,
    field,
    limited,
    read_json_list,
    text_docid,
)
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True, "passages": False}
RELEVANCE: dict[str, str] = {
    "paper": "all context paragraphs of the question (DEXTER §3.1, the toolkit's loader)",
    "supporting": "the context paragraphs named by supporting_facts",
}


def _add(new: list[Document], seen: set[str], title: str, text: str) -> str:
    """The paragraph's content id; a paragraph not met before goes to `new`."""
    docid = text_docid(title, text)
    if docid not in seen:
        seen.add(docid)
        new.append(Document(docid=docid, title=title, text=text))
    return docid


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """Each question's new paragraphs, qrels, query and answer; then the extra passages.
    `relevance`: which context paragraphs are gold (RELEVANCE)."""
    every = check_relevance("2wikimultihopqa", RELEVANCE, relevance) == "paper"
    path = Path(files["questions"])
    records = limited(read_json_list(path), limit)
    new: list[Document] = []
    seen_docs: set[str] = set()
    seen_qids: set[str] = set()
    for i, rec in enumerate(records):
        qid = field(rec, "_id", str, path, f"index {i}")
        if qid in seen_qids:
            raise DataError(path, qid, "_id", "duplicate question id")
        seen_qids.add(qid)
        question = field(rec, "question", str, path, qid)
        answer = field(rec, "answer", str, path, qid)
        qtype = field(rec, "type", str, path, qid)

        by_title: dict[str, list[str]] = {}
        context_ids: list[str] = []  # context order: the paper mode's qrels order
        for j, par in enumerate(field(rec, "context", list, path, qid)):
            where = f"context[{j}]"
            if not (
                isinstance(par, list)
                and len(par) == 2
                and isinstance(par[0], str)
                and isinstance(par[1], list)
                and all(isinstance(s, str) for s in par[1])
            ):
                raise DataError(path, qid, where, "expected [title, [sentence, ...]]")
            title, sentences = par
            docid = _add(new, seen_docs, title, " ".join(sentences))
            by_title.setdefault(title, []).append(docid)
            context_ids.append(docid)
        yield from new
        new.clear()

        gold: list[str] = list(dict.fromkeys(context_ids)) if every else []
        for j, fact in enumerate(field(rec, "supporting_facts", list, path, qid)):
            where = f"supporting_facts[{j}]"
            if not (
                isinstance(fact, list)
                and len(fact) == 2
                and isinstance(fact[0], str)
                and isinstance(fact[1], int)
                and not isinstance(fact[1], bool)
            ):
                raise DataError(path, qid, where, "expected [title, sentence index]")
            if fact[0] not in by_title:
                raise DataError(path, qid, "supporting_facts", f"title {fact[0]!r} is not among the context titles")
            for docid in by_title[fact[0]]:
                if not every and docid not in gold:
                    gold.append(docid)
        yield from (Qrel(qid=qid, docid=d, relevance=1) for d in gold)

        meta = {"supporting_facts": rec["supporting_facts"], "evidences": rec.get("evidences", [])}
        meta_json = json.dumps(meta, ensure_ascii=False)
        yield Query(qid=qid, question=question, question_type=qtype, meta=meta_json)
        yield Answer(qid=qid, answer_type="aliases", aliases=[answer])

    if files.get("passages"):
        ppath = Path(files["passages"])
        for i, rec in enumerate(read_json_list(ppath)):
            title = field(rec, "title", str, ppath, f"index {i}")
            text = field(rec, "text", str, ppath, f"index {i}")
            _add(new, seen_docs, title, text)
            yield from new
            new.clear()


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper") -> tuple[bool, str]:
    """Planning-time: gold comes from the question file itself (its context paragraphs, all or
    those named by `supporting_facts` by `relevance`), so (True, "")."""
    return True, ""
