"""The bundled real MuSiQue sample (100 questions, 1,890 paragraphs) through our own pipeline:
the reference ranking that the export tests and the Pyserini recipe test compare outside tools to."""

from __future__ import annotations

import json
from pathlib import Path

from cqabench.cli import main
from cqabench.data.prepare import prepare

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "resources" / "raw"
BM25 = {"type": "bm25", "k1": 0.9, "b": 0.4, "fields": {"title": 1.0, "text": 1.0}, "language": "en", "threads": 1}


def run_pipeline(base: Path, export_dir: Path) -> dict[str, Path]:
    """Prepare (is_supporting qrels: the stricter mode docs/data.md quotes), our BM25 index and
    search at k = 100, our evaluation, and the BEIR / Pyserini export into `export_dir`."""
    data = base / "data"
    prepare("musique", "train", {"questions": RAW / "musique/musique_train_100.jsonl"}, data, relevance="supporting")
    settings = json.dumps(BM25)
    assert main(["index", "--corpus", str(data / "corpus.parquet"), "--serialization", "pipe",
                 "--retriever-settings", settings, "--out", str(base / "index")]) == 0  # fmt: skip
    assert main(["search", "--index", str(base / "index"), "--queries", str(data / "queries.parquet"),
                 "--retriever-settings", settings, "--k", "100", "--tag", "bm25",
                 "--out-trec", str(base / "bm25.trec"), "--out-parquet", str(base / "bm25.parquet")]) == 0  # fmt: skip
    cell = json.dumps({"dataset": "musique", "split": "train", "retriever": "bm25"})
    assert main(["evaluate-retrieval", "--run", str(base / "bm25.parquet"), "--qrels", str(data / "qrels.parquet"),
                 "--queries", str(data / "queries.parquet"), "--cell", cell,
                 "--out-json", str(base / "metrics.json"), "--out-per-query", str(base / "per_query.parquet")]) == 0  # fmt: skip
    assert main(["export-beir", "--corpus", str(data / "corpus.parquet"), "--queries", str(data / "queries.parquet"),
                 "--qrels", str(data / "qrels.parquet"), "--split", "train", "--serialization", "pipe",
                 "--out-dir", str(export_dir)]) == 0  # fmt: skip
    return {
        "base": base,
        "data": data,
        "export": export_dir,
        "run": base / "bm25.trec",
        "metrics": base / "metrics.json",
        "per_query": base / "per_query.parquet",
    }
