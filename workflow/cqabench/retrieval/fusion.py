"""Fused runs: several runs of one dataset split combined into one ranking, as ranx's `fuse` does.

A fusion is a run declared under `retrieval.pipelines` (`{type: fusion, fuse: [bm25, minilm],
method: rrf, rrf_k: 60}`); it has no index, it reads its input runs' Parquet files. ranx (Bassani
2022) is the IR field's fusion library and our reference: `tests/retrieval/test_fusion.py` checks
every method here against `ranx.fuse` on real runs, score for score. We compute the three methods
we offer ourselves because ranx compiles its numba kernels in every fresh process (8-48 s a
`fuse_runs` job on a 2-core EPYC, 212 s of the default run, for a sum over a few thousand lines);
the arithmetic below is ranx's, in the same order, so the floats are the same:

- **Input order.** RRF reads each input's ranks in our order: score, ties by docid descending
  (trec_eval's rule, `base.rank`), so RRF(d) = sum over inputs of 1 / (rrf_k + rank_i(d)), a
  document missing from an input adding nothing (Cormack et al. 2009).
- **Output order and depth.** The fused scores are ranked with `base.rank` (ties by docid
  descending, so a document at rank 1 of one input and one at rank 1 of the other, with equal
  RRF scores, are ordered by docid) and cut to `depth` (default `retrieval.k`).

Score-based methods (`combsum`, `combmnz`) normalise each input's scores per query first
(`norm`: `min-max`, (s - min) / (max - min), or `zmuv`, (s - mean) / std, population std; ranx
guards a zero denominator with 1e-9, so a query with one document, or all scores equal,
normalises to 0), then CombSUM adds a document's normalised scores over the inputs (0 where
absent) and CombMNZ multiplies that sum by the number of inputs that retrieved it (Fox & Shaw
1993). Sums run left to right over the inputs (and, for the mean and std, over the documents in
rank order), as ranx's compiled loops do.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.retrieval.base import Results, rank

log = logging.getLogger(__name__)

# Our method name -> ranx's (the reference in the tests); each method's own parameters and defaults.
METHODS: dict[str, str] = {"rrf": "rrf", "combsum": "sum", "combmnz": "mnz"}
RANK_METHODS = ("rrf",)  # read ranks, not scores: no normalisation
NORMS = ("min-max", "zmuv")
DEFAULT_RRF_K = 60  # Cormack et al. 2009, ranx's default
KEYS = frozenset({"type", "fuse", "method", "rrf_k", "norm", "depth"})


def resolve(settings: Mapping[str, Any], default_depth: int) -> dict[str, Any]:
    """Every setting a fusion reads, defaults filled in and checked (what every result row records).

    `rrf_k` belongs to RRF and `norm` to the score-based methods: the other method would record it
    in every row while ignoring it, so it is refused, as the retriever families refuse keys with no
    effect (docs/retrievers_neural.md). (RRF's constant is `rrf_k`, not `k`: everywhere else in
    the config and in every result row, `k` is a depth; a run's `k` becomes the `retriever_depth`
    column.)
    """
    unknown = sorted(set(settings) - KEYS)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}; a fusion takes {', '.join(sorted(KEYS))}")
    fuse = settings.get("fuse")
    if not isinstance(fuse, list) or len(fuse) < 2 or not all(isinstance(n, str) and n for n in fuse):
        raise ConfigError(f"fuse: needs a list of at least two run names, got {fuse!r}")
    if len(set(fuse)) != len(fuse):
        raise ConfigError(f"fuse: names a run twice ({fuse}); weight it with another method, not by repeating it")
    method = settings.get("method", "rrf")
    if method not in METHODS:
        raise ConfigError(f"method: {method!r} is not one of {', '.join(METHODS)}")
    out: dict[str, Any] = {"type": "fusion", "fuse": list(fuse), "method": method}
    if method in RANK_METHODS:
        if "norm" in settings:
            raise ConfigError(f"norm: {method} fuses ranks, so a score normalisation changes nothing; drop it")
        out["rrf_k"] = _positive(settings.get("rrf_k", DEFAULT_RRF_K), "rrf_k")
    else:
        if "rrf_k" in settings:
            raise ConfigError(f"rrf_k: is RRF's constant; method {method} does not read it")
        norm = settings.get("norm", "min-max")
        if norm not in NORMS:
            raise ConfigError(f"norm: {norm!r} is not one of {', '.join(NORMS)}")
        out["norm"] = norm
    out["depth"] = _positive(settings.get("depth", default_depth), "depth")
    return out


def _positive(value: Any, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{key}: must be a positive integer, got {value!r}")
    return value


def _ordered(results: Results, qid: str) -> list[tuple[str, float]]:
    return rank(results.get(qid, []), len(results.get(qid, [])))


def _rrf_scores(ordered: Sequence[tuple[str, float]], rrf_k: int) -> dict[str, float]:
    return {doc: 1 / (rrf_k + r) for r, (doc, _) in enumerate(ordered, start=1)}


def _normalised(ordered: Sequence[tuple[str, float]], norm: str) -> dict[str, float]:
    """One input's scores of one query, normalised as ranx's min_max_norm / zmuv_norm."""
    if not ordered:
        return {}
    scores = [s for _, s in ordered]
    if norm == "min-max":
        low = min(scores)
        denominator = max(max(scores) - low, 1e-9)
        return {doc: (s - low) / denominator for doc, s in ordered}
    total = 0.0
    for s in scores:
        total += s
    mean = total / len(scores)
    squares = 0.0
    for s in scores:
        squares += (s - mean) * (s - mean)
    denominator = max(math.sqrt(squares / len(scores)), 1e-9)
    return {doc: (s - mean) / denominator for doc, s in ordered}


def _combined(per_input: Sequence[Mapping[str, float]], mnz: bool) -> dict[str, float]:
    """CombSUM (or CombMNZ) of one query over the inputs, documents in order of first appearance."""
    out: dict[str, float] = {}
    for scores in per_input:
        for doc in scores:
            if doc in out:
                continue
            present = [s[doc] for s in per_input if doc in s]
            total = sum(present) if mnz else sum(s.get(doc, 0.0) for s in per_input)
            out[doc] = total * len(present) if mnz else total
    return out


def fuse(inputs: Sequence[Results], settings: Mapping[str, Any], qids: Sequence[str] | None = None) -> Results:
    """The fused ranking of every query of `qids` (default: every query of any input), best
    first, cut to `settings['depth']`; `settings` is `resolve`'s output."""
    if len(inputs) < 2:
        raise ConfigError(f"a fusion needs at least two runs, got {len(inputs)}")
    queries = list(qids) if qids is not None else sorted({q for run in inputs for q in run})
    depth = int(settings["depth"])
    method = settings["method"]
    log.info("fusion: %s of %d runs over %d queries", method, len(inputs), len(queries))
    out: Results = {}
    for qid in queries:
        ordered = [_ordered(run, qid) for run in inputs]
        if method in RANK_METHODS:
            per_input = [_rrf_scores(o, int(settings["rrf_k"])) for o in ordered]
        else:
            per_input = [_normalised(o, settings["norm"]) for o in ordered]
        out[qid] = rank(_combined(per_input, mnz=method == "combmnz").items(), depth)
    return out
