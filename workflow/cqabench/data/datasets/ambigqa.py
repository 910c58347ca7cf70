"""AmbigQA (AmbigNQ light): open questions that admit one answer or several interpretations.

Each record has annotations of type singleAnswer (aliases of one answer) or multipleQAs
(disambiguated question/answer pairs). They are kept as-is in `Answer.annotations` because
F1_ans is defined over the interpretations; `Answer.aliases` pools every alias for metrics
that only need surface forms.

The passage corpus (role "passages") is DPR's psgs_w100.tsv: a header `id<TAB>text<TAB>title`
and CSV-quoted text. A question's *viewed passages* are those whose title is among its
`viewed_doc_titles` (full AmbigQA release), compared case-insensitively because DPR-derived
copies differ in title case. A question without `viewed_doc_titles` has no qrels; a viewed
title with no passage in the corpus is listed in meta (`unmatched_titles`), not an error,
because the 2018 DPR dump lacks some pages annotators viewed.

Gold (`relevance`, config `datasets.ambigqa.relevance`):
- `paper` (default): DEXTER §3.1, the viewed passages "that contain valid answers" are
  relevant (1); the other viewed passages are negatives, written as relevance 0 (judged
  non-relevant: trec_eval, the oracle and the BEIR export count only relevance > 0, so a
  question whose viewed passages hold no answer has no relevant document). A passage contains
  an answer when one of the question's gold aliases (every annotator, every interpretation:
  the pooled `Answer.aliases`), normalized as the answer metrics normalize
  (`cqabench.data.normalize.normalize_answer`: SQuAD's), occurs in the normalized passage text **as
  whole words** (" alias " in " text "). Whole words, not cover-EM's bare substring: a
  100-word passage would otherwise "contain" the answer "1" in "1990" or "no" in "not"; it is
  also how open-domain QA checks a passage for an answer (DPR's has_answer matches tokens).
  Because SQuAD's normalization deletes punctuation ("Theresa May's" -> "theresa mays"), the
  alias and the passage are also compared with punctuation turned into spaces; either form
  matching counts (`contains_answer`).
  (The toolkit's AmbigQADataLoader has no answer check: it marks the first passage of each
  viewed title; docs/fidelity.md.)
- `viewed`: every passage of every viewed article, relevance 1.
"""

from __future__ import annotations

import csv
import json
import re
import string
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import (
    IdDigests,
    Record,
    check_relevance,
    collect,
    field,
    limited,
    ordered_unique,
    read_json_list,
    text_lines,
)
from cqabench.data.normalize import normalize_answer
from cqabench.data.schema import Annotation, Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True, "passages": False}

RELEVANCE: dict[str, str] = {
    "paper": "viewed passages that contain a gold answer (DEXTER §3.1); other viewed passages relevance 0",
    "viewed": "every passage of every article the annotators viewed (viewed_doc_titles)",
}

DPR_HEADER = ["id", "text", "title"]


def _aliases(value: Any, path: Path, qid: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise DataError(path, qid, where, "expected a list of answer strings")
    return value


def _annotations(rec: dict[str, Any], path: Path, qid: str) -> list[Annotation]:
    out: list[Annotation] = []
    for j, ann in enumerate(field(rec, "annotations", list, path, qid)):
        where = f"annotations[{j}]"
        kind = field(ann, "type", str, path, f"{qid} {where}")
        if kind == "singleAnswer":
            items = [{"question": "", "aliases": _aliases(ann.get("answer"), path, qid, f"{where}.answer")}]
        elif kind == "multipleQAs":
            items = []
            for k, pair in enumerate(field(ann, "qaPairs", list, path, f"{qid} {where}")):
                pwhere = f"{where}.qaPairs[{k}]"
                q = field(pair, "question", str, path, f"{qid} {pwhere}")
                items.append({"question": q, "aliases": _aliases(pair.get("answer"), path, qid, f"{pwhere}.answer")})
        else:
            raise DataError(path, qid, f"{where}.type", f"unknown annotation type {kind!r}")
        out.append(Annotation(type=kind, answers=items))
    if not out:
        raise DataError(path, qid, "annotations", "no annotation")
    return out


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, columns) after the checked header; csv errors become DataError."""
    # csv reads the lines decoded one by one (text_lines), so a non-UTF-8 byte names its line.
    lines = (text for _, text in text_lines(path))
    reader = csv.reader(lines, delimiter="\t")
    try:
        header = next(reader, None)
        if header != DPR_HEADER:
            raise DataError(path, "line 1", "header", f"expected {DPR_HEADER}, got {header}")
        for row in reader:
            if row:
                yield reader.line_num, row
    except csv.Error as exc:  # e.g. an unclosed quote swallowing the rest of the file
        raise DataError(path, f"line {reader.line_num}", "-", f"not valid TSV ({exc})") from None


def iter_dpr_passages(path: Path) -> Iterator[Document]:
    """The passages of a psgs_w100.tsv-shaped file, one at a time (21M in DPR's full file); the
    id column is the docid (DPR's own passage ids).

    Ids are checked unique from 8-byte digests (`IdDigests`), not a set of the ids; a repeat is
    therefore reported after the last passage (by a second pass naming it and its line), which
    `prepare` sees before it publishes anything."""
    digests = IdDigests()
    for line, row in _tsv_rows(path):
        if len(row) != 3:
            raise DataError(path, f"line {line}", "-", f"expected 3 tab-separated columns, got {len(row)}")
        pid, text, title = row
        if not pid:
            raise DataError(path, f"line {line}", "id", "empty passage id")
        digests.add(pid)
        yield Document(docid=pid, title=title, text=text)
    candidates = digests.repeated()
    if candidates:
        seen: set[str] = set()
        for line, row in _tsv_rows(path):
            if IdDigests.digest(row[0]) in candidates:
                if row[0] in seen:
                    raise DataError(path, row[0], "id", f"duplicate passage id (line {line})")
                seen.add(row[0])


def _pooled(annotations: list[Annotation]) -> list[str]:
    """Every alias of every annotator and interpretation, first occurrence first."""
    return ordered_unique([alias for a in annotations for item in a.answers for alias in item["aliases"]])


_PUNCT_RUN = re.compile(f"[{re.escape(string.punctuation)}]+")


def _forms(text: str) -> set[str]:
    """`text` normalized as the answer metrics normalize it (SQuAD's `normalize_answer`: the
    punctuation deleted), and once more with the punctuation turned into spaces first, so that
    a possessive ("Theresa May's" -> "theresa mays") or a hyphenated word still shows the words
    the answer is made of ("theresa may s")."""
    return {normalize_answer(text), normalize_answer(_PUNCT_RUN.sub(" ", text))}


def answer_keys(aliases: list[str]) -> list[str]:
    """The aliases as `contains_answer` looks for them: both normal forms (`_forms`), padded
    with spaces (whole words); an alias of only punctuation or articles gives no key."""
    return sorted({f" {n} " for a in aliases for n in _forms(a) if n})


def contains_answer(text: str, keys: list[str]) -> bool:
    """Whether one of `answer_keys(...)` occurs as whole words in a normal form of `text`."""
    padded = [f" {n} " for n in _forms(text)]
    return any(k in t for k in keys for t in padded)


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """The passages as they are read, then each question's qrels, query and answer.

    The questions are read (and checked) first, so that only the titles they viewed are kept
    while the passage file streams by: memory holds the questions and their viewed passage ids
    (with, in mode `paper`, which of the questions viewing it each passage answers), never the
    corpus. `relevance`: RELEVANCE."""
    check_answers = check_relevance("ambigqa", RELEVANCE, relevance) == "paper"
    path = Path(files["questions"])
    raw = read_json_list(path, "questions")
    parsed: list[tuple[str, str, list[Annotation], list[str] | None, dict[str, Any]]] = []
    seen_qids: set[str] = set()
    for i, rec in enumerate(limited(raw, limit)):
        qid = field(rec, "id", str, path, f"index {i}")
        if qid in seen_qids:
            raise DataError(path, qid, "id", "duplicate question id")
        seen_qids.add(qid)
        question = field(rec, "question", str, path, qid)
        annotations = _annotations(rec, path, qid)
        titles = None
        if "viewed_doc_titles" in rec:
            titles = field(rec, "viewed_doc_titles", list, path, qid)
            if not all(isinstance(t, str) for t in titles):
                raise DataError(path, qid, "viewed_doc_titles", "expected a list of strings")
        extra = {key: rec[key] for key in ("nq_answer", "nq_doc_title") if key in rec}
        parsed.append((qid, question, annotations, titles, extra))
    del raw

    viewers: dict[str, list[int]] = {}  # viewed title (casefolded) -> the questions (indexes) that viewed it
    for qi, (*_, titles, _) in enumerate(parsed):
        for t in dict.fromkeys(t.casefold() for t in titles or ()):
            viewers.setdefault(t, []).append(qi)
    keys = [answer_keys(_pooled(annotations)) for _, _, annotations, _, _ in parsed] if check_answers else []
    by_title: dict[str, list[str]] = {}  # viewed title (casefolded) -> its passages, in file order
    answering: dict[str, set[int]] = {}  # (paper) viewed passage -> the viewing questions it answers
    any_passage = False
    if files.get("passages"):
        for doc in iter_dpr_passages(Path(files["passages"])):
            any_passage = True
            key = doc.title.casefold()
            if key in viewers:
                by_title.setdefault(key, []).append(doc.docid)
                if check_answers:
                    hits = {qi for qi in viewers[key] if keys[qi] and contains_answer(doc.text, keys[qi])}
                    if hits:
                        answering.setdefault(doc.docid, set()).update(hits)
            yield doc

    for qi, (qid, question, annotations, titles, extra) in enumerate(parsed):
        meta: dict[str, Any] = {}
        if titles is not None:
            meta["viewed_doc_titles"] = titles
            if any_passage:
                viewed = list(dict.fromkeys(d for t in titles for d in by_title.get(t.casefold(), [])))
                meta["unmatched_titles"] = [t for t in titles if t.casefold() not in by_title]
                for d in viewed:
                    grade = 1 if not check_answers or qi in answering.get(d, ()) else 0
                    yield Qrel(qid=qid, docid=d, relevance=grade)
        meta.update(extra)
        single = all(a.type == "singleAnswer" for a in annotations)
        yield Query(
            qid=qid,
            question=question,
            question_type="single" if single else "multi",
            meta=json.dumps(meta, ensure_ascii=False),
        )
        yield Answer(qid=qid, answer_type="interpretations", aliases=_pooled(annotations), annotations=annotations)


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


_VIEWED = re.compile(r'"viewed_doc_titles"\s*:\s*\[\s*"')


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper", chunk_size: int = 1 << 20) -> tuple[bool, str]:
    """Planning-time: gold passages need the DPR passages (role `passages`) and questions with
        a non-empty `viewed_doc_titles`, which the light release lacks. The question file is read
        in chunks and only until the first non-empty `"viewed_doc_titles": ["` (not parsed as
        JSON, so a malformed file is left for `prepare` to report). A file not there yet will be
        downloaded: (True, ""). Whether the viewed titles match passages (and, in mode `paper`, whether
    a viewed passage holds an answer) is not checked here: `prepare` finds out."""
    if not files.get("passages"):
        return False, "AmbigQA's gold passages need the DPR passages file (role `passages`), which is not configured"
    path = Path(files["questions"]) if files.get("questions") else None
    if path is None or not path.is_file():  # not there yet (or a folder: prepare reports it)
        return True, ""
    tail = ""
    with open(path, encoding="utf-8", errors="replace") as fh:
        while chunk := fh.read(chunk_size):
            window = tail + chunk
            if _VIEWED.search(window):
                return True, ""
            tail = window[-64:]
    return False, (
        f"AmbigQA questions in {path.name} carry no viewed_doc_titles (the light release lacks them), "
        "so no passage is gold"
    )
