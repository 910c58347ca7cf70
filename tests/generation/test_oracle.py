"""The oracle setting: its context (cqabench.generation.oracle: gold documents, distractors, positions, errors)
and the planning-time check that a split has gold evidence (datasets.has_gold_evidence)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cqabench.common.errors import ConfigError
from cqabench.data.datasets import ambigqa, has_gold_evidence, loader, strategyqa, tanq
from cqabench.generation.oracle import distractors_for, mix, oracle_contexts, questions_without_evidence

GOLD = {"q1": ["a", "b"], "q2": ["c"], "q3": ["d", "e", "a"], "q4": []}
UNIVERSE = ["a", "b", "c", "d", "e"]


def _h(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest(), "big")


def test_hash_draws_checked_by_hand():
    """seed 7, q1: the draws H("7|q1|draw|k") mod 5 over [a..e] are, for k = 0..5,
    1 1 2 0 4 3 -> b b c a e d. b and a are q1's own gold, the second b a repeat: the
    distractors are c, e, d in that order. Slot ranks H("7|q1|slot|i"): n=4 -> 3 2 1 0,
    n=5 -> 3 2 4 1 0."""
    assert [_h(f"7|q1|draw|{k}") % 5 for k in range(6)] == [1, 1, 2, 0, 4, 3]
    assert sorted(range(4), key=lambda i: _h(f"7|q1|slot|{i}")) == [3, 2, 1, 0]
    assert sorted(range(5), key=lambda i: _h(f"7|q1|slot|{i}")) == [3, 2, 4, 1, 0]
    assert distractors_for("q1", GOLD["q1"], UNIVERSE, 2, seed=7) == ["c", "e"]
    assert distractors_for("q1", GOLD["q1"], UNIVERSE, 3, seed=7) == ["c", "e", "d"]
    # n=4, two distractors -> slots {3, 2}; gold a, b keep their order in slots 0, 1
    assert mix("q1", ["a", "b"], ["c", "e"], seed=7) == ["a", "b", "c", "e"]
    # n=5, three distractors -> slots {3, 2, 4}
    assert mix("q1", ["a", "b"], ["c", "e", "d"], seed=7) == ["a", "b", "c", "e", "d"]
    ctx = oracle_contexts(["q1"], GOLD, 2, seed=7)
    assert ctx == {"q1": ["a", "b", "c", "e"]}


def test_no_distractors_is_the_gold_list_in_qrels_order():
    assert oracle_contexts(["q3", "q1", "q2"], GOLD, 0, seed=123) == {
        "q3": ["d", "e", "a"],
        "q1": ["a", "b"],
        "q2": ["c"],
    }
    # a repeated gold docid (several annotators) is shown once
    assert oracle_contexts(["x"], {"x": ["a", "b", "a"], "y": ["c"]}) == {"x": ["a", "b"]}


def test_distractors_are_other_questions_gold_never_own_never_twice():
    gold = {f"q{i}": [f"d{i}", f"s{i % 3}"] for i in range(30)}  # s0..s2 shared by several questions
    ctx = oracle_contexts(list(gold), gold, 5, seed=1)
    universe = {d for docs in gold.values() for d in docs}
    assert list(ctx) == list(gold)  # every question, in the asked order: the loop checks all 30
    for qid, docs in ctx.items():
        own = gold[qid]
        assert len(docs) == len(own) + 5 and len(set(docs)) == len(docs)
        assert [d for d in docs if d in own] == own  # every gold document, in its order
        assert set(docs) - set(own) <= universe - set(own)  # distractors: others' gold, not own


def test_pool_smaller_than_requested_gives_the_whole_pool():
    ctx = oracle_contexts(["q1", "q2"], GOLD, 10, seed=7)
    assert sorted(ctx["q1"]) == ["a", "b", "c", "d", "e"]  # pool c, d, e: three distractors only
    assert sorted(ctx["q2"]) == ["a", "b", "c", "d", "e"]
    assert oracle_contexts(["only"], {"only": ["a"]}, 3) == {"only": ["a"]}  # no other question


def test_reproducible_and_independent_of_selection_and_order():
    gold = {f"q{i}": [f"d{i}a", f"d{i}b"] for i in range(50)}
    full = oracle_contexts(list(gold), gold, 4, seed=3)
    assert oracle_contexts(list(gold), gold, 4, seed=3) == full
    subset = ["q7", "q1", "q42"]
    assert oracle_contexts(subset, gold, 4, seed=3) == {q: full[q] for q in subset}
    reordered_gold = dict(reversed(list(gold.items())))
    assert oracle_contexts(subset[::-1], reordered_gold, 4, seed=3) == {q: full[q] for q in subset}
    # another seed draws other distractors
    assert oracle_contexts(subset, gold, 4, seed=4) != {q: full[q] for q in subset}
    # more distractors extend the same draw
    for q in subset:
        fewer = [d for d in oracle_contexts([q], gold, 2, seed=3)[q] if d not in gold[q]]
        more = [d for d in full[q] if d not in gold[q]]
        assert set(fewer) <= set(more)


def test_gold_positions_are_mixed():
    gold = {f"q{i}": [f"g{i}"] for i in range(200)}
    positions = [oracle_contexts([q], gold, 3, seed=0)[q].index(gold[q][0]) for q in gold]
    counts = [positions.count(p) for p in range(4)]
    assert all(c > 25 for c in counts), counts  # each of the 4 slots holds the gold doc often


def test_question_without_gold_gets_nothing():
    assert oracle_contexts(["q4", "nope"], GOLD, 2) == {"q4": [], "nope": []}


def test_negative_distractors_refused():
    with pytest.raises(ConfigError, match="distractors"):
        oracle_contexts(["q1"], GOLD, -1)


def test_questions_without_evidence():
    assert questions_without_evidence("tanq", "dev", ["q1", "q4", "nope", "q2"], GOLD) == ["q4", "nope"]
    assert questions_without_evidence("tanq", "dev", ["q1"], GOLD) == []
    with pytest.raises(ConfigError) as exc:
        questions_without_evidence(
            "tanq", "test", ["q4", "nope"], GOLD, reason="the TANQ sample's questions carry no proofs (answer_list)"
        )
    msg = str(exc.value)
    assert "tanq/test" in msg and "has no gold evidence" in msg and "2 selected" in msg and "carry no proofs" in msg
    with pytest.raises(ConfigError, match="ambigqa/dev"):
        questions_without_evidence("ambigqa", "dev", [], GOLD)


# --------------------------------------------------------------------------- planning: has_gold_evidence

RAW = Path(__file__).resolve().parents[2] / "resources" / "raw"


def test_unknown_dataset():
    with pytest.raises(ConfigError):
        has_gold_evidence("nq", {"questions": RAW / "x.json"})


def test_bundled_sample_tanq_has_no_proofs():
    ok, why = has_gold_evidence("tanq", {"questions": RAW / "tanq" / "test_questions_10.jsonl"})
    assert not ok and why.startswith("the TANQ sample's questions carry no proofs (answer_list)")
    assert tanq.load({"questions": RAW / "tanq" / "test_questions_10.jsonl"}, "test").qrels == []


def test_bundled_sample_strategyqa_needs_the_paragraphs_role(tmp_path):
    files = {
        "questions": RAW / "strategyqa" / "dev.json",
        "decompositions": RAW / "strategyqa" / "bart_decomp_dev_predictions.jsonl",
    }
    ok, why = has_gold_evidence("strategyqa", files)
    assert not ok and "paragraphs" in why
    assert has_gold_evidence("strategyqa", {**files, "paragraphs": None})[0] is False  # role left empty
    assert strategyqa.load(files, "dev", limit=3).qrels == []  # what prepare writes without it
    # configured but not downloaded yet: the download brings it
    assert has_gold_evidence("strategyqa", {**files, "paragraphs": tmp_path / "absent.json"}) == (True, "")


@pytest.mark.parametrize(
    "dataset, files",
    [
        ("musique", {"questions": "musique/musique_train_100.jsonl"}),
        ("2wikimultihopqa", {"questions": "2wikimultihopqa/dev.json"}),
        (
            "ottqa",
            {
                "questions": "ottqa/dev.traced.sample.json",
                "tables": "ottqa/dev_tables.sample.json",
                "passages": "ottqa/dev_passages.sample.json",
            },
        ),
        ("tatqa", {"questions": "tatqa/tatqa_dataset_dev.sample.json"}),
        ("finqa", {"questions": "finqa/dev.json"}),
    ],
)
def test_bundled_sample_datasets_with_gold_in_the_question_file(dataset, files):
    paths = {role: RAW / p for role, p in files.items()}
    assert has_gold_evidence(dataset, paths) == (True, "")
    assert loader(dataset).load(paths, "x", limit=2).qrels  # and the loader does produce qrels


def test_ambigqa_light_release_has_no_viewed_titles():
    files = {"questions": RAW / "ambigqa" / "dev_light_40.json", "passages": RAW / "ambigqa" / "psgs_w100_sample.tsv"}
    ok, why = has_gold_evidence("ambigqa", files)
    assert not ok and "viewed_doc_titles" in why


def _ambig(qid: str, titles: list[str] | None) -> dict:
    rec = {"id": qid, "question": "who?", "annotations": [{"type": "singleAnswer", "answer": ["X"]}]}
    if titles is not None:
        rec["viewed_doc_titles"] = titles
    return rec


def test_ambigqa_small_files(tmp_path):
    passages = tmp_path / "psgs.tsv"
    passages.write_text("id\ttext\ttitle\n1\tX is a person.\tX\n2\tY is a city.\tY\n", encoding="utf-8")
    q = tmp_path / "dev.json"
    q.write_text(json.dumps([_ambig("a", None), _ambig("b", [])]), encoding="utf-8")
    assert has_gold_evidence("ambigqa", {"questions": q, "passages": passages})[0] is False
    assert ambigqa.load({"questions": q, "passages": passages}, "dev").qrels == []
    q.write_text(json.dumps([_ambig("a", None), _ambig("b", ["X"])], indent=2), encoding="utf-8")
    assert has_gold_evidence("ambigqa", {"questions": q, "passages": passages}) == (True, "")
    assert [(r.qid, r.docid) for r in ambigqa.load({"questions": q, "passages": passages}, "dev").qrels] == [("b", "1")]
    ok, why = has_gold_evidence("ambigqa", {"questions": q})  # titles but no passages to resolve them
    assert not ok and "passages" in why
    # streamed: stops at the first record with titles, even across a chunk boundary; the rest is not read
    q.write_text(json.dumps([_ambig("b", ["X"])])[:-1] + ', {"id": truncated', encoding="utf-8")
    assert has_gold_evidence("ambigqa", {"questions": q, "passages": passages}) == (True, "")
    from cqabench.data.datasets.ambigqa import gold_evidence

    assert gold_evidence({"questions": q, "passages": passages}, chunk_size=7) == (True, "")
    assert has_gold_evidence("ambigqa", {"questions": tmp_path / "not_yet.json", "passages": passages}) == (True, "")


def test_tanq_small_files(tmp_path):
    no_proofs = {"init_qid": "1__x__dev", "question": "?", "answer_table": "a|b\n1|2"}
    empty = dict(
        no_proofs, init_qid="2__x__dev", answer_list=[{"init_answer_proof": [], "extension_answer": [{"proof": []}]}]
    )
    with_proofs = dict(
        no_proofs,
        init_qid="3__x__dev",
        answer_list=[
            {
                "init_answer_proof": [],
                "extension_answer": [
                    {
                        "proof": [
                            {
                                "text": "1 is a number.",
                                "section": "Numbers",
                                "found_in_url": "https://en.wikipedia.org/wiki/1",
                                "proof_type": "text",
                            }
                        ]
                    }
                ],
            }
        ],
    )
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(no_proofs) + "\n" + json.dumps(empty) + "\n", encoding="utf-8")
    assert has_gold_evidence("tanq", {"questions": path})[0] is False
    assert tanq.load({"questions": path}, "dev").qrels == []
    path.write_text("\n".join(json.dumps(r) for r in (no_proofs, empty, with_proofs)) + "\n", encoding="utf-8")
    assert has_gold_evidence("tanq", {"questions": path}) == (True, "")
    assert [q.qid for q in tanq.load({"questions": path}, "dev").qrels] == ["3__x__dev"]
    # stops at the first record with proofs: a broken line after it is never read
    path.write_text(json.dumps(with_proofs) + "\n" + '{"init_qid": "4", "answer_list": [\n', encoding="utf-8")
    assert has_gold_evidence("tanq", {"questions": path}) == (True, "")
    assert has_gold_evidence("tanq", {"questions": str(tmp_path / "test.jsonl")}) == (True, "")  # not downloaded yet


# ---- the facts oracle (StrategyQA: the annotators' facts where the paragraphs are not bundled) ----

RAW = Path(__file__).resolve().parents[2] / "resources" / "raw"


@pytest.fixture(scope="module")
def strategyqa_queries(tmp_path_factory) -> Path:
    from cqabench.data.prepare import prepare

    out = tmp_path_factory.mktemp("sqa")
    prepare("strategyqa", "dev", {"questions": RAW / "strategyqa" / "dev.json"}, out)
    return out / "queries.parquet"


def test_facts_contexts_are_the_annotators_facts_by_hand(strategyqa_queries):
    """resources/raw/strategyqa/dev.json, records 0 and 1: two facts each, in the annotators' order."""
    from cqabench.common.io import read_parquet
    from cqabench.generation.oracle import facts_contexts

    queries = read_parquet(strategyqa_queries)
    asked = [{"qid": "e0044a7b4d146d611e73"}, {"qid": "c69397b4341b65ed080f"}, {"qid": "not-a-question"}]
    docs_for, entries, without = facts_contexts(queries, asked)
    assert docs_for == {
        "e0044a7b4d146d611e73": ["e0044a7b4d146d611e73/facts/0", "e0044a7b4d146d611e73/facts/1"],
        "c69397b4341b65ed080f": ["c69397b4341b65ed080f/facts/0", "c69397b4341b65ed080f/facts/1"],
    }
    assert entries["e0044a7b4d146d611e73/facts/0"] == {
        "docid": "e0044a7b4d146d611e73/facts/0",
        "title": "",
        "text": "Albany, GA has around 75,000 people",
        "kind": "text",
    }
    assert entries["e0044a7b4d146d611e73/facts/1"]["text"] == "Albany, NY has almost 100,000 people"
    assert without == ["not-a-question"]
    with pytest.raises(ConfigError, match="none of the 1 selected question"):
        facts_contexts(queries, [{"qid": "not-a-question"}])
    with pytest.raises(ConfigError, match="needs the `facts` column"):
        facts_contexts(queries.drop_columns(["facts"]), asked)


def test_a_facts_oracle_cell_shows_the_facts_and_says_so(strategyqa_queries, tmp_path):
    """The first StrategyQA question's oracle prompt numbers its two facts as context (no qrels, no
    corpus read) and summary.json records the context source."""
    from cqabench.generation.cell import Cell, CellInputs, CellOptions
    from cqabench.generation.generate import prepare_cell, run_cell
    from cqabench.generation.llm import llm_spec
    from cqabench.generation.llm.base import Completion, Sampling
    from cqabench.generation.prompts import load_template

    template = load_template(Path(__file__).resolve().parents[2] / "resources/prompts/few-shot/strategy.txt")
    spec = llm_spec("double", {"backend": "openai", "source": "double", "revision": "test"})
    cell = Cell("strategyqa", "dev", "pipe", "none", "double", "few-shot", "oracle", 0)
    inputs = CellInputs(queries=strategyqa_queries, template=Path(template.path))
    options = CellOptions(max_questions=2, oracle_context="facts")
    prepared = prepare_cell(cell, spec, Sampling(max_new_tokens=8), template, inputs, options, identity={"m": 1})
    first = prepared.items[0]
    assert first.docids == ["e0044a7b4d146d611e73/facts/0", "e0044a7b4d146d611e73/facts/1"]
    assert (
        "Context:\n[1] Albany, GA has around 75,000 people\n\n[2] Albany, NY has almost 100,000 people\n\n"
        "Question: Will the Albany in Georgia reach a hundred thousand occupants before the one in New York?"
    ) in first.chat[-1]["content"]
    with pytest.raises(ConfigError, match="setting oracle needs --qrels"):  # the gold oracle still needs qrels
        prepare_cell(cell, spec, Sampling(), template, inputs, CellOptions(max_questions=2), identity={"m": 1})

    class Answers:  # TEST DOUBLE of a backend: "no" to everything
        def generate(self, chats, sampling, labels=None):
            yield [
                (
                    i,
                    Completion(
                        text="Final Answer: no", prompt_tokens=1, output_tokens=2, latency_s=0.0, finish_reason="stop"
                    ),
                )
                for i in range(len(chats))
            ]

        def close(self):
            pass

    summary = run_cell(
        cell,
        spec,
        Sampling(max_new_tokens=8),
        template,
        inputs,
        tmp_path / "p.parquet",
        tmp_path / "cache",
        options,
        tmp_path / "summary.json",
        backend_factory=Answers,
    )
    assert summary["options"]["oracle_context"] == "facts" and summary["n_items"] == 2
    assert json.loads((tmp_path / "summary.json").read_text())["options"]["oracle_context"] == "facts"
