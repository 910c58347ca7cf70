"""ColBERTv2 (colbert-ai PLAID) indexing footprint at small scale, measured, for docs/retrievers_neural.md.

Builds the index our `colbert` retriever builds (nbits 2, doc_maxlen 180, chunks of `--chunksize`)
over real passages of the bundled sample (MuSiQue paragraphs, AmbigQA psgs_w100 passages, OTT-QA
passages: 4,834 distinct Wikipedia passages, prepared by `cqabench prepare`; larger sizes repeat
them with new docids), one fresh process per size, and prints per size: embeddings per passage
(avg_doclen), index bytes per embedding by file kind, the worker's peak RSS and wall time.

The checkpoint is the tests' tiny HF_ColBERT (BERT with 2 layers, projection to dim 16) unless
`--model` names a real one (e.g. a local colbert-ir/colbertv2.0; no downloads here). Its tokenizer
is bert-base-uncased WordPiece, ColBERTv2's, so embeddings per passage are what ColBERTv2 gets on
these passages; the bytes that depend on the dimension (residuals: dim * nbits / 8; centroids:
dim * 2) are scaled to dim 128 by those formulas in the extrapolation.

    .venv/bin/python benchmarks/colbert_footprint.py [--sizes 1000 4000] [--chunksize 1000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import cycle, islice
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "resources" / "raw"
SOURCES = {
    "musique": ("train", {"questions": "musique/musique_train_100.jsonl"}),
    "ambigqa": ("dev", {"questions": "ambigqa/dev_light_40.json", "passages": "ambigqa/psgs_w100_sample.tsv"}),
    "ottqa": ("dev", {"questions": "ottqa/dev.traced.sample.json", "tables": "ottqa/dev_tables.sample.json",
                      "passages": "ottqa/dev_passages.sample.json"}),
}  # fmt: skip


def passages(work: Path) -> list[tuple[str, str, str]]:
    """The sample's text passages (tables left out: ColBERT passages are text), by `cqabench prepare`."""
    from cqabench.cli import main
    from cqabench.retrievers.jobs import iter_documents

    out: list[tuple[str, str, str]] = []
    for name, (split, files) in SOURCES.items():
        args = ["prepare", "--dataset", name, "--split", split, "--out-dir", str(work / name)]
        for role, rel in files.items():
            args += ["--file", f"{role}={RAW / rel}"]
        if main(args) != 0:
            raise SystemExit(f"prepare {name} failed")
        out += [(d, t, x) for d, t, x, kind in iter_documents(work / name / "corpus.parquet", "pipe") if kind == "text"]
    return out


def sized(pool: list[tuple[str, str, str]], n: int) -> Iterator[tuple[str, str, str]]:
    for i, (_, title, text) in enumerate(islice(cycle(pool), n)):
        yield f"p{i}", title, text


def one(args: argparse.Namespace) -> None:
    """Child: index `--one` passages, print one JSON line (peak RSS of the colbert-ai worker)."""
    from cqabench import retrievers

    with tempfile.TemporaryDirectory(prefix="colbert-footprint-") as tmp:
        work = Path(tmp)
        pool = passages(work)
        settings = {"type": "colbert", "model": str(args.model), "nbits": 2, "doc_maxlen": 180,
                    "kmeans_niters": 4, "chunksize": args.chunksize, "threads": args.threads, "timeout_s": 3600}  # fmt: skip
        started = time.perf_counter()
        retrievers.build_index(sized(pool, args.one), work / "index", settings)
        wall = time.perf_counter() - started
        plaid = work / "index" / "plaid"
        meta = json.loads((plaid / "metadata.json").read_text())
        kinds: dict[str, int] = {}
        for f in plaid.iterdir():
            kind = ("codes" if f.name.endswith(".codes.pt") else "residuals" if f.name.endswith(".residuals.pt")
                    else "ivf" if f.name.startswith("ivf") else "doclens" if f.name.startswith("doclens")
                    else "centroids" if f.name == "centroids.pt" else "other")  # fmt: skip
            kinds[kind] = kinds.get(kind, 0) + f.stat().st_size
        print(json.dumps({
            "passages": args.one, "distinct": len(pool), "num_embeddings": meta["num_embeddings"],
            "avg_doclen": meta["avg_doclen"], "num_partitions": meta["num_partitions"],
            "num_chunks": meta["num_chunks"], "dim": meta["config"]["dim"], "bytes": kinds,
            "docids_bytes": (work / "index" / "docids.txt").stat().st_size,
            "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "wall_s": wall,
        }))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--chunksize", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", type=Path, default=None, help="a ColBERT checkpoint folder (default: the tiny one)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        one(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="colbert-model-") as tmp:
        model = args.model
        if model is None:
            sys.path.insert(0, str(ROOT / "tests"))
            import models_fixtures

            model = models_fixtures.tiny_colbert(Path(tmp) / "model")
        rows = []
        for n in args.sizes:
            cmd = [sys.executable, __file__, "--one", str(n), "--chunksize", str(args.chunksize),
                   "--threads", str(args.threads), "--model", str(model)]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"{'passages':>9} {'emb/pass':>8} {'parts':>6} {'chunks':>6} {'codes B/emb':>11} {'resid B/emb':>11} "
          f"{'ivf B/emb':>9} {'dim':>4} {'peak RSS MB':>11} {'wall s':>7}")  # fmt: skip
    for r in rows:
        e = r["num_embeddings"]
        b = r["bytes"]
        print(f"{r['passages']:>9} {r['avg_doclen']:>8.1f} {r['num_partitions']:>6} {r['num_chunks']:>6} "
              f"{b.get('codes', 0) / e:>11.2f} {b.get('residuals', 0) / e:>11.2f} {b.get('ivf', 0) / e:>9.2f} "
              f"{r['dim']:>4} {r['worker_peak_rss_mb']:>11.0f} {r['wall_s']:>7.1f}")  # fmt: skip
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
