"""BM25 with Lucene, through the Anserini engine that ships inside pyserini; no server.

The index holds two fields per document: `contents` (the text, a serialized table for table
documents) and `title`. Which fields a search scores, and with what boost, is the `fields`
setting (`{title: 1.0, text: 1.0}`: the sum of BM25 over both), so changing boosts reuses the
index. We call the Anserini classes pyserini wraps (`SimpleSearcher` for `LuceneSearcher`,
`SimpleIndexer` for `LuceneIndexer`) instead of importing `pyserini.search`, whose import pulls
in torch. The index is built from the document stream, batch by batch, with `IndexCollection`'s
arguments (`index_arguments`): no JsonCollection copy of the corpus is written, and the index
equals the one `IndexCollection` builds from the `collection_record`s (tests/retrieval/test_bm25_stream.py).

Settings (all optional): k1 (0.9), b (0.4), fields ({title: 1.0, text: 1.0}),
language (Anserini language code, "en"), stemmer (porter | krovetz | none; English only),
threads (2), memory_buffer_mb (128: Lucene's indexing RAM buffer; the indexing JVM's heap is
capped at it plus HEAP_HEADROOM_MB, so the job's memory does not grow with the corpus).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.data.documents import collection_record
from cqabench.retrieval.base import Doc, QueryText, Results, rank
from cqabench.retrieval.java import autoclass, start_jvm

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "k1": 0.9,
    "b": 0.4,
    "fields": {"title": 1.0, "text": 1.0},
    "language": "en",
    "stemmer": "porter",
    "threads": 2,
    "memory_buffer_mb": 128,
}
# Field names in config -> Lucene field names in the index.
FIELD_NAMES = {"title": "title", "text": "contents"}
STEMMERS = ("porter", "krovetz", "none")
# Boosts, BM25 parameters and threads act at search time only; the index is the same. The
# indexing RAM buffer decides only when Lucene flushes a segment: the same documents and
# statistics, the same scores.
SEARCH_ONLY_KEYS = frozenset({"k1", "b", "fields", "threads", "memory_buffer_mb"})
LUCENE_DIR = "lucene"
BATCH = 20_000  # queries per Java call, to bound the result map held in the JVM
# Documents per Java indexing call: enough to keep `threads` threads busy, few enough that the
# batch (as Python strings and as their Java copies) stays a few MB at any corpus size.
INDEX_BATCH = 4096
# Java heap beyond Lucene's buffer for an indexing job: the batch in flight (its JSON strings and
# parsed documents), segment flushes and merges, Anserini's own objects.
HEAP_HEADROOM_MB = 256


def index_heap_mb(settings: dict[str, Any]) -> int:
    """The -Xmx of a BM25 indexing JVM: Lucene's buffer plus headroom."""
    return int(resolve(settings)["memory_buffer_mb"]) + HEAP_HEADROOM_MB


def resolve(settings: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in and every value checked, so a typo fails before indexing starts."""
    unknown = set(settings) - set(DEFAULTS) - {"type"}
    if unknown:
        raise ConfigError(
            f"bm25 retriever: unknown setting(s) {', '.join(sorted(unknown))}; valid: {', '.join(sorted(DEFAULTS))}"
        )
    s = {**DEFAULTS, **{k: v for k, v in settings.items() if k != "type"}}
    for key in ("k1", "b"):
        if not isinstance(s[key], (int, float)) or isinstance(s[key], bool) or s[key] < 0:
            raise ConfigError(f"bm25 retriever: {key} must be a non-negative number, got {s[key]!r}")
    fields = s["fields"]
    if not isinstance(fields, dict) or not fields or set(fields) - set(FIELD_NAMES):
        raise ConfigError(f"bm25 retriever: fields must map some of {sorted(FIELD_NAMES)} to boosts, got {fields!r}")
    for name, boost in fields.items():
        if not isinstance(boost, (int, float)) or isinstance(boost, bool) or boost <= 0:
            raise ConfigError(f"bm25 retriever: boost of field {name!r} must be positive, got {boost!r}")
    if s["stemmer"] not in STEMMERS:
        raise ConfigError(f"bm25 retriever: stemmer must be one of {STEMMERS}, got {s['stemmer']!r}")
    if s["stemmer"] != "porter" and s["language"] != "en":
        raise ConfigError("bm25 retriever: stemmer applies to language 'en' only")
    if not isinstance(s["threads"], int) or s["threads"] < 1:
        raise ConfigError(f"bm25 retriever: threads must be a positive integer, got {s['threads']!r}")
    mb = s["memory_buffer_mb"]
    if not isinstance(mb, int) or isinstance(mb, bool) or not 16 <= mb <= 2047:
        raise ConfigError(f"bm25 retriever: memory_buffer_mb must be a whole number of MB in 16..2047, got {mb!r}")
    return s


def index_arguments(input_dir: str | Path, index_dir: str | Path, settings: dict[str, Any]) -> list[str]:
    """Anserini `IndexCollection` arguments of our BM25 index (also Pyserini's `index.lucene` CLI's)."""
    s = resolve(settings)
    args = [
        "-collection", "JsonCollection",
        "-generator", "DefaultLuceneDocumentGenerator",
        "-input", str(input_dir),
        "-index", str(index_dir),
        "-fields", "title",
        "-threads", str(s["threads"]),
        "-language", s["language"],
        "-storeRaw",
    ]  # fmt: skip
    if s["language"] == "en":
        args += ["-stemmer", s["stemmer"]]
    return args


def _raw_batches(docs: Iterable[Doc], size: int) -> Iterator[list[str]]:
    """The documents as JsonCollection JSON lines, `size` at a time: the Python side holds one batch."""
    records = (json.dumps(collection_record(docid, title, text), ensure_ascii=False) for docid, title, text in docs)
    while batch := list(islice(records, size)):
        yield batch


def set_ram_buffer(indexer: Any, mb: int) -> float:
    """Lucene's indexing RAM buffer of a SimpleIndexer, in MB; returns the value the writer now has.

    SimpleIndexer fixes it at 2,048 MB with no argument to change it, which lets the JVM grow
    to ~2.5 GB on a large corpus (measured: 573 MiB at 0.5M passages, 772 MiB at 1M). The
    writer's live config takes a new value at any time (Lucene's `LiveIndexWriterConfig`), so
    it is set through the writer, reached by reflection on the private field `writer`.
    """
    from jnius import JavaClass, JavaMethod, MetaJavaClass, cast

    class ReflectField(JavaClass, metaclass=MetaJavaClass):  # jnius's own Field proxy has no get()
        __javaclass__ = "java/lang/reflect/Field"
        getName = JavaMethod("()Ljava/lang/String;")
        toString = JavaMethod("()Ljava/lang/String;")
        getType = JavaMethod("()Ljava/lang/Class;")
        getModifiers = JavaMethod("()I")
        setAccessible = JavaMethod("(Z)V")
        get = JavaMethod("(Ljava/lang/Object;)Ljava/lang/Object;")

    declared = autoclass("java.lang.Class").forName("io.anserini.index.SimpleIndexer").getDeclaredField("writer")
    field = cast(ReflectField, declared)
    field.setAccessible(True)
    config = cast("org.apache.lucene.index.IndexWriter", field.get(indexer)).getConfig()
    config.setRAMBufferSizeMB(float(mb))
    return float(config.getRAMBufferSizeMB())


def build_index(docs: Iterable[Doc], index_dir: Path, settings: dict[str, Any]) -> None:
    """Feed the documents to Lucene as they are read; no JsonCollection copy of the corpus on disk.

    Anserini's `SimpleIndexer` (what pyserini's `LuceneIndexer` wraps) takes `IndexCollection`'s
    own arguments, so the analyzer, the `title` field and the stored raw JSON are those of an
    `IndexCollection` run over the same records (tests/retrieval/test_bm25_stream.py checks the two indexes
    agree document by document and term by term). Each batch of `INDEX_BATCH` documents is one
    Java call indexed by `threads` threads; Lucene flushes its in-memory segment when it
    reaches `memory_buffer_mb`, and the JVM's heap is capped at that plus HEAP_HEADROOM_MB, so
    neither side grows with the corpus.
    """
    s = resolve(settings)
    start_jvm(max_heap_mb=index_heap_mb(s))
    # `-input` is required by the argument parser and unused by SimpleIndexer (pyserini passes "").
    indexer = autoclass("io.anserini.index.SimpleIndexer")(index_arguments("", index_dir / LUCENE_DIR, s))
    count = 0
    try:
        buffer_mb = set_ram_buffer(indexer, s["memory_buffer_mb"])
        log.info("bm25: Lucene indexing RAM buffer %.0f MB, %d threads", buffer_mb, s["threads"])
        for batch in _raw_batches(docs, INDEX_BATCH):
            added = int(indexer.addRawDocuments(batch))
            if added != len(batch):
                raise ConfigError(
                    f"bm25: Lucene indexed {added} of a batch of {len(batch)} documents "
                    f"(documents {count + 1}-{count + len(batch)}); see the Anserini log above"
                )
            count += added
    finally:
        indexer.close()  # commits; on an error the caller's atomic_dir discards the partial index
    indexed = autoclass("io.anserini.search.SimpleSearcher")(str(index_dir / LUCENE_DIR))
    try:
        total = int(indexed.get_total_num_docs())
    finally:
        indexed.close()
    if total != count:
        raise ConfigError(
            f"bm25: Lucene holds {total} of {count} documents (empty or duplicate ids?); see the Anserini log above"
        )
    log.info("bm25: indexed %d documents into %s", count, index_dir)


def _searcher(index_dir: Path, s: dict[str, Any]) -> Any:
    path = index_dir / LUCENE_DIR
    if not path.is_dir():
        raise ConfigError(f"index {index_dir} holds no Lucene index ({LUCENE_DIR}/); rebuild it")
    searcher = autoclass("io.anserini.search.SimpleSearcher")(str(path))
    if s["language"] != "en":
        searcher.set_language(s["language"])
    elif s["stemmer"] != "porter":
        from pyserini.analysis import get_lucene_analyzer

        searcher.set_analyzer(get_lucene_analyzer(language="en", stemming=s["stemmer"] != "none", stemmer=s["stemmer"]))
    searcher.set_bm25(float(s["k1"]), float(s["b"]))
    return searcher


def search(index_dir: Path, queries: list[QueryText], k: int, settings: dict[str, Any]) -> Results:
    s = resolve(settings)
    start_jvm()
    array_list = autoclass("java.util.ArrayList")
    hash_map = autoclass("java.util.HashMap")
    jfloat = autoclass("java.lang.Float")
    boosts = hash_map()
    for name, boost in s["fields"].items():
        boosts.put(FIELD_NAMES[name], jfloat(float(boost)))
    searcher = _searcher(index_dir, s)
    results: Results = {qid: [] for qid, _ in queries}
    try:
        for start in range(0, len(queries), BATCH):
            texts, qids = array_list(), array_list()
            for qid, text in queries[start : start + BATCH]:
                if text.strip():  # an empty query matches nothing; Lucene need not see it
                    texts.add(text)
                    qids.add(qid)
            if texts.size() == 0:
                continue
            hits = searcher.batch_search_fields(texts, qids, int(k), int(s["threads"]), boosts)
            for entry in hits.entrySet().toArray():
                results[entry.getKey()] = rank(((h.docid, h.score) for h in entry.getValue()), k)
    finally:
        searcher.close()
    return results
