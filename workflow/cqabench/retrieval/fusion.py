"""Fused runs: several runs of one dataset split combined into one ranking with ranx's `fuse`.

A fusion is a run declared under `retrieval.pipelines` (`{type: fusion, fuse: [bm25, minilm],
method: rrf, rrf_k: 60}`); it has no index, it reads its input runs' Parquet files. ranx (Bassani
2022) is the IR field's fusion library: 25 methods with their normalisations, the reference
implementations the fusion literature is compared against. We call `ranx.fuse` and keep two
things in our hands, so that a fused run is ordered exactly like every other run:

- **Input order.** ranx's RRF reads each input's rank from the order of its documents after ranx
  sorts them by score, and that sort does not say how it breaks ties. Our runs are ordered by
  score, ties by docid descending (trec_eval's rule, `base.rank`). For the rank-based method
  (`rrf`) each input is therefore handed to ranx with the score 1/rank of our order, strictly
  decreasing, so ranx sees our ranks and RRF(d) = sum over inputs of 1 / (rrf_k + rank_i(d)), a
  document missing from an input adding nothing (Cormack et al. 2009).
- **Output order and depth.** The fused scores are ranked with `base.rank` (ties by docid
  descending, so a document at rank 1 of one input and one at rank 1 of the other, with equal
  RRF scores, are ordered by docid) and cut to `depth` (default `retrieval.k`).

Score-based methods (`combsum`, `combmnz`) normalise each input's scores per query first
(`norm`: `min-max`, (s - min) / (max - min), or `zmuv`, (s - mean) / std; ranx guards a zero
denominator with 1e-9, so a query with one document, or all scores equal, normalises to 0),
then CombSUM adds a document's normalised scores over the inputs (0 where absent) and CombMNZ
multiplies that sum by the number of inputs that retrieved it (Fox & Shaw 1993).

ranx compiles its kernels with numba on first use (about a minute on a small CPU; cached in
ranx's own `__pycache__` afterwards).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.retrieval.base import Results, rank

log = logging.getLogger(__name__)

# Our method name -> ranx's; each method's own parameters and their defaults.
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


def _ranx_input(results: Results, qids: Sequence[str], by_rank: bool) -> dict[str, dict[str, float]]:
    """One input as ranx's dict, every query present (ranx requires equal query sets): by our
    ranks (1/rank, strictly decreasing in our order) for a rank method, else the scores."""
    out: dict[str, dict[str, float]] = {}
    for qid in qids:
        ordered = rank(results.get(qid, []), len(results.get(qid, [])))
        out[qid] = {d: 1.0 / r for r, (d, _) in enumerate(ordered, start=1)} if by_rank else dict(ordered)
    return out


def fuse(inputs: Sequence[Results], settings: Mapping[str, Any], qids: Sequence[str] | None = None) -> Results:
    """The fused ranking of every query of `qids` (default: every query of any input), best
    first, cut to `settings['depth']`; `settings` is `resolve`'s output."""
    if len(inputs) < 2:
        raise ConfigError(f"a fusion needs at least two runs, got {len(inputs)}")
    queries = list(qids) if qids is not None else sorted({q for run in inputs for q in run})
    depth = int(settings["depth"])
    method = settings["method"]
    by_rank = method in RANK_METHODS
    dicts = [_ranx_input(run, queries, by_rank) for run in inputs]
    out: Results = {qid: [] for qid in queries}
    if not any(docs for d in dicts for docs in d.values()):
        return out  # ranx cannot build a run without a single document
    from ranx import Run
    from ranx import fuse as ranx_fuse

    runs = [Run.from_dict(d, name=f"input{i}") for i, d in enumerate(dicts)]
    params = {"k": int(settings["rrf_k"])} if by_rank else {}
    log.info("fusion: %s of %d runs over %d queries (ranx)", method, len(runs), len(queries))
    fused = ranx_fuse(runs, norm=None if by_rank else settings["norm"], method=METHODS[method], params=params)
    for qid, docs in fused.to_dict().items():
        out[str(qid)] = rank(((str(d), float(s)) for d, s in docs.items()), depth)
    return out
