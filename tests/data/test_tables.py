"""The three table serializations on real tables, as the corpus documents carry them.

Expected strings were written by reading the raw tables (not by running the serializers):
(a) the first TAT-QA dev table (relevance mode `rows`: its raw orientation; mode `paper`'s
transposed table in `TAT_PIPE_PAPER`), (b) the FinQA dev table (tokenized `table` field),
(c) the OTT-QA dev table 1953–54_Scottish_Cup_5 (8 rows x 3 columns).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from cqabench.data.datasets import finqa, ottqa, tatqa
from cqabench.data.tables import document_text, serialize

RAW = Path(__file__).resolve().parents[2] / "resources" / "raw"  # the bundled sample (resources/README.md)


@pytest.fixture(scope="module")
def tat_doc() -> dict:
    data = tatqa.load({"questions": RAW / "tatqa" / "tatqa_dataset_dev.sample.json"}, "dev", limit=1, relevance="rows")
    return asdict(data.corpus[0])


@pytest.fixture(scope="module")
def tat_paper_doc() -> dict:
    data = tatqa.load({"questions": RAW / "tatqa" / "tatqa_dataset_dev.sample.json"}, "dev", limit=1)
    return asdict(data.corpus[0])


@pytest.fixture(scope="module")
def fin_doc() -> dict:
    data = finqa.load({"questions": RAW / "finqa" / "dev.json"}, "dev")
    return asdict(data.corpus[0])


@pytest.fixture(scope="module")
def ott_doc() -> dict:
    d = RAW / "ottqa"
    data = ottqa.load(
        {
            "questions": d / "dev.traced.sample.json",
            "tables": d / "dev_tables.sample.json",
            "passages": d / "dev_passages.sample.json",
        },
        "dev",
        limit=0,
    )
    return asdict(next(doc for doc in data.corpus if doc.docid == "1953–54_Scottish_Cup_5"))


# (a) TAT-QA: a two-row header ("Years Ended September 30," above the years) of which the
# loader keeps the first row as header; "$  1,452.4" keeps its double space in pipe (the toolkit's
# verbatim cells) and has it collapsed in markdown and linear.
TAT_PIPE = (
    "||Years Ended September 30,|\n"
    "|2019|2018|2017\n"
    "Fixed Price|$  1,452.4|$  1,146.2|$  1,036.9\n"
    "Other|44.1|56.7|70.8\n"
    "Total sales|$1,496.5|$1,202.9|$1,107.7"
)
# Mode paper: the toolkit's zip(*table), its first column the header, one line per raw column:
# the text of the toolkit's TableEvidence for this table (TATQADataLoader.py:39, evidence.py:44).
TAT_PIPE_PAPER = (
    "||Fixed Price|Other|Total sales\n"
    "|2019|$  1,452.4|44.1|$1,496.5\n"
    "Years Ended September 30,|2018|$  1,146.2|56.7|$1,202.9\n"
    "|2017|$  1,036.9|70.8|$1,107.7"
)
TAT_MARKDOWN = (
    "|  |  | Years Ended September 30, |  |\n"
    "| --- | --- | --- | --- |\n"
    "|  | 2019 | 2018 | 2017 |\n"
    "| Fixed Price | $ 1,452.4 | $ 1,146.2 | $ 1,036.9 |\n"
    "| Other | 44.1 | 56.7 | 70.8 |\n"
    "| Total sales | $1,496.5 | $1,202.9 | $1,107.7 |"
)
# No title; empty header cells give the bare value; only column 3 has a header cell.
TAT_LINEAR = (
    "2019, Years Ended September 30, is 2018, 2017. "
    "Fixed Price, $ 1,452.4, Years Ended September 30, is $ 1,146.2, $ 1,036.9. "
    "Other, 44.1, Years Ended September 30, is 56.7, 70.8. "
    "Total sales, $1,496.5, Years Ended September 30, is $1,202.9, $1,107.7."
)

FIN_PIPE = (
    "company|payments volume ( billions )|total volume ( billions )|total transactions ( billions )"
    "|cards ( millions )\n"
    "visa inc. ( 1 )|$ 2457|$ 3822|50.3|1592\n"
    "mastercard|1697|2276|27.0|916\n"
    "american express|637|647|5.0|86\n"
    "discover|102|119|1.6|57\n"
    "jcb|55|61|0.6|58\n"
    "diners club|29|30|0.2|7"
)
FIN_MARKDOWN = (
    "| company | payments volume ( billions ) | total volume ( billions ) | total transactions ( billions ) "
    "| cards ( millions ) |\n"
    "| --- | --- | --- | --- | --- |\n"
    "| visa inc. ( 1 ) | $ 2457 | $ 3822 | 50.3 | 1592 |\n"
    "| mastercard | 1697 | 2276 | 27.0 | 916 |\n"
    "| american express | 637 | 647 | 5.0 | 86 |\n"
    "| discover | 102 | 119 | 1.6 | 57 |\n"
    "| jcb | 55 | 61 | 0.6 | 58 |\n"
    "| diners club | 29 | 30 | 0.2 | 7 |"
)


def _fin_sentence(name: str, a: str, b: str, c: str, d: str) -> str:
    return (
        f"company is {name}, payments volume ( billions ) is {a}, total volume ( billions ) is {b}, "
        f"total transactions ( billions ) is {c}, cards ( millions ) is {d}."
    )


FIN_LINEAR = " ".join(
    [
        _fin_sentence("visa inc. ( 1 )", "$ 2457", "$ 3822", "50.3", "1592"),
        _fin_sentence("mastercard", "1697", "2276", "27.0", "916"),
        _fin_sentence("american express", "637", "647", "5.0", "86"),
        _fin_sentence("discover", "102", "119", "1.6", "57"),
        _fin_sentence("jcb", "55", "61", "0.6", "58"),
        _fin_sentence("diners club", "29", "30", "0.2", "7"),
    ]
)

OTT_ROWS = [
    ("Berwick Rangers", "3 - 0", "Dundee"),
    ("Hamilton Academical", "2 - 0", "Greenock Morton"),
    ("Hibernian", "1 - 3", "Aberdeen"),
    ("Motherwell", "4 - 1", "Raith Rovers"),
    ("Partick Thistle", "5 - 3", "Buckie Thistle"),
    ("Queen of the South", "1 - 2", "Hearts"),
    ("Stirling Albion", "3 - 4", "Celtic"),
    ("Third Lanark", "0 - 0", "Rangers"),
]
OTT_PIPE = "Home team|Score|Away team\n" + "\n".join("|".join(r) for r in OTT_ROWS)
OTT_MARKDOWN = "| Home team | Score | Away team |\n| --- | --- | --- |\n" + "\n".join(
    f"| {h} | {s} | {a} |" for h, s, a in OTT_ROWS
)
# The title sentence comes first: the page title (mode paper: the toolkit's table['title']), a full stop.
OTT_LINEAR = "1953–54 Scottish Cup. " + " ".join(
    f"Home team is {h}, Score is {s}, Away team is {a}." for h, s, a in OTT_ROWS
)


@pytest.mark.parametrize(
    "which, serialization, expected",
    [
        ("tat", "pipe", TAT_PIPE),
        ("tat", "markdown", TAT_MARKDOWN),
        ("tat", "linear", TAT_LINEAR),
        ("tat_paper", "pipe", TAT_PIPE_PAPER),
        ("fin", "pipe", FIN_PIPE),
        ("fin", "markdown", FIN_MARKDOWN),
        ("fin", "linear", FIN_LINEAR),
        ("ott", "pipe", OTT_PIPE),
        ("ott", "markdown", OTT_MARKDOWN),
        ("ott", "linear", OTT_LINEAR),
    ],
)
def test_document_text_real_tables(which, serialization, expected, tat_doc, tat_paper_doc, fin_doc, ott_doc):
    doc = {"tat": tat_doc, "tat_paper": tat_paper_doc, "fin": fin_doc, "ott": ott_doc}[which]
    assert document_text(doc, serialization) == expected


def test_pipe_and_markdown_ignore_title(ott_doc):
    """Only `linear` writes the title; pipe/markdown rely on the document title field."""
    header, rows = ott_doc["table_header"], ott_doc["table_rows"]
    assert serialize(header, rows, "pipe", title="X") == OTT_PIPE
    assert serialize(header, rows, "markdown", title="X") == OTT_MARKDOWN


def test_context_text_precedes_table(fin_doc):
    doc = dict(fin_doc, text="  figures in billions  ")
    assert document_text(doc, "pipe") == "figures in billions\n" + FIN_PIPE


def test_markdown_escapes_pipe_in_cell_and_pads_ragged_rows():
    assert serialize(["a", "b"], [["x|y"], ["1", "2", "3"]], "markdown") == (
        "| a | b |  |\n| --- | --- | --- |\n| x\\|y |  |  |\n| 1 | 2 | 3 |"
    )
    # pipe has no escape: a cell holding '|' reads as two cells (the original toolkit's form)
    assert serialize(["a"], [["x|y"]], "pipe") == "a\nx|y"


def test_unknown_serialization_is_refused(fin_doc):
    with pytest.raises(ValueError, match="valid: pipe, markdown, linear"):
        document_text(fin_doc, "html")
