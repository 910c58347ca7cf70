"""TANQ: open questions whose answer is a table built from several Wikipedia pages.

Query: qid = init_qid; question = ext_question_rephrased (the field TANQ says to use), else
question, else ext_question; question_type = the record's `question_type`, else the middle
part of init_qid ("384__wikidata_intersection__test" -> "wikidata_intersection"); skills
when the record has them. Answer: answer_type "table", the pipe-separated `answer_table`
split into header (first line) and rows; a row whose width differs from the header's is an
error, since TANQ's RMS metric pairs cells by column.

Corpus and gold come from the proofs of the full release (README of google-deepmind/tanq):
each answer's `init_answer_proof` items ({proof_text, found_in_url}, QAMPARI's, no section)
and every `extension_answer[*].proof` item, typed by `proof_type`:
- text -> kind "text", text = the proof's text;
- table -> kind "table", rows of cell_value, first row as header, caption as text;
- infobox -> kind "infobox", header [key], one row [value].
Title = where the proof sits, as retrievers and prompts show it before the document:
the page title taken from found_in_url, then parent_section and section when present,
joined by " - " as OTT-QA titles its tables ("X (director) - Career - Films"); a
parent_section equal to the section is not repeated.
Docids do not depend on the title, so adding the sections changed none:
- text: common.text_docid(page title, text), the id every other Wikipedia passage gets, so a
  paragraph shared with another dataset is one document. The same paragraph can be cited
  under two titles (an init_answer_proof has no section, an extension proof has one); the
  document keeps the most specific title (the most parts, then the alphabetically first), so
  its title does not depend on which question cited it first;
- table / infobox: "tanq-" + a hash of (kind, page URL, section, index, cells),
so the same proof cited by two questions is one document. Every proof is gold (relevance 1),
whatever its `eval_result` and its answer's `filter_pass`.
Records without answer_list (the 10-question sample) add no documents and no qrels.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import Record, check_relevance, collect, field, read_jsonl, text_docid
from cqabench.data.datasets.tatqa import header_and_rows
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True}
RELEVANCE: dict[str, str] = {
    "paper": "every proof (text, table, infobox) of the question's answer cells",
}

_META_KEYS = ("init_question", "ext_question", "ext_question_cleaned", "question_properties", "extended_types")


def parse_answer_table(text: str, path: Path, qid: str) -> tuple[list[str], list[list[str]]]:
    """'h1|h2\\nv1|v2\\n' -> (['h1', 'h2'], [['v1', 'v2']]); blank lines are skipped."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise DataError(path, qid, "answer_table", "empty table: no header")
    grid = [[cell.strip() for cell in line.split("|")] for line in lines]
    for n, row in enumerate(grid[1:], start=2):
        if len(row) != len(grid[0]):
            raise DataError(path, qid, "answer_table", f"line {n} has {len(row)} cells, the header has {len(grid[0])}")
    return header_and_rows(grid, path, qid, "answer_table")


def page_title(url: str) -> str:
    """'https://en.wikipedia.org/wiki/Spaceballs' -> 'Spaceballs' (also '.../index.php?title=Spaceballs');
    a '#fragment' is not part of the title."""
    parsed = urlparse(url)
    tail = parsed.path.rsplit("/", 1)[-1]
    if tail == "index.php":
        tail = (parse_qs(parsed.query).get("title") or [""])[0]
    return unquote(tail).replace("_", " ")


def _hash_id(*parts: Any) -> str:
    digest = hashlib.sha1(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"tanq-{digest[:16]}"


def _str(proof: dict[str, Any], key: str, path: Path, rec: str) -> str:
    """An optional string attribute of a proof ("" when absent or null)."""
    value = proof.get(key) or ""
    if not isinstance(value, str):
        raise DataError(path, rec, key, f"expected str, got {type(value).__name__}")
    return value


def _title_parts(page: str, parent_section: str = "", section: str = "") -> list[str]:
    parent = parent_section.strip() if parent_section.strip() != section.strip() else ""
    return [p for p in (page.strip(), parent, section.strip()) if p]


def proof_title(page: str, parent_section: str = "", section: str = "") -> str:
    """('X', 'Career', 'Films') -> 'X - Career - Films'; empty parts and a repeated parent are left out."""
    return " - ".join(_title_parts(page, parent_section, section))


def _title_key(proof: dict[str, Any], title: str) -> tuple[int, str]:
    """Of two titles of one document the smaller key is kept: more parts first, then alphabetical."""
    page = page_title(proof.get("found_in_url") or "")
    parts = _title_parts(page, proof.get("parent_section") or "", proof.get("section") or "")
    return (-len(parts), title)


def _proof_doc(proof: Any, path: Path, rec: str) -> Document:
    if not isinstance(proof, dict):
        raise DataError(path, rec, "-", f"proof: expected an object, got {type(proof).__name__}")
    kind = proof.get("proof_type", "text" if "proof_text" in proof else None)
    url = _str(proof, "found_in_url", path, rec)
    page = page_title(url) if url else ""
    section = _str(proof, "section", path, rec)
    title = proof_title(page, _str(proof, "parent_section", path, rec), section)
    index = proof.get("index")
    if kind == "text":
        text = field(proof, "proof_text" if "proof_text" in proof else "text", str, path, rec)
        return Document(docid=text_docid(page, text), title=title, text=text, kind="text")
    if kind == "table":
        grid = []
        for i, row in enumerate(field(proof, "rows", list, path, rec)):
            cells = field(row, "cells", list, path, f"{rec} rows[{i}]")
            grid.append([field(c, "cell_value", str, path, f"{rec} rows[{i}].cells[{j}]") for j, c in enumerate(cells)])
        header, rows = header_and_rows(grid, path, rec, "rows")
        caption = _str(proof, "caption", path, rec)
        return Document(
            docid=_hash_id("table", url, section, index, grid),
            title=title,
            text=caption,
            kind="table",
            table_header=header,
            table_rows=rows,
        )
    if kind == "infobox":
        key = field(proof, "key", str, path, rec)
        value = field(proof, "value", str, path, rec)
        if not key.strip():
            raise DataError(path, rec, "key", "empty table: infobox proof without a key")
        return Document(
            docid=_hash_id("infobox", url, section, index, key, value),
            title=title,
            text="",
            kind="infobox",
            table_header=[key],
            table_rows=[[value]],
        )
    raise DataError(path, rec, "proof_type", f"unknown proof type {kind!r}; valid: text, table, infobox")


def _proofs(rec: dict[str, Any], path: Path, qid: str) -> list[tuple[str, Any]]:
    """(where, proof) for every proof of every answer row, in file order."""
    out: list[tuple[str, Any]] = []
    if "answer_list" not in rec:
        return out
    for i, ans in enumerate(field(rec, "answer_list", list, path, qid)):
        where = f"{qid} answer_list[{i}]"
        if not isinstance(ans, dict):
            raise DataError(path, where, "-", f"expected an object, got {type(ans).__name__}")
        if ans.get("init_answer_proof") is not None:
            for j, p in enumerate(field(ans, "init_answer_proof", list, path, where)):
                out.append((f"{where}.init_answer_proof[{j}]", p))
        if ans.get("extension_answer") is not None:
            for j, ext in enumerate(field(ans, "extension_answer", list, path, where)):
                ewhere = f"{where}.extension_answer[{j}]"
                if not isinstance(ext, dict):
                    raise DataError(path, ewhere, "-", f"expected an object, got {type(ext).__name__}")
                if ext.get("proof") is not None:
                    for k, p in enumerate(field(ext, "proof", list, path, ewhere)):
                        out.append((f"{ewhere}.proof[{k}]", p))
    return out


def _question(rec: dict[str, Any], path: Path, qid: str) -> str:
    for key in ("ext_question_rephrased", "question", "ext_question"):
        if key in rec:
            return field(rec, key, str, path, qid)
    raise DataError(path, qid, "ext_question_rephrased", "missing (nor question / ext_question)")


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """Each question's qrels, answer and query as read; the proof documents after the last line,
    since a later question can give an earlier document a more specific title (the corpus is
    the proofs of the question file, which is read line by line)."""
    check_relevance("tanq", RELEVANCE, relevance)  # one mode only
    path = Path(files["questions"])
    corpus: list[Document] = []
    docs: dict[str, tuple[int, tuple[int, str]]] = {}  # docid -> (position in corpus, title key)
    seen_qids: set[str] = set()
    for lineno, rec in islice(read_jsonl(path), limit):
        qid = field(rec, "init_qid", str, path, f"line {lineno}")
        if qid in seen_qids:
            raise DataError(path, qid, "init_qid", "duplicate question id")
        seen_qids.add(qid)
        if "question_type" in rec:
            qtype = field(rec, "question_type", str, path, qid)
        else:
            parts = qid.split("__")
            qtype = parts[1] if len(parts) == 3 else ""
        skills = field(rec, "skills", list, path, qid) if "skills" in rec else []
        if not all(isinstance(s, str) for s in skills):
            raise DataError(path, qid, "skills", "expected a list of strings")
        header, rows = parse_answer_table(field(rec, "answer_table", str, path, qid), path, qid)

        gold: list[str] = []
        for where, proof in _proofs(rec, path, qid):
            doc = _proof_doc(proof, path, where)
            key = _title_key(proof, doc.title)
            if doc.docid not in docs:
                docs[doc.docid] = (len(corpus), key)
                corpus.append(doc)
            elif key < docs[doc.docid][1]:
                pos = docs[doc.docid][0]
                corpus[pos].title = doc.title
                docs[doc.docid] = (pos, key)
            if doc.docid not in gold:
                gold.append(doc.docid)
        yield from (Qrel(qid=qid, docid=d, relevance=1) for d in gold)
        yield Answer(qid=qid, answer_type="table", table_header=header, table_rows=rows)
        yield (
            Query(
                qid=qid,
                question=_question(rec, path, qid),
                question_type=qtype,
                skills=list(skills),
                meta=json.dumps({k: rec[k] for k in _META_KEYS if k in rec}, ensure_ascii=False),
            )
        )
    yield from corpus


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


def _has_proof(rec: Any) -> bool:
    """Some answer of the record has a non-empty init_answer_proof or extension proof list."""
    answers = rec.get("answer_list") if isinstance(rec, dict) else None
    for ans in answers if isinstance(answers, list) else []:
        if not isinstance(ans, dict):
            continue
        if isinstance(ans.get("init_answer_proof"), list) and ans["init_answer_proof"]:
            return True
        exts = ans.get("extension_answer")
        for ext in exts if isinstance(exts, list) else []:
            if isinstance(ext, dict) and isinstance(ext.get("proof"), list) and ext["proof"]:
                return True
    return False


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper") -> tuple[bool, str]:
    """Planning-time: some record has an answer_list with proofs. Reads line by line and stops
    at the first such record (the first line of the full release); lines that do not parse are
    skipped here and left for `prepare` to report. A file not there yet will be downloaded
    (the full release has proofs): (True, "")."""
    path = Path(files["questions"]) if files.get("questions") else None
    if path is None or not path.is_file():  # not there yet (or a folder: prepare reports it)
        return True, ""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if '"answer_list"' not in line:  # cheap: no JSON parse for the sample's lines
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if _has_proof(rec):
                return True, ""
    return False, (
        f"the TANQ sample's questions carry no proofs (answer_list) in {path.name}; "
        "the full release (dev.jsonl / test.jsonl) has them"
    )
