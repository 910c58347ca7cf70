"""StrategyQA: yes/no questions whose reasoning steps were annotated with evidence paragraphs.

`evidence` holds, per annotator, per decomposition step, a list of items; an item is either
a list of paragraph ids ("Title-N") or the marker "operation" / "no_evidence". The canonical
`Query.evidence` keeps the per-annotator, per-step structure with the markers turned into
empty lists, because StrategyQA Recall@10 is defined per annotator over those steps.

The ids only resolve to text through the official `strategyqa_train_paragraphs.json`
(role "paragraphs"). Without it the corpus and qrels are empty: answer metrics work, but
retrieval Recall cannot be computed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cqabench.datasets.common import (
    field,
    limited,
    read_json,
    read_json_list,
    read_jsonl,
)
from cqabench.errors import DataError
from cqabench.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True, "paragraphs": False, "decompositions": False}

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


def _paragraphs(path: Path) -> list[Document]:
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise DataError(path, None, "-", f"expected an object of paragraphs by id, got {type(raw).__name__}")
    docs = []
    for pid, par in raw.items():
        title = field(par, "title", str, path, pid)
        content = field(par, "content", str, path, pid)
        docs.append(Document(docid=pid, title=title, text=content))
    return docs


def _predicted(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for lineno, rec in read_jsonl(path):
        qid = field(rec, "qid", str, path, f"line {lineno}")
        steps = field(rec, "decomposition", list, path, qid)
        if not all(isinstance(s, str) for s in steps):
            raise DataError(path, qid, "decomposition", "expected a list of strings")
        out[qid] = steps
    return out


def load(files: Mapping[str, Path], split: str, limit: int | None = None) -> CanonicalData:
    path = Path(files["questions"])
    raw = read_json_list(path, "questions")
    records = limited(raw, limit)

    data = CanonicalData()
    known: set[str] | None = None
    ppath = Path(files["paragraphs"]) if files.get("paragraphs") else None
    if ppath is not None:
        data.corpus = _paragraphs(ppath)
        known = {d.docid for d in data.corpus}
    dpath = Path(files["decompositions"]) if files.get("decompositions") else None
    predicted = _predicted(dpath) if dpath is not None else {}

    seen_qids: set[str] = set()
    for i, rec in enumerate(records):
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

        if known is not None:
            for a, steps in enumerate(evidence):
                pids = list(dict.fromkeys(p for step in steps for p in step))
                for pid in pids:
                    if pid not in known:
                        raise DataError(
                            path, qid, "evidence", f"paragraph id {pid!r} (annotator {a}) is absent from {ppath}"
                        )
                    data.qrels.append(Qrel(qid=qid, docid=pid, relevance=1, annotator=str(a)))

        data.queries.append(
            Query(
                qid=qid,
                question=question,
                decomposition=_strings(rec, "decomposition", path, qid),
                facts=_strings(rec, "facts", path, qid),
                evidence=evidence,
                meta=json.dumps(meta, ensure_ascii=False),
            )
        )
        data.answers.append(
            Answer(qid=qid, answer_type="boolean", boolean=answer, aliases=["yes" if answer else "no"])
        )
    return data


def gold_evidence(files: Mapping[str, Path]) -> tuple[bool, str]:
    """Planning-time: the evidence ids resolve to documents (qrels) only through the paragraph
    file; without the role `load` writes no corpus and no qrels. A configured paragraph file
    that is not there yet will be downloaded, so it counts."""
    if not files.get("paragraphs"):
        return False, ("StrategyQA's gold paragraphs resolve only with the `paragraphs` file "
                       "(strategyqa_train_paragraphs.json), which is not configured for this split")
    return True, ""
