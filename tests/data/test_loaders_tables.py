"""Loaders of the table datasets (OTT-QA, TAT-QA, FinQA, TANQ) on the bundled real samples,
on small records written here in the official formats, and on malformed input."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cqabench.common.errors import DataError
from cqabench.data.datasets import finqa, loader, ottqa, tanq, tatqa
from cqabench.data.datasets.common import text_docid

RAW = Path(__file__).resolve().parents[2] / "resources" / "raw"
FIXTURE_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data"
TATQA_SAMPLE = RAW / "tatqa" / "tatqa_dataset_dev.sample.json"


def _write(path: Path, obj: object) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def _check_closed(data) -> None:
    """Every qrel names a corpus document, docids are unique, the Arrow tables build."""
    ids = [d.docid for d in data.corpus]
    assert len(ids) == len(set(ids))
    assert {q.docid for q in data.qrels} <= set(ids)
    assert {q.qid for q in data.qrels} <= {q.qid for q in data.queries}
    assert [a.qid for a in data.answers] == [q.qid for q in data.queries]
    data.tables()


# --------------------------------------------------------------------------- OTT-QA (real)


@pytest.fixture(scope="module")
def ott_files() -> dict[str, Path]:
    """The bundled sample: the first 40 dev questions, 80 tables, 1,844 passages (resources/README.md;
    the whole dev release has 2,214 questions, 789 tables and 17,841 passages)."""
    d = RAW / "ottqa"
    return {
        "questions": d / "dev.traced.sample.json",
        "tables": d / "dev_tables.sample.json",
        "passages": d / "dev_passages.sample.json",
    }


@pytest.fixture(scope="module")
def ott(ott_files):
    return ottqa.load(ott_files, "dev")


def test_ottqa_real_counts(ott):
    assert len(ott.queries) == 40
    assert sum(d.kind == "table" for d in ott.corpus) == 80
    assert sum(d.kind == "text" for d in ott.corpus) == 1844
    _check_closed(ott)


def test_ottqa_real_gold_and_docs(ott):
    gold: dict[str, set[str]] = {}
    for q in ott.qrels:
        gold.setdefault(q.qid, set()).add(q.docid)
    # seven answer nodes naming four distinct passages, plus the table
    assert gold["1bd5ee91518dc589"] == {
        "Sevens_Grand_prix_series_0",
        "/wiki/2015_Rugby_Europe_Sevens_Grand_Prix_Series",
        "/wiki/Ireland_national_rugby_sevens_team",
        "/wiki/Germany_national_rugby_sevens_team",
        "/wiki/Spain_national_rugby_sevens_team",
    }
    assert gold["b2fa6dea5e272acc"] == {"Kishore_Kumar_1"}  # answer is a table cell
    assert gold["2b6359edb1b352c3"] == {"Nonso_Anozie_1", "/wiki/Prime_Suspect"}
    ans = {a.qid: a for a in ott.answers}["2b6359edb1b352c3"]
    assert (ans.answer_type, ans.aliases) == ("aliases", ["Lynda La Plante"])
    docs = {d.docid: d for d in ott.corpus}
    t = docs["1953–54_Scottish_Cup_5"]
    assert t.title == "1953–54 Scottish Cup"  # table['title'], as the toolkit's OTTQADataLoader.py:41
    assert t.table_header == ["Home team", "Score", "Away team"]
    assert len(t.table_rows) == 8 and t.table_rows[-1] == ["Third Lanark", "0 - 0", "Rangers"]
    assert docs["/wiki/Maricourt,_Somme"].title == "Maricourt, Somme"
    assert docs["/wiki/Cartier_Field"].text.startswith("Cartier Field was a stadium in Notre Dame")


def test_ottqa_section_titles_mode(ott_files):
    """Mode `section_titles`: the same qrels, the table titled '<page> - <section>'."""
    paper = ottqa.load(ott_files, "dev", limit=5)
    ours = ottqa.load(ott_files, "dev", limit=5, relevance="section_titles")
    assert ours.qrels == paper.qrels
    titles = {d.docid: d.title for d in ours.corpus}
    assert titles["1953–54_Scottish_Cup_5"] == "1953–54 Scottish Cup - Third round"
    assert titles["/wiki/Maricourt,_Somme"] == "Maricourt, Somme"  # passages: the same in both modes
    # every one of the 80 sample tables has a non-blank section_title (counted in the raw file), no passage changes
    changed = [(a.docid, a.kind) for a, b in zip(paper.corpus, ours.corpus) if a.title != b.title]
    assert len(changed) == 80 and {kind for _, kind in changed} == {"table"}


def test_ottqa_plain_dev_gold_is_table_only(ott_files):
    # the plain (untraced) release's first 40 questions, vendored (tests/fixtures/README.md)
    files = dict(ott_files, questions=FIXTURE_DATA / "ottqa" / "dev_40.json")
    data = ottqa.load(files, "dev", limit=3)
    assert [q.qid for q in data.queries] == ["2b6359edb1b352c3", "1bd5ee91518dc589", "b2fa6dea5e272acc"]
    assert [(q.qid, q.docid) for q in data.qrels] == [
        ("2b6359edb1b352c3", "Nonso_Anozie_1"),
        ("1bd5ee91518dc589", "Sevens_Grand_prix_series_0"),
        ("b2fa6dea5e272acc", "Kishore_Kumar_1"),
    ]
    assert len(data.corpus) == 80 + 1844  # the pool does not shrink with the limit


# --------------------------------------------------------------------------- OTT-QA (malformed)

_TABLE = {
    "url": "u",
    "title": "T",
    "header": [["A", []], ["B", []]],
    "data": [[["1", []], ["x", ["/wiki/X"]]]],
    "section_title": "",
    "section_text": "",
    "uid": "T_0",
    "intro": "",
}
_Q = {
    "question_id": "q1",
    "question": "?",
    "table_id": "T_0",
    "answer-text": "x",
    "answer-node": [["x", [0, 1], "/wiki/X", "passage"]],
}


def _ott_tmp(tmp_path: Path, questions=None, tables=None, passages=None) -> dict[str, Path]:
    return {
        "questions": _write(tmp_path / "q.json", [_Q] if questions is None else questions),
        "tables": _write(tmp_path / "t.json", {"T_0": _TABLE} if tables is None else tables),
        "passages": _write(tmp_path / "p.json", {"/wiki/X": "X is a letter."} if passages is None else passages),
    }


def test_ottqa_small_ok(tmp_path):
    data = ottqa.load(_ott_tmp(tmp_path), "dev")
    assert [(q.qid, q.docid) for q in data.qrels] == [("q1", "T_0"), ("q1", "/wiki/X")]
    assert data.corpus[0].title == "T"  # no section title: no " - "
    _check_closed(data)


def test_ottqa_plain_tables_of_the_open_domain_corpus(tmp_path):
    """all_plain_tables.json (the full open-domain corpus) holds cells as plain text."""
    plain = dict(_TABLE, header=[c[0] for c in _TABLE["header"]], data=[[c[0] for c in row] for row in _TABLE["data"]])
    (tmp_path / "linked").mkdir()
    (tmp_path / "plain").mkdir()
    linked = ottqa.load(_ott_tmp(tmp_path / "linked"), "dev")
    data = ottqa.load(_ott_tmp(tmp_path / "plain", tables={"T_0": plain}), "dev")
    assert data.corpus[0] == linked.corpus[0]


@pytest.mark.parametrize(
    "kwargs, which, record, fieldname",
    [
        ({"passages": {}}, "questions", "q1", "answer-node[0]"),
        ({"tables": {"T_9": dict(_TABLE, uid="T_9")}}, "questions", "q1", "table_id"),
        ({"questions": [{k: v for k, v in _Q.items() if k != "answer-text"}]}, "questions", "q1", "answer-text"),
        ({"questions": [dict(_Q, **{"answer-node": "x"})]}, "questions", "q1", "answer-node"),
        ({"tables": {"T_0": dict(_TABLE, data=[])}}, "tables", "T_0", "data"),
        ({"tables": {"T_0": dict(_TABLE, header=[])}}, "tables", "T_0", "header"),
        ({"tables": {"T_0": dict(_TABLE, header=[["A", []], [7, []]])}}, "tables", "T_0", "header[1]"),
        ({"passages": {"/wiki/X": ["not", "text"]}}, "passages", "/wiki/X", "-"),
    ],
)
def test_ottqa_malformed(tmp_path, kwargs, which, record, fieldname):
    files = _ott_tmp(tmp_path, **kwargs)
    with pytest.raises(DataError) as exc:
        ottqa.load(files, "dev")
    assert (exc.value.path, exc.value.record, exc.value.field) == (str(files[which]), record, fieldname)


def test_ottqa_truncated_json(tmp_path):
    files = _ott_tmp(tmp_path)
    files["tables"].write_text(files["tables"].read_text()[:-20])
    with pytest.raises(DataError) as exc:
        ottqa.load(files, "dev")
    assert exc.value.path == str(files["tables"]) and "not valid JSON" in exc.value.problem


# --------------------------------------------------------------------------- TAT-QA (real)


def test_tatqa_real():
    """The bundled first 40 of the 278 dev contexts; every count below was taken from the raw
    file with a few lines of Python over its JSON (the whole dev: 1,668 questions, 1,356 paragraphs)."""
    data = loader("tatqa").load({"questions": TATQA_SAMPLE}, "dev")
    assert len(data.queries) == 240
    assert sum(d.kind == "table" for d in data.corpus) == 40
    assert sum(d.kind == "text" for d in data.corpus) == 212
    _check_closed(data)
    docs = {d.docid: d for d in data.corpus}
    t = docs["3ffd9053-a45d-491c-957a-1b2fa0af0570"]
    # mode paper: transposed as the toolkit's zip(*table); header = the raw first column; cells verbatim
    assert t.table_header == ["", "", "Fixed Price", "Other", "Total sales"]
    assert t.table_rows[0] == ["", "2019", "$  1,452.4", "44.1", "$1,496.5"] and len(t.table_rows) == 3
    assert t.table_rows[1] == ["Years Ended September 30,", "2018", "$  1,146.2", "56.7", "$1,202.9"]
    gold: dict[str, list[str]] = {}
    for q in data.qrels:
        gold.setdefault(q.qid, []).append(q.docid)
    ans = {a.qid: a for a in data.answers}
    # text question, paragraph order "2"
    assert gold["23801627-ff77-4597-8d24-1c99e2452082"] == ["79e37805-6558-4a8c-b033-32be6bffef48"]
    # table-text: table first, then paragraph 2
    assert gold["4960801d-277d-4f79-8eca-c4d0200fa9d6"] == [t.docid, "79e37805-6558-4a8c-b033-32be6bffef48"]
    a = ans["4960801d-277d-4f79-8eca-c4d0200fa9d6"]
    assert (a.answer_type, a.aliases, a.scale, a.numeric_type) == ("aliases", ["$1,496.5"], "million", "span")
    a = ans["593c4388-5209-4462-8b83-b429c8612c25"]
    assert a.aliases == ["fixed-price type", "cost-plus type", "time-and-material type"]
    assert a.numeric_type == "multi-span"
    kinds = [a.numeric_type for a in data.answers]
    assert {k: kinds.count(k) for k in set(kinds)} == {"arithmetic": 99, "span": 104, "multi-span": 32, "count": 5}
    assert all(
        a.answer_type == "number" and a.number is not None
        for a in data.answers
        if a.numeric_type in ("arithmetic", "count")
    )
    # questions answered from the table may still list paragraphs; only the table is gold
    table_only = [q.qid for q in data.queries if json.loads(q.meta)["answer_from"] == "table"]
    assert len(table_only) == 106
    assert all(len(gold[qid]) == 1 and docs[gold[qid][0]].kind == "table" for qid in table_only)
    # qrel count straight from the raw annotation: one table + each distinct listed paragraph
    raw = json.loads(TATQA_SAMPLE.read_text(encoding="utf-8"))
    expected = sum(
        (q["answer_from"] != "text") + (len(set(q["rel_paragraphs"])) if q["answer_from"] != "table" else 0)
        for ctx in raw
        for q in ctx["questions"]
    )
    assert len(data.qrels) == expected == 327


# --------------------------------------------------------------------------- TAT-QA (small + malformed)


def _tat_ctx() -> dict:
    return {
        "table": {"uid": "t1", "table": [["", "2019", "2018"], ["Revenue", "10", "8"]]},
        "paragraphs": [
            {"uid": "p1", "order": 1, "text": "Revenue grew."},
            {"uid": "p2", "order": 2, "text": "Costs fell by 2."},
        ],
        "questions": [
            {
                "uid": "q1",
                "order": 1,
                "question": "Change in revenue?",
                "answer": 2,
                "derivation": "10 - 8",
                "answer_type": "arithmetic",
                "answer_from": "table",
                "rel_paragraphs": [],
                "req_comparison": False,
                "scale": "million",
            },
            {
                "uid": "q2",
                "order": 2,
                "question": "How many years?",
                "answer": "2",
                "derivation": "",
                "answer_type": "count",
                "answer_from": "table-text",
                "rel_paragraphs": ["2"],
                "req_comparison": False,
                "scale": "",
            },
            {
                "uid": "q3",
                "order": 3,
                "question": "What changed?",
                "answer": ["Revenue", "Costs"],
                "derivation": "",
                "answer_type": "multi-span",
                "answer_from": "text",
                "rel_paragraphs": ["1", "2"],
                "req_comparison": False,
                "scale": "",
            },
        ],
    }


def test_tatqa_rows_mode_keeps_the_raw_orientation():
    """Mode `rows`: the same qrels as `paper`, the table as the raw file lists it (header = first row)."""
    paper = tatqa.load({"questions": TATQA_SAMPLE}, "dev", limit=20)
    rows = tatqa.load({"questions": TATQA_SAMPLE}, "dev", limit=20, relevance="rows")
    assert rows.qrels == paper.qrels and [d.docid for d in rows.corpus] == [d.docid for d in paper.corpus]
    t = {d.docid: d for d in rows.corpus}["3ffd9053-a45d-491c-957a-1b2fa0af0570"]
    assert t.table_header == ["", "", "Years Ended September 30,", ""]
    assert t.table_rows[0] == ["", "2019", "2018", "2017"] and len(t.table_rows) == 4
    assert t.table_rows[1] == ["Fixed Price", "$  1,452.4", "$  1,146.2", "$  1,036.9"]


def test_tatqa_ragged_table_cannot_be_transposed(tmp_path):
    ctx = json.loads(TATQA_SAMPLE.read_text(encoding="utf-8"))[:1]
    ctx[0]["table"]["table"][2] = ctx[0]["table"]["table"][2][:-1]
    path = _write(tmp_path / "t.json", ctx)
    with pytest.raises(DataError, match=r"table\.table\[2\].*ragged"):
        tatqa.load({"questions": path}, "dev")
    assert tatqa.load({"questions": path}, "dev", relevance="rows").queries  # the raw orientation reads it


def test_tatqa_small(tmp_path):
    path = _write(tmp_path / "dev.json", [_tat_ctx()])
    data = tatqa.load({"questions": path}, "dev")
    assert [(q.qid, q.docid) for q in data.qrels] == [
        ("q1", "t1"),
        ("q2", "t1"),
        ("q2", "p2"),
        ("q3", "p1"),
        ("q3", "p2"),
    ]
    a1, a2, a3 = data.answers
    assert (a1.answer_type, a1.number, a1.aliases, a1.scale, a1.program) == ("number", 2.0, ["2"], "million", "10 - 8")
    assert (a2.number, a2.numeric_type) == (2.0, "count")
    assert (a3.answer_type, a3.aliases, a3.numeric_type) == ("aliases", ["Revenue", "Costs"], "multi-span")
    limited_data = tatqa.load({"questions": path}, "dev", limit=2)
    assert [q.qid for q in limited_data.queries] == ["q1", "q2"]
    _check_closed(data)


def _tat_bad(mutate):
    ctx = _tat_ctx()
    mutate(ctx)
    return ctx


@pytest.mark.parametrize(
    "mutate, record, fieldname",
    [
        (lambda c: c["questions"][1].__setitem__("rel_paragraphs", ["9"]), "q2", "rel_paragraphs"),
        (lambda c: c["questions"][1].__setitem__("rel_paragraphs", "2"), "q2", "rel_paragraphs"),
        (lambda c: c["questions"][0].pop("answer_from"), "q1", "answer_from"),
        (lambda c: c["questions"][0].__setitem__("answer_type", "guess"), "q1", "answer_type"),
        (lambda c: c["questions"][0].__setitem__("answer", "ten"), "q1", "answer"),
        (lambda c: c["table"].__setitem__("table", []), "t1", "table.table"),
        (lambda c: c["table"].__setitem__("table", [["", "2019"]]), "t1", "table.table"),
        (lambda c: c["table"]["table"][1].__setitem__(1, 10), "t1", "table.table[1][1]"),
        (lambda c: c["paragraphs"][0].pop("text"), "t1 paragraphs[0]", "text"),
    ],
)
def test_tatqa_malformed(tmp_path, mutate, record, fieldname):
    path = _write(tmp_path / "dev.json", [_tat_bad(mutate)])
    with pytest.raises(DataError) as exc:
        tatqa.load({"questions": path}, "dev")
    assert (exc.value.path, exc.value.record, exc.value.field) == (str(path), record, fieldname)


def test_tatqa_truncated_json(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps([_tat_ctx()])[:100])
    with pytest.raises(DataError) as exc:
        tatqa.load({"questions": path}, "dev")
    assert exc.value.path == str(path) and exc.value.record == "line 1" and exc.value.field == "-"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "nan", "-Infinity"])
def test_tatqa_non_finite_gold_number_is_refused(tmp_path, bad):
    # A real arithmetic question of the bundled sample; json.dumps writes NaN / Infinity literals,
    # which Python's json (and so the loader) used to accept as the gold number.
    contexts = json.loads((RAW / "tatqa" / "tatqa_dataset_dev.sample.json").read_text(encoding="utf-8"))
    (q,) = [q for q in contexts[0]["questions"] if q["uid"] == "eb787966-fa02-401f-bfaf-ccabf3828b23"]
    assert q["answer_type"] == "arithmetic" and q["answer"] == -12.6
    q["answer"] = bad
    path = _write(tmp_path / "dev.json", contexts)
    with pytest.raises(DataError) as exc:
        tatqa.load({"questions": path}, "dev")
    assert (exc.value.path, exc.value.record, exc.value.field) == (str(path), q["uid"], "answer")
    assert "not a finite number" in exc.value.problem


# --------------------------------------------------------------------------- FinQA


def test_finqa_real():
    # the stricter mode (the paper's three documents per question: tests/data/test_relevance.py)
    data = finqa.load({"questions": RAW / "finqa" / "dev.json"}, "dev", relevance="gold_inds")
    assert [q.qid for q in data.queries] == ["V/2008/page_17.pdf-1"]
    (a,) = data.answers
    assert (a.answer_type, a.number, a.aliases, a.program, a.scale) == (
        "number",
        127.4,
        ["127.40"],
        "divide(637, const_5)",
        "",
    )
    assert [(q.qid, q.docid) for q in data.qrels] == [("V/2008/page_17.pdf-1", "V/2008/page_17.pdf#table")]
    docs = {d.docid: d for d in data.corpus}
    # 44 pre_text + 21 post_text sentences + the table
    assert len(docs) == 66
    t = docs["V/2008/page_17.pdf#table"]
    assert t.table_header[0] == "company" and t.table_rows[2] == ["american express", "637", "647", "5.0", "86"]
    # FinQA's own indexes in the same record (model_input, tfidftopn) name these sentences
    assert docs["V/2008/page_17.pdf#text_43"].text == "$ 2457 $ 3822 50.3 1592 ."
    assert docs["V/2008/page_17.pdf#text_55"].text == (
        "american express and discover include business from third-party issuers ."
    )
    _check_closed(data)


def _fin(qid: str, filename: str, answer: str, exe_ans, program: str, gold_inds: dict, table=None) -> dict:
    return {
        "id": qid,
        "filename": filename,
        "pre_text": ["revenue was 10 in 2019 .", "it was 8 in 2018 ."],
        "post_text": ["costs rose .", "margins fell ."],
        "table": table if table is not None else [["", "2019", "2018"], ["revenue", "10", "8"], ["costs", "6", "7"]],
        "qa": {
            "question": f"question {qid}?",
            "answer": answer,
            "program": program,
            "gold_inds": gold_inds,
            "exe_ans": exe_ans,
        },
    }


_FIN = [
    _fin("A/2019/page_1.pdf-1", "A/2019/page_1.pdf", "yes", "yes", "greater(10, 8)", {"table_1": "..."}),
    _fin(
        "A/2019/page_1.pdf-2",
        "A/2019/page_1.pdf",
        "25%",
        0.25,
        "subtract(10, 8), divide(#0, 8)",
        {"table_1": "...", "text_1": "it was 8 in 2018 ."},
    ),
    _fin("B/2020/page_9.pdf-1", "B/2020/page_9.pdf", "-1", -1.0, "subtract(6, 7)", {"text_3": "margins fell ."}),
    _fin("B/2020/page_9.pdf-2", "B/2020/page_9.pdf", "no", "no", "greater(6, 7)", {"table_2": "..."}),
]


def test_finqa_small(tmp_path):
    path = _write(tmp_path / "dev.json", _FIN)
    data = finqa.load({"questions": path}, "dev", relevance="gold_inds")
    a_yes, a_pct, a_neg, a_no = data.answers
    assert (a_yes.answer_type, a_yes.aliases, a_yes.numeric_type, a_yes.boolean) == ("aliases", ["yes"], "yes/no", True)
    assert (a_no.aliases, a_no.boolean) == (["no"], False)
    assert (a_pct.answer_type, a_pct.number, a_pct.scale, a_pct.aliases) == ("number", 0.25, "percent", ["25%"])
    assert (a_neg.number, a_neg.scale, a_neg.aliases, a_neg.program) == (-1.0, "", ["-1"], "subtract(6, 7)")
    # two pages, each one table + four sentences, not repeated per question
    assert len(data.corpus) == 10
    assert [(q.qid, q.docid) for q in data.qrels] == [
        ("A/2019/page_1.pdf-1", "A/2019/page_1.pdf#table"),
        ("A/2019/page_1.pdf-2", "A/2019/page_1.pdf#table"),
        ("A/2019/page_1.pdf-2", "A/2019/page_1.pdf#text_1"),
        ("B/2020/page_9.pdf-1", "B/2020/page_9.pdf#text_3"),
        ("B/2020/page_9.pdf-2", "B/2020/page_9.pdf#table"),
    ]
    assert {d.docid: d.text for d in data.corpus}["B/2020/page_9.pdf#text_3"] == "margins fell ."  # post_text[1]
    assert [q.qid for q in finqa.load({"questions": path}, "dev", limit=1).queries] == ["A/2019/page_1.pdf-1"]
    _check_closed(data)


def _without_exe_ans(rec: dict) -> dict:
    del rec["qa"]["exe_ans"]
    return rec


@pytest.mark.parametrize(
    "record, fieldname, rec",
    [
        ("B/2020/page_9.pdf-1 qa", "gold_inds", lambda: _fin("B/2020/page_9.pdf-1", "B", "1", 1, "", "not a dict")),
        (
            "B/2020/page_9.pdf-1",
            "qa.gold_inds",
            lambda: _fin("B/2020/page_9.pdf-1", "B", "1", 1, "", {"text_4": "x"}),
        ),  # 4 sentences: 0..3
        (
            "B/2020/page_9.pdf-1 qa",
            "exe_ans",
            lambda: _without_exe_ans(_fin("B/2020/page_9.pdf-1", "B", "1", 1, "", {})),
        ),
        ("B/2020/page_9.pdf-1", "qa.exe_ans", lambda: _fin("B/2020/page_9.pdf-1", "B", "x", "n/a", "", {})),
        ("B/2020/page_9.pdf-1", "table", lambda: _fin("B/2020/page_9.pdf-1", "B", "1", 1, "", {}, table=[])),
        ("B/2020/page_9.pdf-1", "table", lambda: _fin("B/2020/page_9.pdf-1", "B", "1", 1, "", {}, table=[["a", "b"]])),
        (
            "B/2020/page_9.pdf-1",
            "table[1][0]",
            lambda: _fin("B/2020/page_9.pdf-1", "B", "1", 1, "", {}, table=[["a"], [3.5]]),
        ),
        ("index 0", "id", lambda: {k: v for k, v in _fin("x", "B", "1", 1, "", {}).items() if k != "id"}),
    ],
)
def test_finqa_malformed(tmp_path, record, fieldname, rec):
    path = _write(tmp_path / "dev.json", [rec()])
    with pytest.raises(DataError) as exc:
        finqa.load({"questions": path}, "dev")
    assert (exc.value.path, exc.value.record, exc.value.field) == (str(path), record, fieldname)


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), "nan", "Infinity"])
def test_finqa_non_finite_exe_ans_is_refused(tmp_path, bad):
    records = json.loads((RAW / "finqa" / "dev.json").read_text(encoding="utf-8"))  # the real record
    assert records[0]["qa"]["exe_ans"] == 127.4
    records[0]["qa"]["exe_ans"] = bad
    path = _write(tmp_path / "dev.json", records)
    with pytest.raises(DataError) as exc:
        finqa.load({"questions": path}, "dev")
    assert (exc.value.path, exc.value.record, exc.value.field) == (str(path), records[0]["id"], "qa.exe_ans")
    assert "not a finite number" in exc.value.problem


def test_finqa_same_page_must_agree(tmp_path):
    other = _fin("A/2019/page_1.pdf-3", "A/2019/page_1.pdf", "1", 1, "", {}, table=[["x"], ["1"]])
    path = _write(tmp_path / "dev.json", [_FIN[0], other])
    with pytest.raises(DataError) as exc:
        finqa.load({"questions": path}, "dev", relevance="gold_inds")
    assert (exc.value.record, exc.value.field) == ("A/2019/page_1.pdf-3", "table/pre_text/post_text")


def test_finqa_truncated_json(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(_FIN)[:-3])
    with pytest.raises(DataError) as exc:
        finqa.load({"questions": path}, "dev")
    assert exc.value.path == str(path) and "not valid JSON" in exc.value.problem


# --------------------------------------------------------------------------- TANQ


def test_tanq_real_sample():
    data = tanq.load({"questions": RAW / "tanq" / "test_questions_10.jsonl"}, "test")
    assert len(data.queries) == 10
    assert data.corpus == [] and data.qrels == []  # the sample carries no proofs
    q0 = data.queries[0]
    assert (q0.qid, q0.question_type) == ("384__wikidata_intersection__test", "wikidata_intersection")
    assert q0.question.startswith("Which film was directed and produced by Mel Brooks?")
    shape = {a.qid: (len(a.table_rows), len(a.table_header)) for a in data.answers}
    # counted by hand in the file: rows after the header line, cells of the header line
    assert shape["384__wikidata_intersection__test"] == (5, 5)
    assert shape["68__wikitables_composition__test"] == (16, 2)
    assert shape["301__wikidata_intersection__test"] == (7, 3)
    assert shape["32__wikitables_composition__test"] == (5, 10)
    assert shape["343__wikidata_intersection__test"] == (7, 8)
    a = data.answers[0]
    assert a.answer_type == "table"
    assert a.table_header == ["entity", "original language", "composer", "country of origin", "genre"]
    assert a.table_rows[4] == [
        "Spaceballs",
        "English",
        "John Morris, Mel Brooks",
        "United States of America",
        "science fiction comedy, parody film, comedy film, science fiction film, adventure film",
    ]
    assert {q.question_type for q in data.queries} == {
        "wikidata_intersection",
        "wikitables_composition",
        "wikidata_comp",
    }
    _check_closed(data)


def _tanq_full(qid: str = "7__wikidata_comp__dev") -> dict:
    """A record in the full release's shape (google-deepmind/tanq README), proofs included."""
    return {
        "init_qid": qid,
        "init_question": "Which films did X direct?",
        "ext_question": "Which films did X direct? (genre)",
        "ext_question_rephrased": "Which films did X direct, and what is their genre?",
        "question_properties": ["genre"],
        "extended_types": ["genre"],
        "answer_list": [
            {
                "init_answer_wikidata_id": "Q1",
                "init_answer_proof": [
                    {
                        "proof_text": "Film A is a 1990 film directed by X.",
                        "found_in_url": "https://en.wikipedia.org/wiki/Film_A",
                    }
                ],
                "extension_answer": [
                    {
                        "extension_property_label": "genre",
                        "proof": [
                            {
                                "key": "Genre",
                                "value": "drama",
                                "section": "",
                                "parent_section": "",
                                "found_in_url": "https://en.wikipedia.org/wiki/Film_A",
                                "index": 0,
                                "proof_type": "infobox",
                                "eval_result": "yes",
                            },
                            {
                                "rows": [
                                    {"cells": [{"cell_value": "Film"}, {"cell_value": "Genre"}]},
                                    {"cells": [{"cell_value": "Film A"}, {"cell_value": "drama"}]},
                                ],
                                "caption": "Filmography",
                                "section": "Films",
                                "parent_section": "",
                                "found_in_url": "https://en.wikipedia.org/wiki/X_(director)",
                                "index": 2,
                                "proof_type": "table",
                                "eval_result": "yes",
                            },
                        ],
                    }
                ],
            },
            {
                "init_answer_wikidata_id": "Q2",
                "init_answer_proof": [
                    {
                        "proof_text": "Film B is a 1995 film directed by X.",
                        "found_in_url": "https://en.wikipedia.org/wiki/Film_B",
                    }
                ],
                "extension_answer": [
                    {
                        "extension_property_label": "genre",
                        "proof": [
                            {
                                "text": "Film B is a comedy.",
                                "section": "Plot",
                                "parent_section": "",
                                "found_in_url": "https://en.wikipedia.org/wiki/Film_B",
                                "index": 1,
                                "proof_type": "text",
                                "eval_result": "no",
                            }
                        ],
                    }
                ],
            },
        ],
        "answer_table": "entity|genre\nFilm A|drama\nFilm B|comedy\n\n",
    }


def test_tanq_full_record_proofs(tmp_path):
    second = _tanq_full("8__wikidata_comp__dev")  # same proofs: documents are shared, not repeated
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(_tanq_full()) + "\n\n" + json.dumps(second) + "\n")
    data = tanq.load({"questions": path}, "dev")
    assert [d.kind for d in data.corpus] == ["text", "infobox", "table", "text", "text"]
    text_a, infobox, table, text_b, text_b2 = data.corpus
    assert (text_a.title, text_a.text) == ("Film A", "Film A is a 1990 film directed by X.")
    assert (infobox.title, infobox.table_header, infobox.table_rows) == ("Film A", ["Genre"], [["drama"]])
    # the section reaches the title: page - section
    assert (table.title, table.text, table.table_header, table.table_rows) == (
        "X (director) - Films",
        "Filmography",
        ["Film", "Genre"],
        [["Film A", "drama"]],
    )
    assert (text_b2.title, text_b2.text) == ("Film B - Plot", "Film B is a comedy.")
    # docids do not depend on the section: a text proof keeps the content id of (page, text)
    assert text_b2.docid == text_docid("Film B", "Film B is a comedy.")
    assert [q.docid for q in data.qrels if q.qid == "7__wikidata_comp__dev"] == [d.docid for d in data.corpus]
    assert len(data.qrels) == 10
    q = data.queries[0]
    assert q.question == "Which films did X direct, and what is their genre?" and q.question_type == "wikidata_comp"
    assert json.loads(q.meta)["question_properties"] == ["genre"]
    assert data.answers[0].table_rows == [["Film A", "drama"], ["Film B", "comedy"]]
    _check_closed(data)


def _text_proof(text: str, url: str, section: str = "", parent: str = "", index: int = 0) -> dict:
    return {
        "text": text,
        "section": section,
        "parent_section": parent,
        "found_in_url": url,
        "index": index,
        "proof_type": "text",
        "eval_result": "yes",
    }


def _table_proof(
    grid: list[list[str]], url: str, section: str, parent: str = "", index: int = 0, caption: str = ""
) -> dict:
    return {
        "rows": [{"cells": [{"cell_value": c} for c in row]} for row in grid],
        "caption": caption,
        "section": section,
        "parent_section": parent,
        "found_in_url": url,
        "index": index,
        "proof_type": "table",
        "eval_result": "yes",
    }


def _infobox_proof(key: str, value: str, url: str, section: str = "", index: int = 0) -> dict:
    return {
        "key": key,
        "value": value,
        "section": section,
        "parent_section": "",
        "found_in_url": url,
        "index": index,
        "proof_type": "infobox",
        "eval_result": "yes",
    }


def _answer(qid: str, proofs_by_property: dict[str, list[dict]], init: list[dict] | None = None) -> dict:
    return {
        "init_answer_wikidata_id": qid,
        "init_answer_wikipedia_id": qid,
        "filter_pass": True,
        "init_answer_proof": init or [],
        "extension_answer": [
            {"extension_property_id": "P", "extension_property_label": label, "proof": proofs}
            for label, proofs in proofs_by_property.items()
        ],
    }


W = "https://en.wikipedia.org/wiki/"
SHARED_TABLE = _table_proof(
    [["Year", "Film", "Role"], ["1974", "Blazing Saddles", "Director"], ["1987", "Spaceballs", "Director"]],
    W + "Mel_Brooks",
    section="Filmography",
    parent="Career",
    index=3,
    caption="Films",
)


def _tanq_two_questions() -> list[dict]:
    """Two questions in the release's schema: several answers each, text / table / infobox proofs,
    one table proof cited by both, one paragraph cited with and without its section."""
    q1 = {
        "init_qid": "1__wikidata_intersection__dev",
        "ext_question_rephrased": "Which films did Mel Brooks direct, and in which year?",
        "answer_list": [
            _answer(
                "Q1",
                {"publication date": [SHARED_TABLE]},
                init=[
                    {
                        "proof_text": "Blazing Saddles is a 1974 film directed by Mel Brooks.",
                        "found_in_url": W + "Blazing_Saddles",
                    }
                ],
            ),
            _answer(
                "Q2",
                {"publication date": [_infobox_proof("Release date", "1987", W + "Spaceballs")]},
                init=[{"proof_text": "Spaceballs is a 1987 parody film.", "found_in_url": W + "Spaceballs"}],
            ),
        ],
        "answer_table": "entity|publication date\nBlazing Saddles|1974\nSpaceballs|1987",
    }
    q2 = {
        "init_qid": "2__wikidata_comp__dev",
        "ext_question_rephrased": "Which films did Mel Brooks produce, and who composed their music?",
        "answer_list": [
            _answer(
                "Q2",
                {
                    "composer": [
                        _text_proof(
                            "Spaceballs is a 1987 parody film.",
                            W + "Spaceballs",
                            section="Music",
                            parent="Production",
                            index=4,
                        ),
                        SHARED_TABLE,
                    ]
                },
            ),
            _answer(
                "Q3",
                {
                    "composer": [
                        _text_proof(
                            "The score was written by John Morris.",
                            W + "The_Producers_(1967_film)",
                            section="Music",
                            parent="Music",
                            index=5,
                        )
                    ]
                },
            ),
        ],
        "answer_table": "entity|composer\nSpaceballs|John Morris\nThe Producers|John Morris",
    }
    return [q1, q2]


def test_tanq_sections_several_answers_and_a_shared_proof(tmp_path):
    path = tmp_path / "dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _tanq_two_questions()))
    data = tanq.load({"questions": path}, "dev")
    docs = {d.docid: d for d in data.corpus}
    gold: dict[str, list[str]] = {}
    for q in data.qrels:
        gold.setdefault(q.qid, []).append(q.docid)
    g1, g2 = gold["1__wikidata_intersection__dev"], gold["2__wikidata_comp__dev"]
    assert [docs[d].kind for d in g1] == ["text", "table", "text", "infobox"]
    assert [docs[d].kind for d in g2] == ["text", "table", "text"]
    # the table cited by both questions is one document, gold for both
    assert g1[1] == g2[1] and sum(d.kind == "table" for d in data.corpus) == 1
    table = docs[g1[1]]
    assert table.title == "Mel Brooks - Career - Filmography" and table.text == "Films"
    assert table.table_header == ["Year", "Film", "Role"] and table.table_rows[1] == ["1987", "Spaceballs", "Director"]
    assert (docs[g1[3]].title, docs[g1[3]].table_header, docs[g1[3]].table_rows) == (
        "Spaceballs",
        ["Release date"],
        [["1987"]],
    )
    # one paragraph cited by q1 without a section (QAMPARI's init proof) and by q2 with one:
    # one document (content id of page and text), the more specific title kept
    assert g1[2] == g2[0] == text_docid("Spaceballs", "Spaceballs is a 1987 parody film.")
    assert docs[g1[2]].title == "Spaceballs - Production - Music"
    # a parent section equal to the section is not repeated
    assert docs[g2[2]].title == "The Producers (1967 film) - Music"
    assert len(data.corpus) == 5 and len(data.qrels) == 7
    _check_closed(data)
    # the title does not depend on which question cited the paragraph first
    path.write_text("".join(json.dumps(r) + "\n" for r in reversed(_tanq_two_questions())))
    rev = tanq.load({"questions": path}, "dev")
    assert {d.docid: d for d in rev.corpus} == docs


def test_tanq_section_is_what_the_model_sees(tmp_path):
    from cqabench.generation.prompts import context_block

    path = tmp_path / "dev.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _tanq_two_questions()))
    data = tanq.load({"questions": path}, "dev")
    table = next(d for d in data.corpus if d.kind == "table")
    block = context_block([table.__dict__], "pipe")
    assert block.startswith("Context:\n[1] Mel Brooks - Career - Filmography\nFilms\nYear|Film|Role\n1974|")


def test_tanq_page_title():
    assert tanq.page_title(W + "The_Producers_(1967_film)") == "The Producers (1967 film)"
    assert tanq.page_title(W + "Caf%C3%A9_Society#Cast") == "Café Society"
    assert tanq.page_title("https://en.wikipedia.org/w/index.php?title=Spaceballs") == "Spaceballs"
    assert tanq.proof_title("X", "Career", "Films") == "X - Career - Films"
    assert tanq.proof_title("X", "Films", "Films") == "X - Films"
    assert tanq.proof_title("X", "", "") == "X"


def _tanq_bad(mutate) -> dict:
    rec = _tanq_full()
    mutate(rec)
    return rec


Q7 = "7__wikidata_comp__dev"


@pytest.mark.parametrize(
    "mutate, record, fieldname",
    [
        (lambda r: r.__setitem__("answer_table", "entity|genre\nFilm A|drama|extra\n"), Q7, "answer_table"),
        (lambda r: r.__setitem__("answer_table", "entity|genre\n"), Q7, "answer_table"),
        (lambda r: r.__setitem__("answer_table", "\n"), Q7, "answer_table"),
        (lambda r: r.pop("answer_table"), Q7, "answer_table"),
        (lambda r: r.__setitem__("answer_list", {"a": 1}), Q7, "answer_list"),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][1].__setitem__("rows", []),
            f"{Q7} answer_list[0].extension_answer[0].proof[1]",
            "rows",
        ),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][0].__setitem__("proof_type", "chart"),
            f"{Q7} answer_list[0].extension_answer[0].proof[0]",
            "proof_type",
        ),
        (
            lambda r: r["answer_list"][1]["init_answer_proof"][0].__setitem__("proof_text", None),
            f"{Q7} answer_list[1].init_answer_proof[0]",
            "proof_text",
        ),
        (lambda r: r.pop("init_qid"), "line 1", "init_qid"),
        # malformed proofs, each named by its place in the record
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][1].__setitem__("section", 3),
            f"{Q7} answer_list[0].extension_answer[0].proof[1]",
            "section",
        ),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][0].__setitem__("parent_section", ["a"]),
            f"{Q7} answer_list[0].extension_answer[0].proof[0]",
            "parent_section",
        ),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][1]["rows"][1]["cells"][1].__setitem__(
                "cell_value", 7
            ),
            f"{Q7} answer_list[0].extension_answer[0].proof[1] rows[1].cells[1]",
            "cell_value",
        ),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][1]["rows"][1].pop("cells"),
            f"{Q7} answer_list[0].extension_answer[0].proof[1] rows[1]",
            "cells",
        ),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][1].__setitem__(
                "rows", [{"cells": [{"cell_value": "Film"}]}]
            ),
            f"{Q7} answer_list[0].extension_answer[0].proof[1]",
            "rows",
        ),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][0].pop("value"),
            f"{Q7} answer_list[0].extension_answer[0].proof[0]",
            "value",
        ),
        (
            lambda r: r["answer_list"][0]["extension_answer"][0]["proof"][0].__setitem__("key", " "),
            f"{Q7} answer_list[0].extension_answer[0].proof[0]",
            "key",
        ),
        (
            lambda r: r["answer_list"][1]["extension_answer"][0]["proof"][0].pop("text"),
            f"{Q7} answer_list[1].extension_answer[0].proof[0]",
            "text",
        ),
        (
            lambda r: r["answer_list"][1]["extension_answer"][0]["proof"].__setitem__(0, "Film B is a comedy."),
            f"{Q7} answer_list[1].extension_answer[0].proof[0]",
            "-",
        ),
        (
            lambda r: r["answer_list"][1]["extension_answer"][0].__setitem__("proof", {"text": "x"}),
            f"{Q7} answer_list[1].extension_answer[0]",
            "proof",
        ),
        (
            lambda r: r["answer_list"][1].__setitem__("extension_answer", "genre"),
            f"{Q7} answer_list[1]",
            "extension_answer",
        ),
        (
            lambda r: r["answer_list"][1]["init_answer_proof"][0].__setitem__("found_in_url", 5),
            f"{Q7} answer_list[1].init_answer_proof[0]",
            "found_in_url",
        ),
        (lambda r: r["answer_list"].__setitem__(1, "Q2"), f"{Q7} answer_list[1]", "-"),
    ],
)
def test_tanq_malformed(tmp_path, mutate, record, fieldname):
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(_tanq_bad(mutate)) + "\n")
    with pytest.raises(DataError) as exc:
        tanq.load({"questions": path}, "dev")
    assert (exc.value.path, exc.value.record, exc.value.field) == (str(path), record, fieldname)


def test_tanq_truncated_line(tmp_path):
    path = tmp_path / "dev.jsonl"
    line = json.dumps(_tanq_full())
    path.write_text(line + "\n" + line[:50] + "\n")
    with pytest.raises(DataError) as exc:
        tanq.load({"questions": path}, "dev")
    assert (exc.value.path, exc.value.record, exc.value.field) == (str(path), "line 2", "-")


def test_tanq_question_fallbacks(tmp_path):
    rec = {
        "init_qid": "1",
        "question": "Plain?",
        "question_type": "custom",
        "skills": ["time calculation"],
        "answer_table": "a|b\n1|2",
    }
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    q = tanq.load({"questions": path}, "dev").queries[0]
    assert (q.question, q.question_type, q.skills) == ("Plain?", "custom", ["time calculation"])
    rec2 = copy.deepcopy(rec)
    del rec2["question"]
    path.write_text(json.dumps(rec2) + "\n")
    with pytest.raises(DataError) as exc:
        tanq.load({"questions": path}, "dev")
    assert exc.value.field == "ext_question_rephrased"
