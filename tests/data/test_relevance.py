"""Relevance modes (`datasets.<name>.relevance`): the paper's (DEXTER §3.1 + the original
toolkit, ../shared/paper/dexter_toolkit.md section 2) and the stricter alternatives, per dataset,
on the bundled sample, vendored real slices and small hand-written files. Each count is
checked by hand against the raw file (named in the test)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from cqabench.common.errors import ConfigError
from cqabench.data.datasets import (
    DATASETS,
    ambigqa,
    finqa,
    has_gold_evidence,
    loader,
    musique,
    relevance_modes,
    strategyqa,
    tatqa,
    twowiki,
)
from cqabench.data.datasets.common import text_docid
from cqabench.data.normalize import normalize_answer
from cqabench.data.prepare import prepare

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "resources" / "raw"
FIXTURE_DATA = ROOT / "tests" / "fixtures" / "data"  # vendored real slices (tests/fixtures/README.md)


def _write(path: Path, obj: object) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def _qrels_by_qid(data) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in data.qrels:
        if r.relevance > 0:
            out.setdefault(r.qid, []).append(r.docid)
    return out


# ---- the registry ----------------------------------------------------------------------------


def test_every_loader_names_its_modes_paper_first() -> None:
    expected = {
        "musique": ["paper", "supporting"],
        "2wikimultihopqa": ["paper", "supporting"],
        "ambigqa": ["paper", "viewed"],
        "finqa": ["paper", "gold_inds"],
        "strategyqa": ["paper", "paragraphs"],
        "tatqa": ["paper", "order", "rows"],
        "ottqa": ["paper", "section_titles"],
        "tanq": ["paper"],
    }
    assert {ds: list(relevance_modes(ds)) for ds in DATASETS} == expected
    assert all(isinstance(v, str) and v for ds in DATASETS for v in relevance_modes(ds).values())


@pytest.mark.parametrize("dataset", DATASETS)
def test_unknown_mode_names_the_config_key_and_the_valid_modes(dataset: str, tmp_path: Path) -> None:
    module = loader(dataset)
    files = {"questions": tmp_path / "never-read.json"}
    with pytest.raises(ConfigError) as exc:
        list(module.records(files, "dev", relevance="supportive"))
    message = str(exc.value)
    assert f"datasets.{dataset}.relevance" in message and "'supportive'" in message
    assert all(mode in message for mode in module.RELEVANCE)
    with pytest.raises(ConfigError, match=f"datasets.{dataset}.relevance"):
        has_gold_evidence(dataset, files, relevance="supportive")


def test_prepare_refuses_an_unknown_mode_before_reading(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"datasets\.musique\.relevance: unknown mode 'viewed'"):
        prepare(
            "musique",
            "train",
            {"questions": RAW / "musique" / "musique_train_100.jsonl"},
            tmp_path / "out",
            relevance="viewed",
        )  # AmbigQA's mode, not MuSiQue's
    assert not (tmp_path / "out").exists()


# ---- MuSiQue ----------------------------------------------------------------------------------


def test_musique_paper_every_paired_paragraph_is_relevant() -> None:
    """The sample's 100 records have 20 paragraphs each, all distinct within a record (checked
    with a set over (title, paragraph_text)): 2000 qrels, against 237 supporting."""
    path = RAW / "musique" / "musique_train_100.jsonl"
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    paper = musique.load({"questions": path}, "train")
    strict = musique.load({"questions": path}, "train", relevance="supporting")
    assert (len(paper.qrels), len(strict.qrels)) == (2000, 237)
    first = raw[0]
    assert first["id"] == "2hop__150763_14904" and len(first["paragraphs"]) == 20
    assert _qrels_by_qid(paper)[first["id"]] == [
        text_docid(p["title"], p["paragraph_text"]) for p in first["paragraphs"]
    ]
    # supporting is a subset of paper for every question; the corpus is the same in both modes
    for qid, docs in _qrels_by_qid(strict).items():
        assert set(docs) <= set(_qrels_by_qid(paper)[qid])
    assert [d.docid for d in paper.corpus] == [d.docid for d in strict.corpus]


# ---- 2WikiMultihopQA ------------------------------------------------------------------------


def test_twowiki_paper_all_ten_context_paragraphs_on_the_sample() -> None:
    """resources/raw/2wikimultihopqa/dev.json, record 0 (8813f87c...): 10 context titles, counted
    by hand: Maheen Khan, Viktor Yeliseyev, Alice Washburn, Minamoto no Chikako, Polish-Russian
    War (film), A Snow White Christmas, Snow White and the Three Stooges, Xawery Żuławski, Snow
    White and the Seven Dwarfs (1955 film), Liberty Ross; 2 of them in supporting_facts."""
    path = RAW / "2wikimultihopqa" / "dev.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    paper = _qrels_by_qid(twowiki.load({"questions": path}, "dev"))
    strict = _qrels_by_qid(twowiki.load({"questions": path}, "dev", relevance="supporting"))
    rec = raw[0]
    assert [t for t, _ in rec["context"]][:2] == ["Maheen Khan", "Viktor Yeliseyev"]
    assert paper[rec["_id"]] == [text_docid(t, " ".join(s)) for t, s in rec["context"]]
    assert (len(paper[rec["_id"]]), len(strict[rec["_id"]])) == (10, 2)
    assert [len(v) for v in paper.values()] == [10, 10]


def test_twowiki_paper_on_38_dev_records() -> None:
    """dev_38.json: 38 records of 10 context paragraphs each (the data README), every one of
    them relevant: 380 qrels."""
    path = FIXTURE_DATA / "2wikimultihopqa" / "dev_38.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    gold = _qrels_by_qid(twowiki.load({"questions": path}, "dev"))
    assert sum(map(len, gold.values())) == 380
    for rec in raw:
        assert set(gold[rec["_id"]]) == {text_docid(t, " ".join(s)) for t, s in rec["context"]}


# ---- FinQA --------------------------------------------------------------------------------------


def _check_finqa_paper(raw: list[dict], data) -> None:
    docs = {d.docid: d for d in data.corpus}
    gold = _qrels_by_qid(data)
    assert len(docs) == 3 * len(raw)
    for rec in raw:
        qid = rec["id"]
        assert gold[qid] == [f"{qid}.table", f"{qid}.pre", f"{qid}.post"]  # the toolkit's order
        table, pre, post = (docs[d] for d in gold[qid])
        assert (table.kind, table.table_header, table.table_rows) == ("table", rec["table"][0], rec["table"][1:])
        assert pre.text == "".join(rec["pre_text"]) and post.text == "".join(rec["post_text"])
        assert table.title == pre.title == post.title == ""


def test_finqa_paper_three_documents_per_question() -> None:
    """The bundled record (the toolkit's own test fixture, V/2008/page_17.pdf-1): the pre text is
    joined with no separator, as dexter_toolkit.md shows ("...diners club .with the exception")."""
    path = RAW / "finqa" / "dev.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    data = finqa.load({"questions": path}, "dev")
    _check_finqa_paper(raw, data)
    pre = next(d for d in data.corpus if d.docid == "V/2008/page_17.pdf-1.pre")
    assert "diners club .with the exception of discover" in pre.text
    table = next(d for d in data.corpus if d.docid == "V/2008/page_17.pdf-1.table")
    assert table.table_header[0] == "company" and table.table_rows[0][:2] == ["visa inc. ( 1 )", "$ 2457"]
    assert len(finqa.load({"questions": path}, "dev", relevance="gold_inds").qrels) == 1


def test_finqa_paper_on_40_dev_records() -> None:
    """dev_40.json, the first 40 records of dev_200.json: 40 questions on 37 pages (three pages
    carry two questions each) -> 120 documents and 120 qrels in mode paper; mode gold_inds has
    one table + one document per sentence per page instead (37 + 959 sentences, counted in the file)."""
    path = FIXTURE_DATA / "finqa" / "dev_40.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    data = finqa.load({"questions": path}, "dev")
    _check_finqa_paper(raw, data)
    assert len(data.qrels) == 120
    pages = {r["filename"]: len(r["pre_text"]) + len(r["post_text"]) for r in raw}
    strict = finqa.load({"questions": path}, "dev", relevance="gold_inds")
    assert (len(pages), sum(pages.values())) == (37, 959)
    assert len(strict.corpus) == len(pages) + sum(pages.values())


def test_finqa_paper_blank_part_gets_no_document(tmp_path: Path) -> None:
    """A record whose post_text joins to blank: no `.post` document (every retriever refuses a
    document without title and text), two qrels, and meta says which part is missing."""
    rec = json.loads((RAW / "finqa" / "dev.json").read_text(encoding="utf-8"))[0]
    rec["post_text"] = [" ", ""]
    data = finqa.load({"questions": _write(tmp_path / "dev.json", [rec])}, "dev")
    assert _qrels_by_qid(data)[rec["id"]] == [f"{rec['id']}.table", f"{rec['id']}.pre"]
    assert json.loads(data.queries[0].meta)["empty_parts"] == ["post"]


# ---- AmbigQA --------------------------------------------------------------------------------------


def _tsv(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    lines = ["id\ttext\ttitle"] + [f'{pid}\t"{text}"\t{title}' for pid, text, title in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_ambigqa_answer_check_on_written_passages(tmp_path: Path) -> None:
    """Question A viewed "Cats" and "Dogs"; its answers: annotator 0 "The Beatles" (singleAnswer),
    annotator 1 two interpretations, "Ringo Starr" / "U.S.". Hand-checked per passage:
    p1 "beatles," (article and comma dropped) -> 1; p2 "RINGO STARR!" (second annotator, case,
    punctuation) -> 1; p3 "in the us" ("U.S." normalized "us") -> 1; p4 "beatlesque" (not whole
    words) -> 0; p5 no answer -> 0; p6 "Ringo Starr's drums" (possessive) -> 1; p7 (title "Birds",
    not viewed) -> no qrel. Question B viewed "Dogs" too, answer "no": p5 "not now" -> 0."""
    rows = [
        ("p1", "they loved beatles, a band.", "Cats"),
        ("p2", "the drummer was RINGO STARR! yes", "Cats"),
        ("p3", "it was popular in the us in 1964", "Dogs"),
        ("p4", "a beatlesque sound", "Dogs"),
        ("p5", "not now, maybe later", "Dogs"),
        ("p6", "Ringo Starr's drums", "Dogs"),
        ("p7", "the beatles again", "Birds"),
    ]
    passages = _tsv(tmp_path / "psgs.tsv", rows)
    questions = _write(
        tmp_path / "dev.json",
        [
            {
                "id": "A",
                "question": "who?",
                "viewed_doc_titles": ["cats", "Dogs"],
                "annotations": [
                    {"type": "singleAnswer", "answer": ["The Beatles"]},
                    {
                        "type": "multipleQAs",
                        "qaPairs": [
                            {"question": "drummer?", "answer": ["Ringo Starr"]},
                            {"question": "where?", "answer": ["U.S."]},
                        ],
                    },
                ],
            },
            {
                "id": "B",
                "question": "is it?",
                "viewed_doc_titles": ["Dogs"],
                "annotations": [{"type": "singleAnswer", "answer": ["no"]}],
            },
        ],
    )
    files = {"questions": questions, "passages": passages}
    paper = ambigqa.load(files, "dev")
    grades = {(r.qid, r.docid): r.relevance for r in paper.qrels}
    assert grades == {
        ("A", "p1"): 1,
        ("A", "p2"): 1,
        ("A", "p3"): 1,
        ("A", "p4"): 0,
        ("A", "p5"): 0,
        ("A", "p6"): 1,
        ("B", "p3"): 0,
        ("B", "p4"): 0,
        ("B", "p5"): 0,
        ("B", "p6"): 0,
    }
    viewed = ambigqa.load(files, "dev", relevance="viewed")
    assert {(r.qid, r.docid): r.relevance for r in viewed.qrels} == dict.fromkeys(grades, 1)


def test_ambigqa_answer_check_on_the_sample_passages(tmp_path: Path) -> None:
    """The bundled 1,100 passages, viewed (all 549 titles) by the first 11 sample questions:
    every relevant passage holds a gold alias as a run of whole words of its normalized text,
    every other viewed passage none (checked here on tokens, independently of the loader's
    padded strings). Hand check: "Who is the prime minister of england 2018?" (Theresa May)
    has 33 relevant passages = `grep -ic "theresa may" psgs_w100_sample.tsv` (one passage a
    line; each occurrence is followed by a space, punctuation or "'s")."""
    tsv = RAW / "ambigqa" / "psgs_w100_sample.tsv"
    with open(tsv, encoding="utf-8") as fh:
        titles = sorted({row["title"] for row in csv.DictReader(fh, delimiter="\t")})
    assert len(titles) == 549
    raw = json.loads((RAW / "ambigqa" / "dev_light_40.json").read_text(encoding="utf-8"))[:11]
    for rec in raw:
        rec["viewed_doc_titles"] = titles
    data = ambigqa.load({"questions": _write(tmp_path / "dev.json", raw), "passages": tsv}, "dev")
    text = {d.docid: d.text for d in data.corpus}
    aliases = {a.qid: a.aliases for a in data.answers}

    def holds(passage: str, alias: str) -> bool:
        for norm_p, norm_a in (
            (normalize_answer(passage), normalize_answer(alias)),
            (
                normalize_answer(ambigqa._PUNCT_RUN.sub(" ", passage)),
                normalize_answer(ambigqa._PUNCT_RUN.sub(" ", alias)),
            ),
        ):
            p, a = norm_p.split(), norm_a.split()
            if a and any(p[i : i + len(a)] == a for i in range(len(p) - len(a) + 1)):
                return True
        return False

    assert len(data.qrels) == 11 * 1100
    for r in data.qrels:
        assert (r.relevance == 1) == any(holds(text[r.docid], a) for a in aliases[r.qid]), (r.qid, r.docid)
    relevant = Counter(r.qid for r in data.qrels if r.relevance == 1)
    may = next(r["id"] for r in raw if r["question"] == "Who is the prime minister of england 2018?")
    assert relevant[may] == 33
    assert sum(relevant.values()) == 183 and len(relevant) == 11


# ---- StrategyQA -----------------------------------------------------------------------------------


def _sqa(qid: str, evidence: list) -> dict:
    return {
        "qid": qid,
        "term": "T",
        "description": "d",
        "question": f"{qid}?",
        "answer": True,
        "facts": [],
        "decomposition": ["s"],
        "evidence": evidence,
    }


def test_strategyqa_paper_qrels_by_cited_title(tmp_path: Path) -> None:
    """q1 cites "Albany, Georgia-1" (annotator 0) and "Odd-7" (annotator 1), whose title field is
    "Albany, New York" (not what its id says: found by the second pass). Relevant, by hand: every
    paragraph titled "Albany, Georgia" (-1, -2) or "Albany, New York" (-1, Odd-7); not the
    disambiguation page nor Paris. q2 cites nothing: no qrels. Mode paragraphs: the two cited ids."""
    paragraphs = {
        "Albany, New York-1": {"title": "Albany, New York", "content": "capital of New York"},
        "Albany, Georgia-1": {"title": "Albany, Georgia", "content": "a city in Georgia"},
        "Albany, Georgia (disambiguation)-1": {"title": "Albany, Georgia (disambiguation)", "content": "may mean"},
        "Albany, Georgia-2": {"title": "Albany, Georgia", "content": "its history"},
        "Odd-7": {"title": "Albany, New York", "content": "its economy"},
        "Paris-3": {"title": "Paris", "content": "a capital"},
    }
    pfile = _write(tmp_path / "paragraphs.json", paragraphs)
    qfile = _write(
        tmp_path / "dev.json",
        [
            _sqa("q1", [[[["Albany, Georgia-1"]], ["operation"]], [[["Odd-7"]]]]),
            _sqa("q2", [[["no_evidence"]]]),
        ],
    )
    files = {"questions": qfile, "paragraphs": pfile}
    paper = strategyqa.load(files, "dev")
    assert [(r.qid, r.docid, r.relevance, r.annotator) for r in paper.qrels] == [
        ("q1", "Albany, Georgia-1", 1, ""),
        ("q1", "Albany, Georgia-2", 1, ""),
        ("q1", "Albany, New York-1", 1, ""),
        ("q1", "Odd-7", 1, ""),
    ]
    strict = strategyqa.load(files, "dev", relevance="paragraphs")
    assert [(r.docid, r.annotator) for r in strict.qrels] == [("Albany, Georgia-1", "0"), ("Odd-7", "1")]
    assert paper.queries[0].evidence == strict.queries[0].evidence == [[["Albany, Georgia-1"], []], [["Odd-7"]]]
    assert strategyqa.id_title("Albany, Georgia-35") == "Albany, Georgia" and strategyqa.id_title("Odd") == "Odd"


# ---- TAT-QA --------------------------------------------------------------------------------------


def test_tatqa_paper_and_order_agree_on_the_sample() -> None:
    """The sample's 40 contexts list their paragraphs in order 1..n, so list position and the
    order field name the same paragraph for all 141 rel_paragraphs entries."""
    path = RAW / "tatqa" / "tatqa_dataset_dev.sample.json"
    paper = tatqa.load({"questions": path}, "dev")
    order = tatqa.load({"questions": path}, "dev", relevance="order")
    assert paper.qrels == order.qrels and len(paper.qrels) > 0


def test_tatqa_paper_reads_rel_paragraphs_by_position(tmp_path: Path) -> None:
    """Paragraphs listed out of order: rel "1" is the first listed (uid pB, order 2) for the
    toolkit, the one with order 1 (pA) by the order field; answer_from "text": no table."""
    ctx = {
        "table": {"uid": "t", "table": [["", "2019"], ["a", "1"]]},
        "paragraphs": [{"uid": "pB", "order": 2, "text": "second"}, {"uid": "pA", "order": 1, "text": "first"}],
        "questions": [
            {
                "uid": "q",
                "question": "which?",
                "answer": ["first"],
                "derivation": "",
                "answer_type": "span",
                "answer_from": "text",
                "rel_paragraphs": ["1"],
                "scale": "",
            }
        ],
    }
    path = _write(tmp_path / "dev.json", [ctx])
    assert [r.docid for r in tatqa.load({"questions": path}, "dev").qrels] == ["pB"]
    assert [r.docid for r in tatqa.load({"questions": path}, "dev", relevance="order").qrels] == ["pA"]


# ---- prepare writes the mode's qrels ----------------------------------------------------------


@pytest.mark.parametrize(("mode", "n_docs", "n_qrels"), [("paper", 3, 3), ("gold_inds", 66, 1)])
def test_prepare_passes_the_mode(tmp_path: Path, mode: str, n_docs: int, n_qrels: int) -> None:
    """The bundled FinQA record: 3 documents / 3 qrels (paper) or 1 table + 44 + 21 sentences
    with one gold_inds qrel (the table)."""
    import pyarrow.parquet as pq

    out = tmp_path / mode
    prepare("finqa", "dev", {"questions": RAW / "finqa" / "dev.json"}, out, relevance=mode)
    assert pq.read_table(out / "corpus.parquet").num_rows == n_docs
    assert pq.read_table(out / "qrels.parquet").num_rows == n_qrels


# ---- planning: the mode is checked, passed to prepare and recorded in every cell -----------------


def _plan_config(name: str) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "config" / name).read_text(encoding="utf-8"))


def _plan(config: dict):
    import sys

    from cqabench.planner import Environment, Plan

    return Plan(config, Environment(root=ROOT, python="python", vllm_python=sys.executable))


def test_dexter_config_plans_the_paper_mode_everywhere() -> None:
    config = _plan_config("dexter.yaml")
    with_choice = [ds for ds in DATASETS if len(relevance_modes(ds)) > 1]
    assert all(config["datasets"][ds]["relevance"] == "paper" for ds in with_choice)  # stated, not defaulted
    plan = _plan(config)
    assert {ds: plan.relevance_of(ds) for ds in plan.datasets} == dict.fromkeys(plan.datasets, "paper")
    assert plan.relevance_arg("finqa") == "--relevance paper"
    w = _cell("finqa", "test", "closed", "none", llm="gpt-3.5-turbo")
    assert plan.generation_cell(w)["relevance"] == "paper"


def _cell(dataset: str, split: str, setting: str, retriever: str, llm: str = "smollm2-135m"):
    from types import SimpleNamespace

    return SimpleNamespace(
        dataset=dataset,
        split=split,
        serialization="pipe",
        retriever=retriever,
        llm=llm,
        prompt="few-shot",
        setting=setting,
        k="1",
    )


def test_a_stricter_mode_is_planned_and_recorded() -> None:
    config = _plan_config("config.yaml")
    config["datasets"]["2wikimultihopqa"]["relevance"] = "supporting"
    plan = _plan(config)
    assert plan.relevance_arg("2wikimultihopqa") == "--relevance supporting"
    assert plan.relevance_arg("musique") == "--relevance paper"  # same pooled corpus, its own mode
    assert plan.generation_cell(_cell("2wikimultihopqa", "dev", "rag", "bm25"))["relevance"] == "supporting"


def test_a_mode_of_another_dataset_is_a_config_error_naming_the_key() -> None:
    config = _plan_config("config.yaml")
    config["datasets"]["musique"]["relevance"] = "viewed"  # in the schema's enum (AmbigQA's), not MuSiQue's
    with pytest.raises(ConfigError) as exc:
        _plan(config)
    assert "datasets.musique.relevance: 'viewed' is not a relevance mode of musique; valid: paper, supporting" in str(
        exc.value
    )


def test_schema_refuses_a_mode_no_dataset_has() -> None:
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    config = _plan_config("config.yaml")
    config["datasets"]["finqa"]["relevance"] = "toolkit"
    with pytest.raises(WorkflowError, match="'toolkit' is not one of"):
        validate(config, str(ROOT / "workflow/schemas/config.schema.yaml"))


@pytest.mark.snakemake
def test_snakemake_dry_run_of_dexter_passes_the_mode_to_every_prepare() -> None:
    """`snakemake -n --forceall --configfile config/dexter.yaml` prints each prepare job's command
    (profiles/default: printshellcmds): the job of every split's qrels, corpus-only splits included
    (FinQA's corpus depends on the mode), has --relevance paper."""
    from dry_runs import dry_run

    config = _plan_config("dexter.yaml")
    targets = [
        f"results/dexter/data/{ds}/{sp}/qrels.parquet"
        for ds, spec in config["datasets"].items()
        for sp in dict.fromkeys(spec["splits"] + (spec.get("corpus_splits") or []))
    ]
    commands = [job.shell for job in dry_run("dexter.yaml").of_rule("prepare") if set(targets) & set(job.output)]
    assert len(commands) == len(targets) == 12  # musique, 2wiki: 2 splits; finqa: 3; the other five: 1
    assert all(line.startswith("cqabench prepare") and "--relevance paper " in line for line in commands)


def test_the_mode_is_a_column_of_metrics_parquet(tmp_path: Path) -> None:
    """A retrieval cell's `relevance` (as evaluate_retrieval writes it) reaches metrics.parquet, in
    CELL_COLUMNS right after `corpus`; a file written before the key existed gives null."""
    from cqabench.report.aggregate import build_metrics_table
    from cqabench.report.fact_columns import CELL_COLUMNS

    assert list(CELL_COLUMNS)[list(CELL_COLUMNS).index("corpus") + 1] == "relevance"
    cells = {"new": "supporting", "old": None}
    files = []
    for name, mode in cells.items():
        cell = {
            "stage": "retrieval",
            "dataset": "2wikimultihopqa",
            "split": "dev",
            "corpus": "wiki-multihop",
            "serialization": "pipe",
            "retriever": "bm25",
            "identical_id_policy": "drop",
        }
        if mode:
            cell["relevance"] = mode
        folder = tmp_path / "results" / "retrieval" / name
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(
            json.dumps(
                {
                    "cell": cell,
                    "provenance": {},
                    "metrics": [
                        {"metric": "ndcg_cut_10", "variant": "trec_eval", "value": 0.4, "n": 2, "unit": "fraction"}
                    ],
                }
            )
        )
        files.append(folder / "metrics.json")
    table = build_metrics_table(files, tmp_path / "results")
    assert sorted(table.column("relevance").to_pylist(), key=str) == [None, "supporting"]
