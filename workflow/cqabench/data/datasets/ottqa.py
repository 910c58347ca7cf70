"""OTT-QA: open questions answered from a Wikipedia table plus the pages its cells link to.

Corpus = every table of the tables file plus every passage of the passages file, whatever
the question limit: they are the retrieval pool, not per-question contexts.
- table: docid = table_id, title = the table's `title` (the page title), as the toolkit's
  OTTQADataLoader titles it (`table['title']`), header and rows = the cell texts (the hyperlinks
  are dropped), text = "" — the page intro is not attached, so a table document is the table
  alone, as in DEXTER. Mode `section_titles` titles it page title + " - " + section title
  instead (the section title, e.g. "Players -- Bracelets", says which of a page's tables this
  is; cqabench's title before issue 34). Titles are indexed and prepended, so the mode moves
  retrieval (docs/fidelity.md gives the measured effect).
- passage: docid = the "/wiki/Title" key, title = that key without "/wiki/", URL-unquoted,
  underscores as spaces.

Gold (relevance 1) = the question's table, plus, in `dev.traced.json`, each passage named by
an `answer-node` of type "passage". The plain `dev.json` has no answer nodes: gold is then the
table only. Answer = the single `answer-text` (answer_type "aliases").
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import (
    Record,
    check_relevance,
    collect,
    field,
    iter_json_object,
    limited,
    read_json_list,
)
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True, "tables": True, "passages": True}
RELEVANCE: dict[str, str] = {
    "paper": "the question's table plus the passages its traced answer nodes name; a table titled by its "
    "page title, as the toolkit's loader",
    "section_titles": "the same qrels; a table titled '<page title> - <section title>'",
}


def passage_title(key: str) -> str:
    """'/wiki/Cartier_Field' -> 'Cartier Field'."""
    name = key[len("/wiki/") :] if key.startswith("/wiki/") else key
    return unquote(name).replace("_", " ")


def _cell_text(cell: Any, path: Path, rec: str, name: str) -> str:
    """A cell is [text, [links]] (traindev_tables_tok) or plain text (the open-domain corpus's
    all_plain_tables.json); only the text is kept."""
    if isinstance(cell, str):
        return cell
    if not isinstance(cell, list) or not cell or not isinstance(cell[0], str):
        raise DataError(path, rec, name, "expected a cell: text, or [text, [links]]")
    return cell[0]


def _table_doc(table_id: str, table: Any, path: Path, with_section: bool = False) -> Document:
    """One table document; `with_section`: its title names the section too (mode `section_titles`)."""
    title = field(table, "title", str, path, table_id)
    section = table.get("section_title", "") or ""
    if not isinstance(section, str):
        raise DataError(path, table_id, "section_title", f"expected str, got {type(section).__name__}")
    raw_header = field(table, "header", list, path, table_id)
    raw_rows = field(table, "data", list, path, table_id)
    header = [_cell_text(c, path, table_id, f"header[{j}]") for j, c in enumerate(raw_header)]
    rows = []
    for i, row in enumerate(raw_rows):
        if not isinstance(row, list):
            raise DataError(path, table_id, f"data[{i}]", f"expected a list of cells, got {type(row).__name__}")
        rows.append([_cell_text(c, path, table_id, f"data[{i}][{j}]") for j, c in enumerate(row)])
    if not header:
        raise DataError(path, table_id, "header", "empty table: no header")
    if not rows:
        raise DataError(path, table_id, "data", "empty table: no rows")
    full_title = f"{title} - {section}" if with_section and section.strip() else title
    return Document(docid=table_id, title=full_title, text="", kind="table", table_header=header, table_rows=rows)


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """The tables, then the passages, as their files are read (common.iter_json_object: the
    open-domain release has 400k tables and 6M passages), then each question's qrels, answer and
    query. The questions are read and checked first, so only the ids they name are remembered;
    a named table or passage the files lack is reported after they were read."""
    with_section = check_relevance("ottqa", RELEVANCE, relevance) == "section_titles"
    qpath, tpath, ppath = (Path(files[r]) for r in ("questions", "tables", "passages"))
    questions = read_json_list(qpath, "questions")
    parsed: list[tuple[str, str, list[tuple[int, str]], Answer, Query]] = []  # qid, table id, passage nodes, ...
    seen: set[str] = set()
    for i, rec in enumerate(limited(questions, limit)):
        qid = field(rec, "question_id", str, qpath, f"index {i}")
        if qid in seen:
            raise DataError(qpath, qid, "question_id", "duplicate question id")
        seen.add(qid)
        table_id = field(rec, "table_id", str, qpath, qid)
        links: list[tuple[int, str]] = []  # (answer-node index, passage key)
        nodes = field(rec, "answer-node", list, qpath, qid) if "answer-node" in rec else []
        for j, node in enumerate(nodes):
            if not (isinstance(node, list) and len(node) == 4 and node[3] in ("table", "passage")):
                raise DataError(qpath, qid, f"answer-node[{j}]", "expected [text, [row, col], link, 'table'|'passage']")
            if node[3] != "passage":
                continue  # the answer is a cell of the gold table itself
            link = node[2]
            if not isinstance(link, str):
                raise DataError(qpath, qid, f"answer-node[{j}]", f"passage node without a link ({link!r})")
            links.append((j, link))
        answer = field(rec, "answer-text", str, qpath, qid)
        query = Query(
            qid=qid,
            question=field(rec, "question", str, qpath, qid),
            meta=json.dumps({"table_id": table_id}, ensure_ascii=False),
        )
        parsed.append((qid, table_id, links, Answer(qid=qid, answer_type="aliases", aliases=[answer]), query))
    del questions

    wanted_tables = {table_id for _, table_id, *_ in parsed}
    wanted_passages = {link for _, _, links, *_ in parsed for _j, link in links}
    found_tables: set[str] = set()
    found_passages: set[str] = set()
    for _line, tid, table in iter_json_object(tpath, "tables {table_id: table}"):
        if tid in wanted_tables:
            found_tables.add(tid)
        yield _table_doc(tid, table, tpath, with_section)
    for _line, key, text in iter_json_object(ppath, "passages {'/wiki/Title': text}"):
        if not isinstance(text, str):
            raise DataError(ppath, key, "-", f"passage text: expected str, got {type(text).__name__}")
        if key in wanted_passages:
            found_passages.add(key)
        yield Document(docid=key, title=passage_title(key), text=text)

    for qid, table_id, links, answer, query in parsed:
        if table_id not in found_tables:
            raise DataError(qpath, qid, "table_id", f"table {table_id!r} is not in {tpath}")
        gold = [table_id]
        for j, link in links:
            if link not in found_passages:
                raise DataError(qpath, qid, f"answer-node[{j}]", f"passage {link!r} is not in {ppath}")
            if link not in gold:
                gold.append(link)
        yield from (Qrel(qid=qid, docid=d, relevance=1) for d in gold)
        yield answer
        yield query


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper") -> tuple[bool, str]:
    """Planning-time: gold comes from the question file itself (each question's `table_id` (and traced answer nodes)), so (True, "")."""
    return True, ""
