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
        [--sources musique ambigqa ottqa] [--write-rates benchmarks/rates.yaml]

--write-rates FILE writes what this measures as the estimate's ColBERT rates
(cqabench.estimate.model), with this machine, today and this command as provenance:
colbert.data.any.index_bytes_per_embedding (codes + residuals per embedding at the largest size,
residuals scaled to ColBERTv2's dim 128), colbert.data.any.ivf_disk_bytes_per_embedding (the
largest over the sizes), colbert.cpu.any.base_peak_mb (the worker's peak at the smallest size,
where the per-embedding terms are least), and colbert.data.any.embeddings_per_doc only when
`--sources ambigqa` alone was indexed: that rate is avg_doclen on AmbigQA's psgs_w100 passages
(the Wikipedia passages the big corpora are made of); the default mix of MuSiQue, AmbigQA and
OTT-QA passages measures another quantity and does not overwrite it. base_peak_mb needs a
smallest size of at least 1,000 passages (the default sizes).
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


TARGET_DIM = 128  # ColBERTv2's (colbert-ir/colbertv2.0), rates colbert.data.any.dims
NBITS = 2
MB = 1e6  # the estimate's MB (cqabench.estimate.model)
# below this many passages colbert-ai's score block (num_embeddings x partitions floats, up to
# 2 GiB) is too small to stand for the fixed block the base_peak_mb rate includes (600 MB at 60
# passages against 1,987 MB at 1,000): a smaller run does not write that rate
BASE_PEAK_MIN_PASSAGES = 1000


def passages(work: Path, sources: list[str]) -> list[tuple[str, str, str]]:
    """The sample's text passages (tables left out: ColBERT passages are text), by `cqabench prepare`."""
    from cqabench.cli import main
    from cqabench.data.documents import iter_documents

    out: list[tuple[str, str, str]] = []
    for name in sources:
        split, files = SOURCES[name]
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
    from cqabench import retrieval as retrievers

    with tempfile.TemporaryDirectory(prefix="colbert-footprint-") as tmp:
        work = Path(tmp)
        pool = passages(work, args.sources)
        settings = {"type": "colbert", "model": str(args.model), "nbits": NBITS, "doc_maxlen": 180,
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


def rate_entries(rows: list[dict], sources: list[str]) -> dict[tuple[str, str], dict[str, tuple[float, str]]]:
    """(device class, model) -> rates.colbert values from the per-size rows `one` prints.
    Residual bytes scale with dim x nbits / 8, so a checkpoint of another dim (the tiny one's 16)
    is scaled to ColBERTv2's 128; codes (one centroid id per embedding) and the IVF do not depend
    on dim. The worker's base memory is its peak at the smallest size, as the estimate adds the
    per-embedding terms on top of it; written only from a run of at least
    BASE_PEAK_MIN_PASSAGES passages."""
    big = max(rows, key=lambda r: r["passages"])
    small = min(rows, key=lambda r: r["passages"])
    e, b = big["num_embeddings"], big["bytes"]
    scale = TARGET_DIM / big["dim"]
    data: dict[str, tuple[float, str]] = {
        "index_bytes_per_embedding": (
            (b.get("codes", 0) + b.get("residuals", 0) * scale) / e,
            f"bytes on disk per embedding: codes + residuals ({TARGET_DIM} x {NBITS} bits / 8), {big['passages']:,} passages"),
        "ivf_disk_bytes_per_embedding": (max(r["bytes"].get("ivf", 0) / r["num_embeddings"] for r in rows),
                                         "bytes on disk per embedding of the IVF (largest over the sizes)"),
    }  # fmt: skip
    if list(sources) == ["ambigqa"]:
        data["embeddings_per_doc"] = (big["avg_doclen"], "token embeddings per passage (colbert-ai avg_doclen)")
    out = {("data", "any"): data}
    if small["passages"] >= BASE_PEAK_MIN_PASSAGES:
        out[("cpu", "any")] = {"base_peak_mb": (
            small["worker_peak_rss_mb"] * 2**20 / MB,
            f"MB: the worker's torch, faiss and the fixed 2 GiB score block ({small['passages']:,} passages)")}  # fmt: skip
    return out


def write_rates(path: Path, rows: list[dict], sources: list[str], argv: list[str] | None = None) -> None:
    """Update rates.colbert in `path` through the shared helper (provenance included)."""
    sys.path.insert(0, str(ROOT / "workflow"))
    from cqabench.estimate.rates import provenance, update_rates

    sizes = ", ".join(f"{r['passages']:,}" for r in sorted(rows, key=lambda r: r["passages"]))
    prov = provenance(argv, source=f"colbert_footprint: {sizes} passages of the sample's {'+'.join(sources)}, "
                                   f"checkpoint dim {rows[0]['dim']}")  # fmt: skip
    for (device, model), values in rate_entries(rows, sources).items():
        update_rates(path, "colbert", device, model, values, prov)
        print(f"wrote rates.colbert.{device}.{model} ({', '.join(values)}) to {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--chunksize", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", type=Path, default=None, help="a ColBERT checkpoint folder (default: the tiny one)")
    parser.add_argument(
        "--sources",
        nargs="+",
        choices=list(SOURCES),
        default=list(SOURCES),
        help="the sample's passages to index (default all; ambigqa alone also measures embeddings_per_doc)",
    )
    parser.add_argument(
        "--write-rates",
        type=Path,
        default=None,
        metavar="RATES",
        help="update the colbert rates this measures in RATES (benchmarks/rates.yaml)",
    )
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
                   "--threads", str(args.threads), "--model", str(model), "--sources", *args.sources]  # fmt: skip
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
    if args.write_rates:
        write_rates(args.write_rates, rows, args.sources)
    return 0


if __name__ == "__main__":
    sys.exit(main())
