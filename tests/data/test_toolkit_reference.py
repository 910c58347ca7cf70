"""`cqabench prepare --relevance paper` against the original DEXTER toolkit's own loaders.

The `dexter-cqa` 1.0.9 wheel (the toolkit's code on PyPI) is a test dependency, installed
`--no-deps` by the Makefile (`envs/test-nodeps.txt`): its loaders need only torch, transformers,
tqdm and pandas, which cqabench's environment has; nothing of it is imported by the package.
For each bundled slice the toolkit's `RetrieverDataset` builds the qrels and its loader the gold
evidence (id, text, title) with `tokenizer=None` (no model is loaded), from a `config.ini` and
`<folder>/dev.json` written to a temporary folder as its GenericDataLoader reads them. Its
PassageDataLoader reads a corpus in the toolkit's JSON form written from our corpus (the
toolkit's own corpus files were never released): MuSiQue's ids are positions in that file,
as in DEXTER's `wiki_musique_corpus.json`, and map back to our docids.

Every difference (a qrel only one side has; a gold document whose text, title or question text
differs) is found, grouped by (dataset, kind) and checked against
`tests/fixtures/toolkit_differences.yaml`: each group must be listed there with its reason and
its exact count, so a new difference, or a known one on more records, fails the test.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from cqabench.data.prepare import prepare
from cqabench.data.tables import document_text

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "resources" / "raw"
FIXTURES = ROOT / "tests" / "fixtures"
KNOWN = FIXTURES / "toolkit_differences.yaml"


def _retriever_dataset() -> Any:
    """The toolkit's RetrieverDataset, imported when a test builds with it: the import pulls in
    torch and transformers (6 s), which every pytest-xdist worker would pay while collecting."""
    try:
        from dexter.data.loaders.RetrieverDataset import RetrieverDataset
    except ImportError as exc:  # a clear failure, not a skip: a fresh `make setup` installs it
        raise ImportError(
            "the toolkit reference test needs the dexter-cqa 1.0.9 wheel: "
            "`python -m pip install --no-deps -r envs/test-nodeps.txt` (make setup does)"
        ) from exc
    return RetrieverDataset


@dataclass(frozen=True)
class Difference:
    dataset: str
    kind: str  # qrel_toolkit_only | qrel_ours_only | text | title | question
    qid: str
    docid: str
    detail: str = ""


def _ours(dataset: str, files: dict[str, Path], out: Path) -> dict[str, Any]:
    """prepare in mode paper, read back: queries, relevant qrels, documents by docid (in file order)."""
    prepare(dataset, "dev", files, out, relevance="paper")
    corpus = pq.read_table(out / "corpus.parquet").to_pylist()
    qrels: dict[str, set[str]] = {}
    for r in pq.read_table(out / "qrels.parquet").to_pylist():
        if r["relevance"] > 0:
            qrels.setdefault(r["qid"], set()).add(r["docid"])
    queries = {q["qid"]: q["question"] for q in pq.read_table(out / "queries.parquet").to_pylist()}
    return {
        "docs": {d["docid"]: d for d in corpus},
        "order": [d["docid"] for d in corpus],
        "qrels": qrels,
        "queries": queries,
    }


def _toolkit(alias: str, records: list[dict], corpus: dict[str, dict], tmp: Path) -> tuple[dict, list]:
    """The toolkit's qrels (RetrieverDataset.qrels) and samples for `records` as its dev.json."""
    folder = tmp / alias
    folder.mkdir(parents=True)
    (folder / "dev.json").write_text(json.dumps(records), encoding="utf-8")
    (tmp / "corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    ini = tmp / "config.ini"
    ini.write_text(f"[Data-Path]\n{alias} = {folder}\n{alias}-corpus = {tmp / 'corpus.json'}\n", encoding="utf-8")
    data = _retriever_dataset()(alias, f"{alias}-corpus", str(ini), "dev", tokenizer=None)
    _queries, qrels, _corpus = data.qrels()
    return qrels, data.base_dataset.raw_data


def _toolkit_corpus(ours: dict[str, Any], positional: bool) -> tuple[dict[str, dict], list[str]]:
    """Our corpus in the toolkit's JSON form ({id: {text, title, type}}), tables as pipe text.
    `positional`: ids "0", "1", ... in our order (MuSiQue's scheme); the returned list maps back."""
    out: dict[str, dict] = {}
    for i, docid in enumerate(ours["order"]):
        d = ours["docs"][docid]
        out[str(i) if positional else docid] = {
            "text": document_text(d, "pipe"),
            "title": d["title"] or None,
            "type": "table" if d["kind"] == "table" else "text",
        }
    return out, ours["order"]


def _compare(
    dataset: str, ours: dict[str, Any], qrels: dict, samples: list, docid_of=str
) -> tuple[list[Difference], int]:
    """(the differences, how many toolkit samples were compared)."""
    diffs: list[Difference] = []
    theirs = {str(q): {docid_of(d) for d in docs} for q, docs in qrels.items()}
    for qid in sorted(set(theirs) | set(ours["qrels"])):
        for d in sorted(theirs.get(qid, set()) - ours["qrels"].get(qid, set())):
            diffs.append(Difference(dataset, "qrel_toolkit_only", qid, d))
        for d in sorted(ours["qrels"].get(qid, set()) - theirs.get(qid, set())):
            diffs.append(Difference(dataset, "qrel_ours_only", qid, d))
    seen: set[tuple[str, str, str]] = set()
    for s in samples:
        qid, docid, ev = str(s.question.id()), docid_of(s.evidences.id()), s.evidences
        if ours["queries"].get(qid) != s.question.text() and ("q", qid, "") not in seen:
            seen.add(("q", qid, ""))
            diffs.append(Difference(dataset, "question", qid, ""))
        doc = ours["docs"].get(docid)
        if doc is None or (qid, docid, "d") in seen:
            continue
        seen.add((qid, docid, "d"))
        if document_text(doc, "pipe") != ev.text():
            diffs.append(Difference(dataset, "text", qid, docid, ev.title() or ""))
        if (ev.title() or "") != doc["title"]:
            diffs.append(Difference(dataset, "title", qid, docid, f"{ev.title()!r} vs {doc['title']!r}"))
    return diffs, len(samples)


def _finqa(tmp: Path) -> tuple[list[Difference], int]:
    path = FIXTURES / "data" / "finqa" / "dev_40.json"
    ours = _ours("finqa", {"questions": path}, tmp / "ours")
    corpus, _ = _toolkit_corpus(ours, positional=False)
    qrels, samples = _toolkit("finqa", json.loads(path.read_text(encoding="utf-8")), corpus, tmp / "tk")
    return _compare("finqa", ours, qrels, samples)


def _tatqa(tmp: Path) -> tuple[list[Difference], int]:
    path = RAW / "tatqa" / "tatqa_dataset_dev.sample.json"
    ours = _ours("tatqa", {"questions": path}, tmp / "ours")
    corpus, _ = _toolkit_corpus(ours, positional=False)
    qrels, samples = _toolkit("tatqa", json.loads(path.read_text(encoding="utf-8")), corpus, tmp / "tk")
    return _compare("tatqa", ours, qrels, samples)


def _ottqa(tmp: Path) -> tuple[list[Difference], int]:
    """The toolkit reads DEXTER's 'expanded' dev file (never released): each question with its
    table record and the passages it needs. It is built here from the traced release the way
    the loader reads it: the tables file's record of `table_id` (title, header, data, uid) and
    each passage an answer node names, by its key."""
    d = RAW / "ottqa"
    files = {
        "questions": d / "dev.traced.sample.json",
        "tables": d / "dev_tables.sample.json",
        "passages": d / "dev_passages.sample.json",
    }
    ours = _ours("ottqa", files, tmp / "ours")
    tables = json.loads(files["tables"].read_text(encoding="utf-8"))
    passages = json.loads(files["passages"].read_text(encoding="utf-8"))
    expanded = []
    for q in json.loads(files["questions"].read_text(encoding="utf-8")):
        links = dict.fromkeys(n[2] for n in q["answer-node"] if n[3] == "passage")
        expanded.append(
            {
                "qid": q["question_id"],
                "question": q["question"],
                "answer": q["answer-text"],
                "evidence": {"table": tables[q["table_id"]], "passages": {k: passages[k] for k in links}},
            }
        )
    corpus, _ = _toolkit_corpus(ours, positional=False)
    qrels, samples = _toolkit("ottqa", expanded, corpus, tmp / "tk")
    return _compare("ottqa", ours, qrels, samples)


def _musique(tmp: Path) -> tuple[list[Difference], int]:
    path = RAW / "musique" / "musique_train_100.jsonl"
    ours = _ours("musique", {"questions": path}, tmp / "ours")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    corpus, order = _toolkit_corpus(ours, positional=True)
    qrels, samples = _toolkit("musiqueqa", records, corpus, tmp / "tk")
    return _compare("musique", ours, qrels, samples, docid_of=lambda i: order[int(i)])


def _twowiki(tmp: Path) -> tuple[list[Difference], int]:
    """2WikiMultihopQA: the same first-title lookup as MuSiQue (WikiMultihopQADataLoader.py), over
    the 38 bundled dev records with the fixture's 641 distractor passages."""
    d = FIXTURES / "data" / "2wikimultihopqa"
    files = {"questions": d / "dev_38.json", "passages": d / "distractor_corpus_641.json"}
    ours = _ours("2wikimultihopqa", files, tmp / "ours")
    corpus, order = _toolkit_corpus(ours, positional=True)
    qrels, samples = _toolkit(
        "wikimultihopqa", json.loads(files["questions"].read_text(encoding="utf-8")), corpus, tmp / "tk"
    )
    return _compare("2wikimultihopqa", ours, qrels, samples, docid_of=lambda i: order[int(i)])


BUILDERS = {"finqa": _finqa, "tatqa": _tatqa, "ottqa": _ottqa, "musique": _musique, "2wikimultihopqa": _twowiki}


def _known() -> dict[tuple[str, str], dict]:
    entries = yaml.safe_load(KNOWN.read_text(encoding="utf-8"))["differences"]
    out = {}
    for e in entries:
        assert set(e) >= {"dataset", "kind", "count", "reason"}, e
        assert e["reason"].strip(), e
        out[(e["dataset"], e["kind"])] = e
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """dataset -> (differences, samples compared, the folder), each built once per module."""
    cache: dict[str, tuple[list[Difference], int, Path]] = {}

    def get(dataset: str) -> tuple[list[Difference], int, Path]:
        if dataset not in cache:
            tmp = tmp_path_factory.mktemp(dataset)
            cache[dataset] = (*BUILDERS[dataset](tmp), tmp)
        return cache[dataset]

    return get


@pytest.mark.parametrize("dataset", sorted(BUILDERS))
def test_prepare_paper_matches_the_toolkit_but_for_known_differences(dataset: str, built) -> None:
    found, compared, _ = built(dataset)
    assert compared > 0  # the toolkit built gold evidence, so the comparison is not vacuous
    counts = Counter((d.dataset, d.kind) for d in found)
    known = {key: e for key, e in _known().items() if key[0] == dataset}
    unlisted = [d for d in found if (d.dataset, d.kind) not in known]
    assert not unlisted, f"differences from the toolkit not in {KNOWN.name}: {unlisted[:5]} ({len(unlisted)})"
    assert {k: counts.get(k, 0) for k in known} == {k: e["count"] for k, e in known.items()}


def test_musique_differences_are_the_first_title_lookup(built) -> None:
    """Every MuSiQue qrel the toolkit moves points at a paragraph with the same title key (the
    title up to ' - ') as one of the question's own paragraphs that the toolkit dropped."""
    found, _, tmp = built("musique")
    docs = {d["docid"]: d for d in pq.read_table(tmp / "ours" / "corpus.parquet").to_pylist()}
    key = lambda docid: docs[docid]["title"].split(" - ")[0]  # noqa: E731
    dropped: dict[str, set[str]] = {}
    for d in found:
        if d.kind == "qrel_ours_only":
            dropped.setdefault(d.qid, set()).add(key(d.docid))
    moved = [d for d in found if d.kind == "qrel_toolkit_only"]
    assert moved and all(key(d.docid) in dropped[d.qid] for d in moved)
    # a text difference: the toolkit's evidence (its own paragraph's text, `detail` its title) under
    # the id of another paragraph with the same title key
    texts = [d for d in found if d.kind == "text"]
    assert texts and all(key(d.docid) == d.detail.split(" - ")[0] for d in texts)


def test_known_differences_file_names_reasons_for_real_groups() -> None:
    """Each listed group belongs to a compared dataset and a kind the comparison produces."""
    kinds = {"qrel_toolkit_only", "qrel_ours_only", "text", "title", "question"}
    for (dataset, kind), e in _known().items():
        assert dataset in BUILDERS and kind in kinds and e["count"] > 0, e
