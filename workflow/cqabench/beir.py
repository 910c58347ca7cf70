"""BEIR-compatible export, so BEIR and Pyserini users can read our corpora directly."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from cqabench.io import atomic_path
from cqabench.tables import document_text


def export(corpus: Path, queries: Path, qrels: Path, split: str, serialization: str, out_dir: Path) -> None:
    out_dir = Path(out_dir)
    with atomic_path(out_dir / "corpus.jsonl") as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for batch in pq.ParquetFile(corpus).iter_batches(batch_size=4096):
            for row in batch.to_pylist():
                doc = {"_id": row["docid"], "title": row["title"], "text": document_text(row, serialization),
                       "metadata": {"kind": row["kind"]}}
                fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with atomic_path(out_dir / "queries.jsonl") as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for row in pq.read_table(queries, columns=["qid", "question"]).to_pylist():
            fh.write(json.dumps({"_id": row["qid"], "text": row["question"]}, ensure_ascii=False) + "\n")
    with atomic_path(out_dir / "qrels" / f"{split}.tsv") as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        seen = set()
        for row in pq.read_table(qrels).to_pylist():
            key = (row["qid"], row["docid"])
            if key in seen:  # several annotators may name the same paragraph
                continue
            seen.add(key)
            fh.write(f"{row['qid']}\t{row['docid']}\t{row['relevance']}\n")
