"""Paired significance between cells scored on the same questions, and corrections over families.

Two differences of a few points on a few hundred questions are often noise; a paired test on
per-question scores says how often. Both tests here are two-sided, paired by qid, and built on
`scipy.stats` (the reference implementations, not loops of our own):

* randomization (sign-flip permutation): under H0 the two systems are exchangeable on each
  question, so each per-question difference keeps or flips its sign with probability 1/2.
  `scipy.stats.permutation_test(..., permutation_type="samples")` swaps a and b within each
  pair, which is that sign flip for the statistic mean(a - b). Exact (all 2^n flips) when that
  is no more than the number of resamples asked for; else seeded random flips, p = (hits + 1) /
  (resamples + 1) per tail, two-sided as twice the smaller tail (scipy's definition; equal to
  the |mean| definition for the exact, symmetric null).
* paired bootstrap: `scipy.stats.bootstrap` over questions of the differences; a percentile
  confidence interval of the mean difference, and a p-value from the bootstrap distribution
  shifted to mean zero.

Many comparisons (every retriever against BM25 on every dataset, every RAG@k against
closed-book) are a family: `adjust` corrects their p-values with Holm's step-down method
(family-wise error; scipy has no Holm, so it is the four lines below) or Benjamini-Hochberg
(`scipy.stats.false_discovery_control`, false discovery rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from cqabench.common.errors import ConfigError

CORRECTIONS = ("holm", "bh")
CORRECTION_NAMES = {"holm": "Holm", "bh": "BH"}
CORRECTION_TEXT = {
    "holm": "Holm step-down (family-wise error rate)",
    "bh": "Benjamini-Hochberg (false discovery rate, scipy.stats.false_discovery_control)",
}


@dataclass
class TestResult:
    method: str
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean(a - b)
    p_value: float
    ci_low: float | None = None
    ci_high: float | None = None
    resamples: int = 0
    exact: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pair(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ConfigError(f"paired test needs two equal-length 1-d score arrays, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ConfigError("paired test needs at least one question scored by both cells")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ConfigError("per-question scores contain NaN; drop or fix those questions first")
    return a, b


def _mean_diff(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def randomization_test(a: Any, b: Any, resamples: int = 10000, seed: int = 0) -> TestResult:
    """Two-sided paired sign-flip test on the mean difference (scipy.stats.permutation_test)."""
    from scipy.stats import permutation_test

    a, b = _pair(a, b)
    n = a.size
    d = a - b
    if n == 1:  # scipy wants two pairs; the 2 flips of one difference both reach |d|: p = 1
        return TestResult("randomization", 1, float(a[0]), float(b[0]), float(d[0]), 1.0, resamples=2, exact=True)
    exact = 2**n <= resamples
    result = permutation_test(
        (a, b),
        _mean_diff,
        permutation_type="samples",
        vectorized=True,
        alternative="two-sided",
        n_resamples=np.inf if exact else resamples,
        batch=2000,
        rng=np.random.default_rng(seed),
    )
    return TestResult(
        "randomization",
        n,
        float(a.mean()),
        float(b.mean()),
        float(d.mean()),
        float(min(1.0, result.pvalue)),
        resamples=2**n if exact else resamples,
        exact=exact,
    )


def bootstrap_test(a: Any, b: Any, resamples: int = 10000, seed: int = 0, confidence: float = 0.95) -> TestResult:
    """Paired bootstrap over questions (scipy.stats.bootstrap): percentile CI of mean(a-b), two-sided p."""
    from scipy.stats import bootstrap

    a, b = _pair(a, b)
    d = a - b
    observed = float(d.mean())
    if np.all(d == d[0]):  # every resample has the same mean (scipy calls such data degenerate)
        means = np.full(resamples, observed)
        low = high = observed
    else:
        result = bootstrap(
            (d,),
            np.mean,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            batch=2000,
            rng=np.random.default_rng(seed),
        )
        means = result.bootstrap_distribution
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    # Shifted to H0 (mean 0): how often is a resampled mean at least as far from 0 as observed?
    tol = 1e-12 * max(1.0, abs(observed))
    extreme = np.sum(np.abs(means - observed) >= abs(observed) - tol)
    p = float((extreme + 1) / (resamples + 1))
    return TestResult(
        "bootstrap", d.size, float(a.mean()), float(b.mean()), observed, min(1.0, p), low, high, resamples
    )


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (family-wise error), in the input order; None stays None.

    Sorted ascending p_(1) ≤ … ≤ p_(m): adjusted p_(i) = max over j ≤ i of min(1, (m − j + 1) p_(j)).
    """
    present = [(p, i) for i, p in enumerate(p_values) if p is not None and not math.isnan(p)]
    m = len(present)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def benjamini_hochberg(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p-values (scipy.stats.false_discovery_control), input order; None stays None."""
    from scipy.stats import false_discovery_control

    present = [(i, p) for i, p in enumerate(p_values) if p is not None and not math.isnan(p)]
    out: list[float | None] = [None] * len(p_values)
    if present:
        adjusted = false_discovery_control([p for _, p in present], method="bh")
        for (i, _), q in zip(present, adjusted):
            out[i] = float(q)
    return out


def adjust(p_values: Sequence[float | None], method: str = "holm") -> list[float | None]:
    """One family's p-values corrected for multiplicity with `method` (holm | bh)."""
    if method == "holm":
        return holm(p_values)
    if method == "bh":
        return benjamini_hochberg(p_values)
    raise ConfigError(f"multiple-testing correction must be one of {list(CORRECTIONS)}, not {method!r}")


def parse_spec(text: str) -> dict[str, str]:
    """'k=v,k2=v2' -> {k: v, k2: v2}; values stay text until `cell_scores` compares them with a column."""
    spec: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"cell spec {text!r}: expected comma-separated key=value pairs, got {part!r}")
        spec[key.strip()] = value.strip()
    if not spec:
        raise ConfigError("empty cell spec: name the cell with key=value pairs, e.g. 'dataset=musique,k=5'")
    return spec


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def column_matches(column: pd.Series, key: str, value: str) -> pd.Series:
    """Rows of `column` equal to the spec's text `value`, compared as the column's type.

    A numeric column compares as a number, so `k=5` matches a k read back as 5.0 (the fact
    table's k is float64 in pandas as soon as a retrieval row leaves it null); a boolean
    column takes true / false (or 1 / 0, yes / no); any other column compares as text.
    """
    if pd.api.types.is_bool_dtype(column):
        text = value.strip().lower()
        if text not in _TRUE + _FALSE:
            raise ConfigError(f"cell spec {key}={value!r}: {key} is a true / false column")
        return column == (text in _TRUE)
    if pd.api.types.is_numeric_dtype(column):
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"cell spec {key}={value!r}: {key} is a numeric column; give a number") from None
        return pd.to_numeric(column, errors="coerce") == number
    return column.astype("string") == value


def cell_scores(frame: pd.DataFrame, spec: dict[str, str], metric: str, variant: str | None = None) -> pd.Series:
    """Per-question scores (indexed by qid) of the one cell `spec` names."""
    unknown = [k for k in spec if k not in frame.columns]
    if unknown:
        raise ConfigError(f"unknown columns {unknown} in cell spec; per_question.parquet has {sorted(frame.columns)}")
    mask = frame["metric"].astype("string") == metric
    if variant is not None:
        mask &= frame["variant"].astype("string") == variant
    for key, value in spec.items():
        mask &= column_matches(frame[key], key, value)
    chosen = frame[mask.fillna(False).astype(bool)]
    if chosen.empty:
        raise ConfigError(
            f"no per-question scores for {spec} with metric={metric!r}" + (f", variant={variant!r}" if variant else "")
        )
    cells = sorted(chosen["cell_id"].astype(str).unique())
    if len(cells) > 1:
        raise ConfigError(f"{spec} matches {len(cells)} cells; add switches to pick one: {cells[:10]}")
    variants = chosen["variant"].astype("string").dropna().unique() if "variant" in chosen else []
    if len(variants) > 1:
        raise ConfigError(f"{spec} metric {metric!r} has several variants {sorted(variants)}; pass --variant")
    scores = pd.to_numeric(chosen["value"], errors="coerce")
    scores.index = chosen["qid"].astype(str)
    if scores.index.duplicated().any():
        raise ConfigError(f"{spec}: a qid appears twice for metric {metric!r}")
    return scores


def compare(
    frame: pd.DataFrame,
    spec_a: dict[str, str],
    spec_b: dict[str, str],
    metric: str,
    variant: str | None = None,
    method: str = "both",
    resamples: int = 10000,
    seed: int = 0,
) -> dict[str, Any]:
    """Run the paired test(s) on the questions both cells scored."""
    a = cell_scores(frame, spec_a, metric, variant)
    b = cell_scores(frame, spec_b, metric, variant)
    common = a.index.intersection(b.index).sort_values()
    if len(common) == 0:
        raise ConfigError("the two cells share no question ids; a paired test needs the same questions")
    out: dict[str, Any] = {
        "a": spec_a,
        "b": spec_b,
        "metric": metric,
        "variant": variant,
        "n_a": int(a.size),
        "n_b": int(b.size),
        "n_common": len(common),
        "tests": [],
    }
    xa, xb = a.loc[common].to_numpy(), b.loc[common].to_numpy()
    if method in ("both", "randomization"):
        out["tests"].append(randomization_test(xa, xb, resamples, seed).as_dict())
    if method in ("both", "bootstrap"):
        out["tests"].append(bootstrap_test(xa, xb, resamples, seed).as_dict())
    if not out["tests"]:
        raise ConfigError(f"method must be both, randomization or bootstrap, not {method!r}")
    return out


def format_result(result: dict[str, Any]) -> str:
    lines = [
        f"A: {result['a']}",
        f"B: {result['b']}",
        f"metric {result['metric']}"
        + (f" ({result['variant']})" if result.get("variant") else "")
        + f": {result['n_common']} common questions (A has {result['n_a']}, B has {result['n_b']})",
    ]
    for t in result["tests"]:
        line = (
            f"  {t['method']:<13} mean A {t['mean_a']:.4f}  mean B {t['mean_b']:.4f}  "
            f"A-B {t['diff']:+.4f}  p = {t['p_value']:.4g}"
        )
        if t.get("ci_low") is not None:
            line += f"  95% CI [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}]"
        line += "  (exact)" if t.get("exact") else f"  ({t['resamples']} resamples)"
        lines.append(line)
    return "\n".join(lines)
