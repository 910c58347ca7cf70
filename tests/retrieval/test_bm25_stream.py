"""The streamed BM25 index (SimpleIndexer fed batch by batch) equals the IndexCollection index.

Until the streamed path, `bm25.build_index` wrote the corpus as a JsonCollection file (a second
full copy on disk) and ran Anserini's `IndexCollection` on it. That path is kept here, as the
reference: both indexes are built over the bundled sample's OTT-QA dev corpus (tables serialized
with `pipe`, and passages) and AmbigQA's psgs_w100 passages, prepared by `cqabench prepare`, and
must agree on every stored document, every term's document and collection frequency in both
fields, and every top-100 ranking (docids and scores) of the sample questions.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from cqabench import retrieval as retrievers
from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.retrieval import bm25
from cqabench.retrieval.java import autoclass
from cqabench.retrieval.jobs import read_documents

RAW = Path(__file__).resolve().parents[2] / "resources" / "raw"
CORPORA = {
    # name: (dataset, split, {role: file}, serialization)
    "ottqa": ("ottqa", "dev", {"questions": "ottqa/dev.traced.sample.json", "tables": "ottqa/dev_tables.sample.json",
                               "passages": "ottqa/dev_passages.sample.json"}, "pipe"),
    "ambigqa": ("ambigqa", "dev", {"questions": "ambigqa/dev_light_40.json",
                                   "passages": "ambigqa/psgs_w100_sample.tsv"}, "pipe"),
}  # fmt: skip
SETTINGS = {"type": "bm25", "threads": 2}
K = 100


def index_collection(docs: Iterator[tuple[str, str, str]], index_dir: Path, settings: dict[str, Any]) -> int:
    """The former `bm25.build_index`: the JsonCollection file of `collection_record`s, then IndexCollection."""
    folder = index_dir.parent / f"{index_dir.name}-jsonl"
    folder.mkdir()
    count = 0
    with open(folder / "docs.jsonl", "w", encoding="utf-8") as fh:
        for docid, title, text in docs:
            fh.write(json.dumps(bm25.collection_record(docid, title, text), ensure_ascii=False) + "\n")
            count += 1
    autoclass("io.anserini.index.IndexCollection").main(
        bm25.index_arguments(folder, index_dir / bm25.LUCENE_DIR, bm25.resolve(settings))
    )
    return count


def field_terms(reader: Any, field: str) -> dict[str, tuple[int, int]]:
    """term -> (document frequency, collection frequency) of every term of one Lucene field."""
    terms = autoclass("org.apache.lucene.index.MultiTerms").getTerms(reader, field)
    out: dict[str, tuple[int, int]] = {}
    it = terms.iterator()
    while (term := it.next()) is not None:
        out[term.utf8ToString()] = (int(it.docFreq()), int(it.totalTermFreq()))
    return out


def index_view(index_dir: Path, docids: list[str]) -> dict[str, Any]:
    """What a BM25 search can see of an index: counts, field statistics, terms, stored documents."""
    utils = autoclass("io.anserini.index.IndexReaderUtils")
    reader = utils.getReader(str(index_dir / bm25.LUCENE_DIR))
    try:
        view: dict[str, Any] = {"docs": int(reader.numDocs()), "max_doc": int(reader.maxDoc())}
        for field in ("contents", "title"):
            view[field] = {
                "doc_count": int(reader.getDocCount(field)),
                "sum_doc_freq": int(reader.getSumDocFreq(field)),
                "sum_total_term_freq": int(reader.getSumTotalTermFreq(field)),
                "terms": field_terms(reader, field),
            }
        view["raw"] = {docid: utils.documentRaw(reader, docid) for docid in docids}
    finally:
        reader.close()
    return view


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, str]]:
    """name -> (corpus.parquet, queries.parquet, serialization), by `cqabench prepare` on the sample."""
    out: dict[str, tuple[Path, Path, str]] = {}
    for name, (dataset, split, files, serialization) in CORPORA.items():
        folder = tmp_path_factory.mktemp(name)
        args = ["prepare", "--dataset", dataset, "--split", split, "--out-dir", str(folder)]
        for role, rel in files.items():
            args += ["--file", f"{role}={RAW / rel}"]
        assert main(args) == 0
        out[name] = (folder / "corpus.parquet", folder / "queries.parquet", serialization)
    return out


@pytest.mark.parametrize("name", sorted(CORPORA))
@pytest.mark.jvm
def test_streamed_index_equals_index_collection(name: str, prepared, tmp_path: Path) -> None:
    corpus, queries, serialization = prepared[name]
    reference = tmp_path / "reference"
    count = index_collection(read_documents(corpus, serialization), reference, SETTINGS)
    streamed = tmp_path / "streamed"
    retrievers.build_index(read_documents(corpus, serialization), streamed, SETTINGS)

    docids = pq.read_table(corpus, columns=["docid"]).column(0).to_pylist()
    assert count == len(docids) > 1000  # OTT-QA: 80 tables + 1,844 passages; AmbigQA: 1,100 passages
    ours, theirs = index_view(streamed, docids), index_view(reference, docids)
    assert ours["docs"] == theirs["docs"] == count
    for field in ("contents", "title"):
        assert ours[field]["terms"] == theirs[field]["terms"], field
        assert len(ours[field]["terms"]) > 500  # a real vocabulary, not a handful of terms
        assert {k: v for k, v in ours[field].items() if k != "terms"} == {
            k: v for k, v in theirs[field].items() if k != "terms"
        }, field
    assert ours["raw"] == theirs["raw"]
    assert all(ours["raw"][d] for d in docids)  # every document stored, JSON as Anserini wrote it

    rows = pq.read_table(queries).to_pylist()
    pairs = [(r["qid"], r["question"]) for r in rows]
    settings = bm25.resolve(SETTINGS)
    ours_run = bm25.search(streamed, pairs, K, settings)
    theirs_run = bm25.search(reference, pairs, K, settings)
    assert len(pairs) == 40 and sum(len(v) for v in ours_run.values()) > 40 * 50
    assert ours_run == theirs_run  # docids, order and scores, for every question


@pytest.mark.jvm
def test_index_batches_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Documents reach Java in batches of INDEX_BATCH, read lazily: Python never holds the corpus."""
    sizes: list[int] = []
    pulled = 0
    real_batches = bm25._raw_batches

    def spy(docs, size):
        for batch in real_batches(docs, size):
            sizes.append(len(batch))
            assert pulled <= sum(sizes)  # the generator is not read ahead of what was sent
            yield batch

    def corpus() -> Iterator[tuple[str, str, str]]:
        nonlocal pulled
        for n in range(25):
            pulled += 1
            yield f"d{n}", f"Title {n}", f"text number {n} about cats"

    monkeypatch.setattr(bm25, "INDEX_BATCH", 10)
    monkeypatch.setattr(bm25, "_raw_batches", spy)
    retrievers.build_index(corpus(), tmp_path / "idx", {"type": "bm25", "threads": 1})
    assert sizes == [10, 10, 5]
    hits = retrievers.search(tmp_path / "idx", [("q", "number 17")], 5, {"type": "bm25"})["q"]
    assert hits[0][0] == "d17"


@pytest.mark.jvm
def test_python_memory_stays_flat_while_indexing(tmp_path: Path) -> None:
    """Peak Python allocation while indexing 20,000 documents is that of a batch, not the corpus."""
    text = "the quick brown fox jumps over the lazy dog near the river bank " * 8  # ~500 bytes

    def corpus(n: int) -> Iterator[tuple[str, str, str]]:
        for i in range(n):
            yield f"doc-{i}", f"Title {i}", f"{text} {i}"

    bm25.build_index(iter([("warm", "w", "w")]), tmp_path / "warm", bm25.resolve({"threads": 1}))
    peaks = []
    for n in (5_000, 20_000):
        tracemalloc.start()
        bm25.build_index(corpus(n), tmp_path / f"n{n}", bm25.resolve({"threads": 1}))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # A list of the corpus would be ~ 20,000 x 600 B = 12 MB, growing 4x; a batch is ~ 2.5 MB at both sizes.
    assert peaks[1] < 1.3 * peaks[0]
    assert peaks[1] < 8 * 2**20


@pytest.mark.jvm
def test_a_document_lucene_refuses_fails_the_build_and_leaves_nothing(tmp_path: Path) -> None:
    """A document SimpleIndexer drops (here: empty contents and title) is an error, not a quiet gap."""
    docs = [("d1", "Cats", "The cat sat"), ("d2", "", " ")]
    with pytest.raises(ConfigError, match=r"bm25: Lucene indexed 1 of a batch of 2 documents \(documents 1-2\)"):
        retrievers.build_index(iter(docs), tmp_path / "idx", {"type": "bm25", "threads": 1})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.jvm
def test_the_indexing_jvm_heap_is_capped_at_the_buffer_plus_headroom(tmp_path: Path) -> None:
    """A fresh process that builds a BM25 index runs its JVM with a fixed heap of memory_buffer_mb +
    256 MB (Java's Runtime.maxMemory / totalMemory read it back, the process's RSS holds it from
    the start), so the job's memory cannot grow with the corpus."""
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from cqabench.retrieval import bm25\n"
        "from cqabench.retrieval.java import autoclass\n"
        "docs = [(f'd{i}', 't', f'text number {i}') for i in range(10)]\n"
        "settings = {'type': 'bm25', 'memory_buffer_mb': int(sys.argv[2])}\n"
        "bm25.build_index(iter(docs), Path(sys.argv[1]), settings)\n"
        "rt = autoclass('java.lang.Runtime').getRuntime()\n"
        "rss = [int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')][0]\n"
        "print(json.dumps({'max': int(rt.maxMemory()), 'total': int(rt.totalMemory()), 'rss_kb': rss,"
        " 'want': bm25.index_heap_mb(settings)}))\n"
    )  # fmt: skip
    for buffer_mb in (128, 64):
        out = tmp_path / f"idx{buffer_mb}"
        out.mkdir()
        done = subprocess.run([sys.executable, "-c", script, str(out), str(buffer_mb)],
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["want"] == buffer_mb + bm25.HEAP_HEADROOM_MB
        # maxMemory is the heap the JVM may use: -Xmx, less at most one survivor space (~10 %)
        assert 0.85 * got["want"] * 2**20 <= got["max"] <= got["want"] * 2**20, got
        assert got["total"] >= 0.85 * got["want"] * 2**20, got  # committed from the start (-Xms = -Xmx)
        assert got["rss_kb"] * 1024 >= got["want"] * 2**20, got  # and touched: resident already
