"""The canonical data form every stage after `prepare` reads.

One dataset split is four tables (queries, corpus, qrels, answers). They are kept as
Arrow schemas so that pandas, polars and DuckDB read them without custom code, and as
dataclasses so loaders stay plain Python. Later stages rely on these names only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

DOC_KINDS = ("text", "table", "infobox")
ANSWER_TYPES = ("aliases", "boolean", "number", "interpretations", "table")

_STRINGS = pa.list_(pa.string())
_ROWS = pa.list_(pa.list_(pa.string()))

QUERY_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("question", pa.string()),
        # What a dataset carries beyond the question; empty where it does not apply.
        ("question_type", pa.string()),  # 2Wiki type, MuSiQue hop count, TANQ type, AmbigQA single/multi
        ("decomposition", _STRINGS),  # StrategyQA / MuSiQue gold sub-questions
        ("facts", _STRINGS),  # StrategyQA facts
        ("skills", _STRINGS),  # TANQ skills
        # StrategyQA: per annotator, per step, the evidence paragraph ids named there.
        ("evidence", pa.list_(pa.list_(_STRINGS))),
        ("meta", pa.string()),  # JSON object of any other raw field worth keeping
    ]
)

CORPUS_SCHEMA = pa.schema(
    [
        ("docid", pa.string()),
        ("title", pa.string()),
        ("text", pa.string()),  # passage text; for tables: surrounding text (intro, section)
        ("kind", pa.string()),  # one of DOC_KINDS
        ("table_header", _STRINGS),  # tables/infoboxes only
        ("table_rows", _ROWS),
    ]
)

QREL_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("docid", pa.string()),
        ("relevance", pa.int32()),
        ("annotator", pa.string()),  # "" where the dataset has a single gold set
    ]
)

_ANSWER_ITEM = pa.struct([("question", pa.string()), ("aliases", _STRINGS)])
_ANNOTATION = pa.struct([("type", pa.string()), ("answers", pa.list_(_ANSWER_ITEM))])

ANSWER_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("answer_type", pa.string()),  # one of ANSWER_TYPES
        ("aliases", _STRINGS),  # every answer has its surface forms here (table: empty)
        ("boolean", pa.bool_()),
        ("number", pa.float64()),
        ("scale", pa.string()),  # TAT-QA: "", thousand, million, billion, percent
        ("numeric_type", pa.string()),  # TAT-QA answer_type; FinQA "program"
        ("program", pa.string()),  # FinQA program / TAT-QA derivation
        ("annotations", pa.list_(_ANNOTATION)),  # AmbigQA interpretations
        ("table_header", _STRINGS),  # TANQ answer table
        ("table_rows", _ROWS),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "queries": QUERY_SCHEMA,
    "corpus": CORPUS_SCHEMA,
    "qrels": QREL_SCHEMA,
    "answers": ANSWER_SCHEMA,
}


@dataclass
class Query:
    qid: str
    question: str
    question_type: str = ""
    decomposition: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    evidence: list[list[list[str]]] = field(default_factory=list)
    meta: str = "{}"


@dataclass
class Document:
    docid: str
    title: str
    text: str
    kind: str = "text"
    table_header: list[str] = field(default_factory=list)
    table_rows: list[list[str]] = field(default_factory=list)


@dataclass
class Qrel:
    qid: str
    docid: str
    relevance: int = 1
    annotator: str = ""


@dataclass
class Annotation:
    """One AmbigQA interpretation set: singleAnswer has one item, multipleQAs one per pair."""

    type: str
    answers: list[dict[str, Any]]  # {"question": str, "aliases": list[str]}


@dataclass
class Answer:
    qid: str
    answer_type: str
    aliases: list[str] = field(default_factory=list)
    boolean: bool | None = None
    number: float | None = None
    scale: str = ""
    numeric_type: str = ""
    program: str = ""
    annotations: list[Annotation] = field(default_factory=list)
    table_header: list[str] = field(default_factory=list)
    table_rows: list[list[str]] = field(default_factory=list)


@dataclass
class CanonicalData:
    """What one loader returns for one (dataset, split)."""

    queries: list[Query] = field(default_factory=list)
    corpus: list[Document] = field(default_factory=list)
    qrels: list[Qrel] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)

    def tables(self) -> dict[str, pa.Table]:
        """Arrow tables in the canonical schemas, ready to write."""
        rows: dict[str, list[Any]] = {
            "queries": self.queries,
            "corpus": self.corpus,
            "qrels": self.qrels,
            "answers": self.answers,
        }
        return {
            name: pa.Table.from_pylist([asdict(r) for r in records], schema=SCHEMAS[name])
            for name, records in rows.items()
        }
