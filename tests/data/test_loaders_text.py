"""Loaders of the text datasets (MuSiQue, 2WikiMultihopQA, StrategyQA, AmbigQA) on real files.

Expected numbers are recomputed in each test straight from the raw JSON (not through the
loader), so a loader bug cannot agree with itself.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import FIXTURE_DATA, RAW
from cqabench.common.errors import DataError
from cqabench.data.datasets import ambigqa, loader, musique, strategyqa, twowiki
from cqabench.data.datasets.common import text_docid
from cqabench.data.schema import CanonicalData


def _check_consistent(data: CanonicalData) -> None:
    """Invariants every loader output must hold: unique ids, qrels inside corpus and queries."""
    docids = [d.docid for d in data.corpus]
    qids = [q.qid for q in data.queries]
    assert len(set(docids)) == len(docids)
    assert len(set(qids)) == len(qids)
    assert [a.qid for a in data.answers] == qids
    assert {r.docid for r in data.qrels} <= set(docids)
    assert {r.qid for r in data.qrels} <= set(qids)
    keys = [(r.qid, r.docid, r.annotator) for r in data.qrels]
    assert len(set(keys)) == len(keys)
    tables = data.tables()  # the Arrow schemas accept every record
    assert tables["queries"].num_rows == len(qids)


def _raises(fn, *needles: str) -> DataError:
    with pytest.raises(DataError) as info:
        fn()
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))
    return info.value


def test_registry_names_these_modules():
    assert loader("musique") is musique
    assert loader("2wikimultihopqa") is twowiki
    assert loader("strategyqa") is strategyqa
    assert loader("ambigqa") is ambigqa
    assert musique.RAW_FILES == {"questions": True}
    assert twowiki.RAW_FILES == {"questions": True, "passages": False}
    assert strategyqa.RAW_FILES == {"questions": True, "paragraphs": False, "decompositions": False}
    assert ambigqa.RAW_FILES == {"questions": True, "passages": False}


# --------------------------------------------------------------------------- MuSiQue


@pytest.fixture(scope="module")
def musique_file() -> Path:
    return RAW / "musique" / "musique_train_100.jsonl"


def test_musique_real_sample(musique_file: Path):
    raw = [json.loads(line) for line in musique_file.read_text(encoding="utf-8").splitlines()]
    records = [p for r in raw for p in r["paragraphs"]]
    assert len(records) == 2000
    unique = {(p["title"], p["paragraph_text"]) for p in records}
    supporting = sum(p["is_supporting"] for p in records)
    assert (len(unique), supporting) == (1890, 237)

    # the stricter mode (the paper's, every paragraph relevant: tests/data/test_relevance.py)
    data = musique.load({"questions": musique_file}, "train", relevance="supporting")
    _check_consistent(data)
    assert len(data.queries) == 100
    assert len(data.corpus) == len(unique)
    assert {(d.title, d.text) for d in data.corpus} == unique
    assert len(data.qrels) == supporting
    assert all(r.relevance == 1 and r.annotator == "" for r in data.qrels)
    assert Counter(q.question_type for q in data.queries) == {"2hop": 68, "3hop": 27, "4hop": 5}

    first = raw[0]
    q, a = data.queries[0], data.answers[0]
    assert q.qid == "2hop__150763_14904"
    assert q.decomposition == [s["question"] for s in first["question_decomposition"]]
    assert a.answer_type == "aliases" and a.aliases == ["G. Stanley Hall", "Stanley Hall"]
    gold = {text_docid(p["title"], p["paragraph_text"]) for p in first["paragraphs"] if p["is_supporting"]}
    assert {r.docid for r in data.qrels if r.qid == q.qid} == gold
    meta = json.loads(q.meta)
    assert meta["answerable"] is True and meta["shape"] == "2hop"
    assert meta["decomposition_answers"] == ["American Psychological Association", "G. Stanley Hall"]
    # In MuSiQue every sub-question's support paragraph is exactly a supporting one.
    for q in data.queries:
        assert set(json.loads(q.meta)["decomposition_support"]) == {r.docid for r in data.qrels if r.qid == q.qid}


def test_musique_jsonl_equals_json_list_and_limit(musique_file: Path, tmp_path: Path):
    raw = [json.loads(line) for line in musique_file.read_text(encoding="utf-8").splitlines()]
    # extensions deliberately misleading: detection is by content
    jsonl = tmp_path / "musique.json"
    jsonl.write_text("\n".join(json.dumps(r) for r in raw[:10]) + "\n", encoding="utf-8")
    listed = tmp_path / "musique.jsonl"  # the 100 records as one JSON list (the HippoRAG copy's form)
    listed.write_text(json.dumps(raw), encoding="utf-8")
    from_lines = musique.load({"questions": jsonl}, "train")
    from_list = musique.load({"questions": listed}, "train", limit=10)
    assert from_lines == from_list
    assert len(from_list.queries) == 10
    expected = {text_docid(p["title"], p["paragraph_text"]) for r in raw[:10] for p in r["paragraphs"]}
    assert {d.docid for d in from_list.corpus} == expected


def _musique_record() -> dict:
    return {
        "id": "2hop__1_2",
        "question": "Q?",
        "answer": "A",
        "answer_aliases": ["A", "a."],
        "answerable": False,
        "paragraphs": [
            {"idx": 0, "title": "T0", "paragraph_text": "p0", "is_supporting": True},
            {"idx": 1, "title": "T1", "paragraph_text": "p1", "is_supporting": False},
        ],
        "question_decomposition": [
            {"id": 1, "question": "q1", "answer": "x", "paragraph_support_idx": 0},
            {"id": 2, "question": "q2 #1", "answer": "A", "paragraph_support_idx": None},
        ],
    }


def test_musique_keeps_unanswerable_and_dedups_aliases(tmp_path: Path):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps(_musique_record()) + "\n", encoding="utf-8")
    data = musique.load({"questions": f}, "dev")
    assert data.answers[0].aliases == ["A", "a."]
    meta = json.loads(data.queries[0].meta)
    assert meta["answerable"] is False
    assert meta["decomposition_support"] == [text_docid("T0", "p0"), None]


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda r: r.pop("question"), ["2hop__1_2", "'question'", "missing"]),
        (lambda r: r.update(answer=3), ["2hop__1_2", "'answer'", "expected str"]),
        (lambda r: r["paragraphs"][1].update(is_supporting="yes"), ["paragraphs[1]", "is_supporting"]),
        (
            lambda r: r["question_decomposition"][0].update(paragraph_support_idx=7),
            ["2hop__1_2", "question_decomposition[0].paragraph_support_idx", "absent"],
        ),
    ],
)
def test_musique_malformed(tmp_path: Path, mutate, needles):
    rec = _musique_record()
    mutate(rec)
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    _raises(lambda: musique.load({"questions": f}, "dev"), str(f), *needles)


def test_musique_truncated(tmp_path: Path):
    f = tmp_path / "cut.json"
    f.write_text(json.dumps([_musique_record()])[:-40], encoding="utf-8")
    _raises(lambda: musique.load({"questions": f}, "dev"), str(f), "not valid JSON")
    g = tmp_path / "cut.jsonl"
    g.write_text(json.dumps(_musique_record()) + "\n" + json.dumps(_musique_record())[:50] + "\n", encoding="utf-8")
    _raises(lambda: musique.load({"questions": g}, "dev"), str(g), "line 2", "not valid JSON")


# --------------------------------------------------------------------------- 2WikiMultihopQA


@pytest.fixture(scope="module")
def twowiki_files() -> dict[str, Path]:
    # the bundled 2 dev records, and the first 641 of HippoRAG's 6,119 distractor passages (the
    # 641st is the one that is also a context paragraph; tests/fixtures/README.md)
    return {
        "questions": RAW / "2wikimultihopqa" / "dev.json",
        "passages": FIXTURE_DATA / "2wikimultihopqa" / "distractor_corpus_641.json",
    }


def test_twowiki_real_dev(twowiki_files: dict[str, Path]):
    raw = json.loads(twowiki_files["questions"].read_text(encoding="utf-8"))
    # the stricter mode (the paper's, all 10 context paragraphs: tests/data/test_relevance.py)
    data = twowiki.load({"questions": twowiki_files["questions"]}, "dev", relevance="supporting")
    _check_consistent(data)
    assert [q.qid for q in data.queries] == ["8813f87c0bdd11eba7f7acde48001122", "61a46987092f11ebbdaeac1f6bf848b6"]
    assert [q.question_type for q in data.queries] == ["compositional", "comparison"]
    assert [a.aliases for a in data.answers] == [["Małgorzata Braunek"], ["The Mask Of Fu Manchu"]]
    assert len(data.corpus) == 20
    for rec in raw:
        sentences = {title: sents for title, sents in rec["context"]}
        titles = {title for title, _ in rec["supporting_facts"]}
        gold = {text_docid(t, " ".join(sentences[t])) for t in titles}
        assert {r.docid for r in data.qrels if r.qid == rec["_id"]} == gold
    assert len(data.qrels) == 4  # two supporting titles per question
    by_id = {d.docid: d for d in data.corpus}
    # The title sentence and the rest are two sentences in the raw record, joined by one space.
    text = (
        "Polish-Russian War (Wojna polsko-ruska) is a 2009 Polish film directed by Xawery Żuławski "
        "based on the novel Polish-Russian War under the white-red flag by Dorota Masłowska."
    )
    doc = by_id[text_docid("Polish-Russian War (film)", text)]
    assert doc.title == "Polish-Russian War (film)"


def test_twowiki_with_passages(twowiki_files: dict[str, Path]):
    raw = json.loads(twowiki_files["questions"].read_text(encoding="utf-8"))
    passages = json.loads(twowiki_files["passages"].read_text(encoding="utf-8"))
    assert len(passages) == 641
    passage_ids = {text_docid(p["title"], p["text"]) for p in passages}
    context_ids = {text_docid(t, " ".join(s)) for r in raw for t, s in r["context"]}
    data = twowiki.load(twowiki_files, "dev")
    _check_consistent(data)
    ids = {d.docid for d in data.corpus}
    assert passage_ids <= ids
    assert ids == passage_ids | context_ids
    # "Minamoto no Chikako" is both a context paragraph and a distractor passage: one document.
    assert len(context_ids & passage_ids) == 1
    assert len(data.corpus) == 641 + 20 - 1


def test_twowiki_has_no_hidden_cap(tmp_path: Path):
    records = [
        {
            "_id": f"q{i}",
            "type": "comparison",
            "question": f"Question {i}?",
            "answer": "yes",
            "context": [[f"T{i}", ["s0.", "s1."]], ["Shared", ["same text."]]],
            "supporting_facts": [[f"T{i}", 1]],
            "evidences": [],
        }
        for i in range(1300)
    ]
    f = tmp_path / "dev.json"
    f.write_text(json.dumps(records), encoding="utf-8")
    data = twowiki.load({"questions": f}, "dev", relevance="supporting")
    assert len(data.queries) == 1300 and len(data.corpus) == 1301 and len(data.qrels) == 1300
    # the paper's mode: both context paragraphs of each question (2 x 1300)
    assert len(twowiki.load({"questions": f}, "dev").qrels) == 2600
    assert data.corpus[0].text == "s0. s1."
    assert len(twowiki.load({"questions": f}, "dev", limit=5).queries) == 5


def _twowiki_record() -> dict:
    return {
        "_id": "abc123",
        "type": "inference",
        "question": "Who?",
        "answer": "X",
        "context": [["A", ["a0.", "a1."]], ["B", ["b0."]]],
        "supporting_facts": [["A", 0], ["B", 0]],
        "evidences": [["A", "rel", "X"]],
    }


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda r: r.pop("answer"), ["abc123", "'answer'", "missing"]),
        (lambda r: r.update(context="A"), ["abc123", "'context'", "expected list"]),
        (lambda r: r["context"].__setitem__(1, ["B", "b0."]), ["abc123", "context[1]"]),
        (lambda r: r["supporting_facts"].append(["Z", 0]), ["abc123", "'supporting_facts'", "'Z'", "not among"]),
        (lambda r: r["supporting_facts"].__setitem__(0, ["A", "0"]), ["abc123", "supporting_facts[0]"]),
    ],
)
def test_twowiki_malformed(tmp_path: Path, mutate, needles):
    rec = _twowiki_record()
    mutate(rec)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps([rec]), encoding="utf-8")
    _raises(lambda: twowiki.load({"questions": f}, "dev"), str(f), *needles)


def test_twowiki_truncated_and_bad_passages(tmp_path: Path):
    f = tmp_path / "cut.json"
    f.write_text(json.dumps([_twowiki_record()])[:-10], encoding="utf-8")
    _raises(lambda: twowiki.load({"questions": f}, "dev"), str(f), "not valid JSON")
    good = tmp_path / "dev.json"
    good.write_text(json.dumps([_twowiki_record()]), encoding="utf-8")
    p = tmp_path / "passages.json"
    p.write_text(json.dumps([{"title": "C", "text": "c."}, {"title": "D"}]), encoding="utf-8")
    _raises(lambda: twowiki.load({"questions": good, "passages": p}, "dev"), str(p), "index 1", "'text'", "missing")


# --------------------------------------------------------------------------- StrategyQA


@pytest.fixture(scope="module")
def strategyqa_files() -> dict[str, Path]:
    d = RAW / "strategyqa"
    return {"questions": d / "dev.json", "decompositions": d / "bart_decomp_dev_predictions.jsonl"}


def _evidence_ids(annotator: list) -> set[str]:
    return {pid for step in annotator for item in step if isinstance(item, list) for pid in item}


def test_strategyqa_real_dev(strategyqa_files: dict[str, Path]):
    raw = json.loads(strategyqa_files["questions"].read_text(encoding="utf-8"))
    data = strategyqa.load(strategyqa_files, "dev")
    _check_consistent(data)
    assert len(data.queries) == 229
    assert data.corpus == [] and data.qrels == []  # Recall needs the paragraphs file
    assert [a.boolean for a in data.answers] == [r["answer"] for r in raw]
    assert Counter(a.boolean for a in data.answers) == {False: 122, True: 107}
    assert all(a.answer_type == "boolean" and a.aliases == (["yes"] if a.boolean else ["no"]) for a in data.answers)
    preds = {}
    with open(strategyqa_files["decompositions"], encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            preds[rec["qid"]] = rec["decomposition"]
    for rec, q in zip(raw, data.queries):
        assert q.qid == rec["qid"]
        assert q.decomposition == rec["decomposition"] and q.facts == rec["facts"]
        assert len(q.evidence) == len(rec["evidence"])
        assert all(len(steps) == len(rec["decomposition"]) for steps in q.evidence)
        for steps, raw_steps in zip(q.evidence, rec["evidence"]):
            assert {p for s in steps for p in s} == _evidence_ids(raw_steps)
        meta = json.loads(q.meta)
        assert meta["term"] == rec["term"] and meta["description"] == rec["description"]
        assert meta["predicted_decomposition"] == preds[rec["qid"]]
    first = data.queries[0]
    assert first.evidence[0] == [["Albany, Georgia-1"], ["Albany, New York-2"], [], [], []]


def test_strategyqa_with_paragraphs(strategyqa_files: dict[str, Path], tmp_path: Path):
    """A paragraphs file in the official shape naming every evidence id gives, in mode
    `paragraphs`, one qrel per (question, annotator, paragraph); the paper's mode (qrels by
    title) is tests/data/test_relevance.py."""
    raw = json.loads(strategyqa_files["questions"].read_text(encoding="utf-8"))
    ids = sorted({pid for r in raw for ann in r["evidence"] for pid in _evidence_ids(ann)})
    paragraphs = {
        pid: {
            "title": pid.rsplit("-", 1)[0],
            "section": "",
            "headers": [],
            "para_index": int(pid.rsplit("-", 1)[1]),
            "content": f"text of {pid}",
        }
        for pid in ids
    }
    pfile = tmp_path / "strategyqa_train_paragraphs.json"
    pfile.write_text(json.dumps(paragraphs), encoding="utf-8")
    data = strategyqa.load(
        {"questions": strategyqa_files["questions"], "paragraphs": pfile}, "dev", relevance="paragraphs"
    )
    _check_consistent(data)
    assert len(data.corpus) == len(ids)
    assert sum(len(_evidence_ids(ann)) for r in raw for ann in r["evidence"]) == len(data.qrels)
    assert {r.annotator for r in data.qrels} == {"0", "1", "2", "3"}  # two questions have 4 annotators
    qid = raw[0]["qid"]
    assert sorted((r.annotator, r.docid) for r in data.qrels if r.qid == qid) == [
        ("0", "Albany, Georgia-1"),
        ("0", "Albany, New York-2"),
        ("1", "Albany, Georgia-35"),
        ("1", "Albany, New York-2"),
        ("2", "Albany, Georgia-1"),
        ("2", "Albany, New York-2"),
    ]
    doc = next(d for d in data.corpus if d.docid == "Albany, Georgia-1")
    assert (doc.title, doc.text) == ("Albany, Georgia", "text of Albany, Georgia-1")

    del paragraphs["Albany, Georgia-35"]
    pfile.write_text(json.dumps(paragraphs), encoding="utf-8")
    _raises(
        lambda: strategyqa.load({"questions": strategyqa_files["questions"], "paragraphs": pfile}, "dev"),
        str(strategyqa_files["questions"]),
        qid,
        "'evidence'",
        "Albany, Georgia-35",
        "absent",
    )


def _strategyqa_record() -> dict:
    return {
        "qid": "q1",
        "term": "T",
        "description": "d",
        "question": "Is it?",
        "answer": True,
        "facts": ["f"],
        "decomposition": ["s1", "s2"],
        "evidence": [[[["P-1"]], ["operation"]], [["no_evidence"], ["operation"]]],
    }


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda r: r.pop("facts"), ["'q1'", "'facts'", "missing"]),
        (lambda r: r.update(answer="yes"), ["'q1'", "'answer'", "expected bool"]),
        (lambda r: r["evidence"][0].__setitem__(1, ["maybe"]), ["'q1'", "evidence[0][1][0]", "unknown marker"]),
        (lambda r: r["evidence"][1].__setitem__(0, [[1]]), ["'q1'", "evidence[1][0][0]"]),
    ],
)
def test_strategyqa_malformed(tmp_path: Path, mutate, needles):
    rec = _strategyqa_record()
    mutate(rec)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps([rec]), encoding="utf-8")
    _raises(lambda: strategyqa.load({"questions": f}, "dev"), str(f), *needles)


def test_strategyqa_truncated_and_missing_prediction(tmp_path: Path):
    f = tmp_path / "cut.json"
    f.write_text(json.dumps([_strategyqa_record()])[:-5], encoding="utf-8")
    _raises(lambda: strategyqa.load({"questions": f}, "dev"), str(f), "not valid JSON")
    good = tmp_path / "dev.json"
    good.write_text(json.dumps([_strategyqa_record()]), encoding="utf-8")
    d = tmp_path / "pred.jsonl"
    d.write_text(json.dumps({"qid": "other", "decomposition": ["x"]}) + "\n", encoding="utf-8")
    _raises(lambda: strategyqa.load({"questions": good, "decompositions": d}, "dev"), str(d), "'q1'", "no predicted")
    p = tmp_path / "paras.json"
    p.write_text(json.dumps({"P-1": {"title": "P", "para_index": 1}}), encoding="utf-8")
    _raises(lambda: strategyqa.load({"questions": good, "paragraphs": p}, "dev"), str(p), "'P-1'", "'content'")


# --------------------------------------------------------------------------- AmbigQA


def test_ambigqa_real_dev_light():
    path = RAW / "ambigqa" / "dev_light_40.json"  # the first 40 of the light dev's 2,002 (830 single)
    raw = json.loads(path.read_text(encoding="utf-8"))
    single = sum(all(a["type"] == "singleAnswer" for a in r["annotations"]) for r in raw)
    assert (len(raw), single) == (40, 11)
    data = ambigqa.load({"questions": path}, "dev")
    _check_consistent(data)
    assert [q.qid for q in data.queries] == [r["id"] for r in raw]
    assert Counter(q.question_type for q in data.queries) == {"single": single, "multi": len(raw) - single}
    assert data.corpus == [] and data.qrels == []
    for rec, ans in zip(raw, data.answers):
        assert ans.answer_type == "interpretations"
        assert [a.type for a in ans.annotations] == [a["type"] for a in rec["annotations"]]
        pooled = []
        for a in rec["annotations"]:
            lists = [a["answer"]] if a["type"] == "singleAnswer" else [p["answer"] for p in a["qaPairs"]]
            for x in (x for lst in lists for x in lst):
                if x not in pooled:
                    pooled.append(x)
        assert ans.aliases == pooled
    multi = next(a for a, r in zip(data.answers, raw) if r["annotations"][0]["type"] == "multipleQAs")
    pair = multi.annotations[0].answers[0]
    assert pair == {
        "question": "Who is the 4th chairman of african union commission?",
        "aliases": ["Moussa Faki", "Moussa Faki Mahamat"],
    }
    assert data.answers[0].annotations[0].answers == [{"question": "", "aliases": ["Tony Goldwyn", "Goldwyn"]}]
    assert data.tables()["answers"].num_rows == 40


def _dpr_tsv(tmp_path: Path, n: int = 40) -> tuple[Path, dict[str, tuple[str, str]]]:
    """A psgs_w100.tsv-shaped file from the fixture's first passages, quoted as DPR quotes."""
    fx = json.loads((FIXTURE_DATA / "ambigqa" / "fixture_passages_40.json").read_text(encoding="utf-8"))
    ids = list(fx["passages"])[:n]
    rows = {pid: (fx["passages"][pid], fx["titles"][pid]) for pid in ids}
    rows[ids[0]] = ('he said "hello"\tand left', rows[ids[0]][1])  # DPR quotes text with "" and tabs
    lines = ["id\ttext\ttitle"]
    for pid, (text, title) in rows.items():
        lines.append(f'{pid}\t"{text.replace(chr(34), chr(34) * 2)}"\t{title}')
    f = tmp_path / "psgs_w100.tsv"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f, rows


def test_ambigqa_fixture_with_passages(tmp_path: Path):
    # DEXTER's 11-question fixture: the first 11 records of the bundled light dev sample
    questions = tmp_path / "fixture_dev_11.json"
    questions.write_text(json.dumps(json.loads((RAW / "ambigqa" / "dev_light_40.json").read_text())[:11]))
    tsv, rows = _dpr_tsv(tmp_path)
    data = ambigqa.load({"questions": questions, "passages": tsv}, "dev")
    _check_consistent(data)
    raw = json.loads(questions.read_text(encoding="utf-8"))
    assert len(data.queries) == 11
    assert [q.qid for q in data.queries] == [r["id"] for r in raw]
    assert {d.docid: (d.text, d.title) for d in data.corpus} == rows
    assert data.corpus[0].text == 'he said "hello"\tand left'
    assert data.qrels == []  # the fixture records carry no viewed_doc_titles


def test_ambigqa_qrels_from_viewed_titles(tmp_path: Path):
    tsv, rows = _dpr_tsv(tmp_path)
    title = rows[next(iter(rows))][1]  # fixture titles are lower case; annotators' are not
    expected = sorted(pid for pid, (_, t) in rows.items() if t == title)
    records = [
        {
            "id": "9",
            "question": "a?",
            "annotations": [{"type": "singleAnswer", "answer": ["x"]}],
            "viewed_doc_titles": [title.title(), "Page Not In Corpus"],
        },
        {"id": "7", "question": "b?", "annotations": [{"type": "singleAnswer", "answer": ["y"]}]},
    ]
    q = tmp_path / "dev.json"
    q.write_text(json.dumps(records), encoding="utf-8")
    data = ambigqa.load({"questions": q, "passages": tsv}, "dev", relevance="viewed")
    _check_consistent(data)
    assert sorted(r.docid for r in data.qrels if r.qid == "9") == expected
    assert [r for r in data.qrels if r.qid == "7"] == []  # no carry-over of the previous evidence
    meta = json.loads(data.queries[0].meta)
    assert meta["unmatched_titles"] == ["Page Not In Corpus"]
    assert [q.qid for q in data.queries] == ["9", "7"]


def _ambig_record() -> dict:
    return {
        "id": "-42",
        "question": "Who?",
        "annotations": [
            {"type": "singleAnswer", "answer": ["A"]},
            {"type": "multipleQAs", "qaPairs": [{"question": "Who 1?", "answer": ["B", "A"]}]},
        ],
    }


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda r: r.pop("annotations"), ["'-42'", "'annotations'", "missing"]),
        (lambda r: r.update(id=42), ["index 0", "'id'", "expected str"]),
        (lambda r: r["annotations"][0].update(type="other"), ["'-42'", "annotations[0].type", "unknown"]),
        (lambda r: r["annotations"][1]["qaPairs"][0].update(answer="B"), ["'-42'", "annotations[1].qaPairs[0].answer"]),
        (lambda r: r.update(viewed_doc_titles="A"), ["'-42'", "'viewed_doc_titles'"]),
    ],
)
def test_ambigqa_malformed(tmp_path: Path, mutate, needles):
    rec = _ambig_record()
    mutate(rec)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps([rec]), encoding="utf-8")
    _raises(lambda: ambigqa.load({"questions": f}, "dev"), str(f), *needles)


def test_ambigqa_truncated_and_bad_tsv(tmp_path: Path):
    good = tmp_path / "dev.json"
    good.write_text(json.dumps([_ambig_record()]), encoding="utf-8")
    data = ambigqa.load({"questions": good}, "dev")
    assert data.answers[0].aliases == ["A", "B"] and data.queries[0].question_type == "multi"
    f = tmp_path / "cut.json"
    f.write_text(json.dumps([_ambig_record()])[:-3], encoding="utf-8")
    _raises(lambda: ambigqa.load({"questions": f}, "dev"), str(f), "not valid JSON")
    cases = {
        "id\ttitle\ttext\n1\tx\tX\n": ["line 1", "'header'"],
        "id\ttext\ttitle\n1\tx\tX\n2\ty\n": ["line 3", "3 tab-separated columns"],
        "id\ttext\ttitle\n1\tx\tX\n1\ty\tY\n": ["'1'", "'id'", "duplicate"],
    }
    for i, (content, needles) in enumerate(cases.items()):
        t = tmp_path / f"p{i}.tsv"
        t.write_text(content, encoding="utf-8")
        _raises(lambda t=t: ambigqa.load({"questions": good, "passages": t}, "dev"), str(t), *needles)
