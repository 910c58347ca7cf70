"""Table serializations: how a table becomes text is an experiment axis, not a constant.

Every consumer of documents (BEIR export, indexes, prompts) calls `document_text`, so the
serialization chosen in config is the only thing that decides how a table reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

SERIALIZATIONS = ("pipe", "markdown", "linear")


def _clean(cell: object) -> str:
    return " ".join(str(cell).split())


def _verbatim(cell: object) -> str:
    return str(cell)


def _square(
    header: Sequence[str], rows: Sequence[Sequence[str]], cell: Callable[[object], str] = _clean
) -> tuple[list[str], list[list[str]]]:
    """Pad ragged rows (and the header) to one width so every serialization sees a grid.

    `cell` maps each cell to its text: whitespace collapsed (`_clean`, the default: markdown and
    linear put a cell on one line) or kept as it is (`_verbatim`, the toolkit's pipe form)."""
    width = max([len(header)] + [len(r) for r in rows]) if (header or rows) else 0
    head = [cell(c) for c in header] + [""] * (width - len(header))
    body = [[cell(c) for c in r] + [""] * (width - len(r)) for r in rows]
    return head, body


def to_pipe(header: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> str:
    """The original toolkit's form: header row first, rows by newline, cells by '|'.

    Cells are kept verbatim, as the toolkit's `TableEvidence.convert_to_text` joins them
    (`"% (  % ) change"` keeps its two spaces): retrieval does not see the difference (BM25's
    analyzer and word-piece tokenizers split on any whitespace; docs/fidelity.md gives the
    measurement) but a prompt's text does. Ragged rows are still padded to the widest row
    (the toolkit would not pad; no FinQA or TAT-QA table is ragged)."""
    head, body = _square(header, rows, _verbatim)
    return "\n".join("|".join(r) for r in [head, *body])


def to_markdown(header: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> str:
    head, body = _square(header, rows)

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(head), "| " + " | ".join("---" for _ in head) + " |", *map(line, body)])


def to_linear(header: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> str:
    """Row-wise 'column is value' sentences, the table title first.

    An empty header cell (a row label column, as in TAT-QA) contributes its value alone;
    empty values are skipped so padding never turns into 'x is .'.
    """
    head, body = _square(header, rows)
    sentences = [f"{_clean(title)}." if title.strip() else ""]
    for row in body:
        parts = [f"{h} is {v}" if h else v for h, v in zip(head, row) if v]
        if parts:
            sentences.append(", ".join(parts) + ".")
    return " ".join(s for s in sentences if s)


SERIALIZERS: dict[str, Callable[..., str]] = {
    "pipe": to_pipe,
    "markdown": to_markdown,
    "linear": to_linear,
}


def serialize(header: Sequence[str], rows: Sequence[Sequence[str]], serialization: str, title: str = "") -> str:
    try:
        fn = SERIALIZERS[serialization]
    except KeyError:
        raise ValueError(f"unknown table serialization {serialization!r}; valid: {', '.join(SERIALIZATIONS)}") from None
    return fn(header, rows, title=title)


def document_text(doc: dict, serialization: str) -> str:
    """The text of a canonical corpus row as retrievers and prompts see it.

    Text passages are returned as they are; a table or infobox is serialized, with any
    surrounding text (`text` column) kept before it.
    """
    if doc.get("kind", "text") == "text":
        return doc["text"]
    table = serialize(doc["table_header"], doc["table_rows"], serialization, title=doc.get("title", ""))
    context = (doc.get("text") or "").strip()
    return f"{context}\n{table}" if context else table
