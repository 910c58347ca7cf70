"""Exports a researcher opens with the usual tools as they are: BEIR, Pyserini, ranx, ir_measures.

One folder per (dataset, serialization, split), `results/<name>/beir/{dataset}/{serialization}/{split}/`:

* `corpus.jsonl`, `queries.jsonl`, `qrels/{split}.tsv`: a BEIR dataset, opened by
  `beir.datasets.data_loader.GenericDataLoader(folder).load(split)`.
* `qrels/{split}.trec`: the same judgments as TREC qrels (`qid 0 docid rel`), read by trec_eval,
  `ranx.Qrels.from_file` and `ir_measures.read_trec_qrels`; our run files
  (`results/<name>/runs/.../*.trec`) are the matching TREC runs.
* `pyserini/corpus.jsonl`: a Pyserini / Anserini `JsonCollection` holding exactly the documents
  our BM25 indexes (`id`, `contents`, `title`; `cqabench.data.documents.collection_record`), so
  Pyserini's indexer with `--fields title` and a search over `contents=1 title=1` reproduce our
  BM25 scores. `pyserini/topics.tsv` holds the questions for Pyserini's search CLI.
* `export.json`: what was written, the counts, or why nothing was.

A split whose corpus is empty (TANQ's sample) or whose qrels hold no relevant judgment (AmbigQA's
light sample, StrategyQA without its paragraph file) gets no export, only `export.json` with
`"status": "skipped"` and the reason: BEIR's loader cannot open such a dataset (it fails with
IndexError on an empty corpus or on qrels with a header only), and nothing in it could be
evaluated. Writing a placeholder document or judgment would make a dataset BEIR opens but that
is not the data.

Judgments are merged as our metrics merge them (`cqabench.data.qrels.qrels_from_rows`:
several annotators naming one document give one judgment, the highest grade), so a tool reading
the export scores what we score.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from cqabench.common.errors import DataError
from cqabench.common.io import atomic_dir, write_json
from cqabench.data.documents import collection_record, iter_documents
from cqabench.data.qrels import Qrels, qrels_from_rows

MANIFEST = "export.json"
PYSERINI_DIR = "pyserini"
NO_DOCUMENTS = "the corpus has no documents: BEIR's GenericDataLoader cannot open it and nothing can be retrieved"
NO_RELEVANT = (
    "the qrels hold no relevant judgment (relevance > 0): BEIR's GenericDataLoader cannot open "
    "a header-only qrels file, and no retrieval measure is defined"
)


def _read_queries(path: Path) -> list[tuple[str, str]]:
    if not path.is_file():
        raise DataError(path, None, "-", "queries file not found")
    queries = []
    for row in pq.read_table(path, columns=["qid", "question"]).to_pylist():
        if not row["qid"]:
            raise DataError(path, row["question"], "qid", "empty query id")
        queries.append((str(row["qid"]), row["question"] or ""))
    return queries


def _read_qrels(path: Path, qids: set[str], queries_path: Path) -> Qrels:
    if not path.is_file():
        raise DataError(path, None, "-", "qrels file not found")
    qrels = qrels_from_rows(pq.read_table(path, columns=["qid", "docid", "relevance"]).to_pylist())
    for qid, docs in qrels.items():
        if qid not in qids:
            # BEIR's loader looks every qrels query up in queries.jsonl (KeyError otherwise).
            raise DataError(path, qid, "qid", f"judged query is not in {queries_path}")
        _check_trec_id(path, qid, "qid", qid)
        for docid in docs:
            _check_trec_id(path, qid, "docid", docid)
    return qrels


def _check_trec_id(path: Path, record: str, field: str, value: str) -> None:
    """TREC files are whitespace-separated: an id with a space would shift every later column."""
    if not value or any(c.isspace() for c in value):
        raise DataError(path, record, field, f"id {value!r} is empty or contains whitespace (TREC cannot hold it)")


def _corpus_rows(corpus: Path) -> int:
    if not corpus.is_file():
        raise DataError(corpus, None, "-", "corpus file not found")
    return pq.ParquetFile(corpus).metadata.num_rows


def topic_line(qid: str, question: str) -> str:
    """One line of Pyserini's TSV topics: whitespace collapsed, since a tab or newline would end the
    question early (Lucene's analyzer splits on any whitespace, so the query is unchanged)."""
    return f"{qid}\t{' '.join(question.split())}\n"


def _write_documents(
    documents: Iterable[tuple[str, str, str, str]], beir_path: Path, pyserini_path: Path
) -> dict[str, int]:
    counts = {"documents": 0, "documents_with_empty_text": 0}
    with open(beir_path, "w", encoding="utf-8") as beir, open(pyserini_path, "w", encoding="utf-8") as pys:
        for docid, title, text, kind in documents:
            beir.write(
                json.dumps({"_id": docid, "title": title, "text": text, "metadata": {"kind": kind}}, ensure_ascii=False)
                + "\n"
            )
            pys.write(json.dumps(collection_record(docid, title, text), ensure_ascii=False) + "\n")
            counts["documents"] += 1
            counts["documents_with_empty_text"] += not text.strip()
    return counts


def _write_qrels(qrels: Qrels, tsv: Path, trec: Path) -> int:
    n = 0
    with open(tsv, "w", encoding="utf-8") as fh_tsv, open(trec, "w", encoding="utf-8") as fh_trec:
        fh_tsv.write("query-id\tcorpus-id\tscore\n")
        for qid, docs in qrels.items():
            for docid, rel in docs.items():
                fh_tsv.write(f"{qid}\t{docid}\t{rel}\n")
                fh_trec.write(f"{qid} 0 {docid} {rel}\n")
                n += 1
    return n


def export(corpus: Path, queries: Path, qrels: Path, split: str, serialization: str, out_dir: Path) -> dict[str, Any]:
    """Write the export folder `out_dir` (replaced whole, atomically) and return its manifest."""
    corpus, queries, qrels, out_dir = Path(corpus), Path(queries), Path(qrels), Path(out_dir)
    query_rows = _read_queries(queries)
    judgments = _read_qrels(qrels, {q for q, _ in query_rows}, queries)
    judged = sorted(q for q, docs in judgments.items() if any(r > 0 for r in docs.values()))
    manifest: dict[str, Any] = {
        "split": split,
        "serialization": serialization,
        "sources": {"corpus": str(corpus), "queries": str(queries), "qrels": str(qrels)},
    }
    reason = None
    if _corpus_rows(corpus) == 0:
        reason = NO_DOCUMENTS
    elif not judged:
        reason = NO_RELEVANT
    with atomic_dir(out_dir) as tmp:
        if reason is not None:
            manifest.update(
                status="skipped",
                reason=reason,
                files={},
                counts={"queries": len(query_rows), "judged_queries": len(judged)},
            )
            write_json(manifest, tmp / MANIFEST)
            return manifest
        (tmp / "qrels").mkdir()
        (tmp / PYSERINI_DIR).mkdir()
        counts = _write_documents(
            iter_documents(corpus, serialization), tmp / "corpus.jsonl", tmp / PYSERINI_DIR / "corpus.jsonl"
        )
        with open(tmp / "queries.jsonl", "w", encoding="utf-8") as fh, \
                open(tmp / PYSERINI_DIR / "topics.tsv", "w", encoding="utf-8") as topics:  # fmt: skip
            for qid, question in query_rows:
                fh.write(json.dumps({"_id": qid, "text": question}, ensure_ascii=False) + "\n")
                if question.strip():  # our search skips an empty question; Pyserini's reader would choke
                    topics.write(topic_line(qid, question))
        n_qrels = _write_qrels(judgments, tmp / "qrels" / f"{split}.tsv", tmp / "qrels" / f"{split}.trec")
        manifest.update(
            status="exported",
            reason=None,
            files={
                "beir_corpus": "corpus.jsonl",
                "beir_queries": "queries.jsonl",
                "beir_qrels": f"qrels/{split}.tsv",
                "trec_qrels": f"qrels/{split}.trec",
                "pyserini_collection": f"{PYSERINI_DIR}/corpus.jsonl",
                "pyserini_topics": f"{PYSERINI_DIR}/topics.tsv",
            },
            counts={**counts, "queries": len(query_rows), "judged_queries": len(judged), "qrels": n_qrels},
            # BeirMultifieldCollection indexes `text` as contents and skips a document whose text is
            # empty, where ours indexes the title; on such a corpus only the JsonCollection is exact.
            beir_multifield_reproduces_bm25=counts["documents_with_empty_text"] == 0,
        )
        write_json(manifest, tmp / MANIFEST)
    return manifest
