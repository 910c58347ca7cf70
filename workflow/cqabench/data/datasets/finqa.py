"""FinQA: numerical reasoning over one earnings-report page (a table and its sentences).

The corpus and the gold follow `relevance` (config `datasets.finqa.relevance`):

`paper` (default): the original toolkit's FinQADataLoader, which produced DEXTER's Table 1
corpus (24.8k documents for 8,281 questions, about three per question). Per question id:
- `<id>.table`: a table document, header = the first row of `table`, the rest its rows;
- `<id>.pre`: one text document, `"".join(pre_text)`, the sentences joined with **no**
  separator as the toolkit joins them ("...diners club .with the exception...");
- `<id>.post`: likewise `"".join(post_text)`.
All three are relevant (1), in the toolkit's order (table, pre, post; the oracle shows them in
that order). Titles are empty. Two questions on one page get two copies of it, as in the
toolkit. One departure: a joined pre_text or post_text that is empty or blank gets no document
(and no qrel), because every retriever refuses a document whose title and text are both empty
(`cqabench.data.documents.iter_documents`); the toolkit kept it, an unfindable relevant document. The
question's meta lists such parts (`empty_parts`); none of the 200 dev records checked has one.

`gold_inds`: per report page (`filename`), shared by every question on that page:
- one table document, docid f"{filename}#table";
- one text document per sentence, docid f"{filename}#text_{i}", i indexing pre_text followed
  by post_text, as FinQA's own `gold_inds` keys do ("text_43"). Every sentence is kept, even
  the lone "." lines of some pages, so that index i is always FinQA's i.
A page met again must carry the same table and sentences; a difference is reported rather
than merged. Gold: the table if any `gold_inds` key is "table_<row>" (FinQA marks rows; the
corpus has one table document), and each "text_<i>" sentence.

In both modes the cells come from `table`, FinQA's lower-cased, tokenized form ("$ 2457"),
not `table_ori` ("$2,457", with stray HTML such as "<sup>(1)</sup>"): the sentences, the gold
facts, the programs' arguments and the toolkit's corpus all use the tokenized form.

Answers: a numeric `exe_ans` -> answer_type "number", number = exe_ans, aliases = [answer],
program = qa.program, numeric_type "program"; scale "percent" when the answer string ends in
"%". Note FinQA's exe_ans for a percent answer is usually the fraction (0.052 for "5.2%") and
sometimes already x100 (programs ending in multiply(#, const_100)): number keeps exe_ans as
released; the answer string shows the intended reading. A "yes"/"no" exe_ans ->
answer_type "aliases", aliases = ["yes"] / ["no"], numeric_type "yes/no" (FinQA compares these
as words; `boolean` is also filled).

One split per file: the loader reads exactly the file configured for the split. (DEXTER used
different FinQA splits in different stages; here the config decides once.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import (
    Record,
    check_relevance,
    collect,
    field,
    finite,
    limited,
    read_json_list,
)
from cqabench.data.datasets.tatqa import header_and_rows
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query

RAW_FILES: dict[str, bool] = {"questions": True}
RELEVANCE: dict[str, str] = {
    "paper": "the toolkit's three documents per question (<id>.table, <id>.pre, <id>.post), all relevant",
    "gold_inds": "one table and one document per sentence per report page; relevant = qa.gold_inds",
}


def _sentences(rec: dict[str, Any], path: Path, qid: str) -> list[str]:
    out: list[str] = []
    for key in ("pre_text", "post_text"):
        for j, s in enumerate(field(rec, key, list, path, qid)):
            if not isinstance(s, str):
                raise DataError(path, qid, f"{key}[{j}]", f"expected str, got {type(s).__name__}")
            out.append(s)
    return out


def _answer(qa: dict[str, Any], path: Path, qid: str) -> Answer:
    answer = field(qa, "answer", (str, int, float), path, f"{qid} qa")
    answer = str(answer)
    program = qa.get("program", "") or ""
    if not isinstance(program, str):
        raise DataError(path, qid, "qa.program", f"expected str, got {type(program).__name__}")
    exe = field(qa, "exe_ans", (int, float, str), path, f"{qid} qa")
    if isinstance(exe, bool):
        raise DataError(path, f"{qid} qa", "exe_ans", "expected a number or yes/no, got bool")
    if isinstance(exe, str):
        word = exe.strip().lower()
        if word in ("yes", "no"):
            return Answer(
                qid=qid,
                answer_type="aliases",
                aliases=[word],
                boolean=word == "yes",
                numeric_type="yes/no",
                program=program,
            )
        try:
            exe = float(exe.replace(",", ""))
        except ValueError:
            raise DataError(path, qid, "qa.exe_ans", f"neither a number nor yes/no: {exe!r}") from None
    number = finite(float(exe), path, qid, "qa.exe_ans")
    aliases = [answer] if answer.strip() else [f"{number:g}"]
    scale = "percent" if answer.strip().endswith("%") else ""
    return Answer(
        qid=qid,
        answer_type="number",
        aliases=aliases,
        number=number,
        scale=scale,
        numeric_type="program",
        program=program,
    )


def _gold(qa: dict[str, Any], filename: str, n_sentences: int, path: Path, qid: str) -> list[str]:
    gold: list[str] = []
    inds = field(qa, "gold_inds", dict, path, f"{qid} qa")
    for key in inds:
        kind, _, num = key.partition("_")
        if kind not in ("table", "text") or not num.isdigit():
            raise DataError(path, qid, "qa.gold_inds", f"key {key!r} is neither table_<i> nor text_<i>")
        if kind == "text" and int(num) >= n_sentences:
            raise DataError(
                path,
                qid,
                "qa.gold_inds",
                f"{key!r} names sentence {num}, but the page has {n_sentences} (pre_text + post_text)",
            )
        docid = f"{filename}#table" if kind == "table" else f"{filename}#text_{int(num)}"
        if docid not in gold:
            gold.append(docid)
    return gold


def _toolkit_documents(
    rec: dict[str, Any], qid: str, header: list[str], rows: list[list[str]]
) -> tuple[list[Document], list[str]]:
    """Mode `paper`: the question's table, pre and post documents (toolkit order), and the
    names of the parts left out because their joined text is blank (see the module docstring)."""
    docs = [Document(docid=f"{qid}.table", title="", text="", kind="table", table_header=header, table_rows=rows)]
    empty: list[str] = []
    for key, part in (("pre_text", "pre"), ("post_text", "post")):
        text = "".join(rec[key])  # checked a list of strings by _sentences
        if text.strip():
            docs.append(Document(docid=f"{qid}.{part}", title="", text=text))
        else:
            empty.append(part)
    return docs, empty


def records(
    files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper"
) -> Iterator[Record]:
    """Each record's documents (mode `gold_inds`: its page's, the first time the page is met),
    qrels, answer and query. `relevance`: RELEVANCE."""
    toolkit = check_relevance("finqa", RELEVANCE, relevance) == "paper"
    path = Path(files["questions"])
    records = read_json_list(path, "records")
    pages: dict[str, tuple[list[str], list[list[str]], list[str]]] = {}
    seen: set[str] = set()
    for i, rec in enumerate(limited(records, limit)):
        qid = field(rec, "id", str, path, f"index {i}")
        if qid in seen:
            raise DataError(path, qid, "id", "duplicate question id")
        seen.add(qid)
        filename = field(rec, "filename", str, path, qid)
        header, rows = header_and_rows(field(rec, "table", list, path, qid), path, qid, "table")
        sentences = _sentences(rec, path, qid)
        qa = field(rec, "qa", dict, path, qid)
        page_gold = _gold(qa, filename, len(sentences), path, qid)  # checked in either mode
        meta: dict[str, Any] = {"filename": filename}
        if toolkit:
            docs, empty = _toolkit_documents(rec, qid, header, rows)
            yield from docs
            gold = [d.docid for d in docs]
            if empty:
                meta["empty_parts"] = empty
        else:
            page = (header, rows, sentences)
            if filename not in pages:
                pages[filename] = page
                yield Document(
                    docid=f"{filename}#table", title="", text="", kind="table", table_header=header, table_rows=rows
                )
                yield from (Document(docid=f"{filename}#text_{k}", title="", text=s) for k, s in enumerate(sentences))
            elif pages[filename] != page:
                raise DataError(
                    path,
                    qid,
                    "table/pre_text/post_text",
                    f"page {filename!r} differs from an earlier question's copy of it",
                )
            gold = page_gold
        yield from (Qrel(qid=qid, docid=d, relevance=1) for d in gold)
        yield _answer(qa, path, qid)
        meta["gold_inds"] = sorted(qa["gold_inds"])
        yield Query(
            qid=qid, question=field(qa, "question", str, path, f"{qid} qa"), meta=json.dumps(meta, ensure_ascii=False)
        )


def load(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str = "paper") -> CanonicalData:
    return collect(records(files, split, limit, relevance))


def gold_evidence(files: Mapping[str, Path], relevance: str = "paper") -> tuple[bool, str]:
    """Planning-time: gold comes from the question file itself (mode `paper`: each question's
    own documents; `gold_inds`: its `qa.gold_inds`), so (True, "")."""
    return True, ""
