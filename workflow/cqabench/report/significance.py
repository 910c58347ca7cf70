"""Paired significance between two cells scored on the same questions.

Two differences of a few points on a few hundred questions are often noise; a paired test on
per-question scores says how often. Both tests here are two-sided and paired by qid:

* randomization (sign-flip permutation): under H0 the two systems are exchangeable on each
  question, so each per-question difference keeps or flips its sign with probability 1/2.
  Exact (all 2^n flips) when that is no more than the number of resamples asked for.
* paired bootstrap: resample questions with replacement; a percentile confidence interval of
  the mean difference, and a p-value from the bootstrap distribution shifted to mean zero.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from cqabench.errors import ConfigError

_CHUNK = 2000  # resamples per vectorised batch: bounds memory at _CHUNK * n floats


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


def _pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ConfigError(f"paired test needs two equal-length 1-d score arrays, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ConfigError("paired test needs at least one question scored by both cells")
    if np.isnan(a).any() or np.isnan(b).any():
        raise ConfigError("per-question scores contain NaN; drop or fix those questions first")
    return a, b


def randomization_test(a, b, resamples: int = 10000, seed: int = 0) -> TestResult:
    """Two-sided paired sign-flip test on the mean difference."""
    a, b = _pair(a, b)
    d = a - b
    n = d.size
    observed = abs(d.mean())
    tol = 1e-12 * max(1.0, observed)
    if n <= 20 and 2**n <= resamples:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        stats = np.abs(signs @ d) / n
        p = float(np.mean(stats >= observed - tol))
        return TestResult("randomization", n, a.mean(), b.mean(), d.mean(), p, resamples=len(signs), exact=True)
    rng = np.random.default_rng(seed)
    hits = 0
    done = 0
    while done < resamples:
        m = min(_CHUNK, resamples - done)
        signs = rng.choice((-1.0, 1.0), size=(m, n))
        hits += int(np.sum(np.abs(signs @ d) / n >= observed - tol))
        done += m
    p = (hits + 1) / (resamples + 1)
    return TestResult("randomization", n, a.mean(), b.mean(), d.mean(), p, resamples=resamples)


def bootstrap_test(a, b, resamples: int = 10000, seed: int = 0, confidence: float = 0.95) -> TestResult:
    """Paired bootstrap over questions: percentile CI of mean(a-b) and a two-sided p-value."""
    a, b = _pair(a, b)
    d = a - b
    n = d.size
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    done = 0
    while done < resamples:
        m = min(_CHUNK, resamples - done)
        idx = rng.integers(0, n, size=(m, n))
        means[done : done + m] = d[idx].mean(axis=1)
        done += m
    observed = d.mean()
    alpha = (1.0 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    # Shifted to H0 (mean 0): how often is a resampled mean at least as far from 0 as observed?
    tol = 1e-12 * max(1.0, abs(observed))
    extreme = np.sum(np.abs(means - observed) >= abs(observed) - tol)
    p = float((extreme + 1) / (resamples + 1))
    return TestResult("bootstrap", n, a.mean(), b.mean(), observed, min(1.0, p), float(low), float(high), resamples)


def parse_spec(text: str) -> dict[str, str]:
    """'k=v,k2=v2' -> {k: v, k2: v2}; values stay text and match columns compared as text."""
    spec: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"cell spec {text!r}: expected comma-separated key=value pairs, got {part!r}")
        spec[key.strip()] = value.strip()
    if not spec:
        raise ConfigError("empty cell spec: name the cell with key=value pairs, e.g. 'dataset=musique,k=5'")
    return spec


def cell_scores(frame: pd.DataFrame, spec: dict[str, str], metric: str, variant: str | None = None) -> pd.Series:
    """Per-question scores (indexed by qid) of the one cell `spec` names."""
    unknown = [k for k in spec if k not in frame.columns]
    if unknown:
        raise ConfigError(f"unknown columns {unknown} in cell spec; per_question.parquet has {sorted(frame.columns)}")
    mask = frame["metric"].astype("string") == metric
    if variant is not None:
        mask &= frame["variant"].astype("string") == variant
    for key, value in spec.items():
        mask &= frame[key].astype("string") == value
    chosen = frame[mask.fillna(False).astype(bool)]
    if chosen.empty:
        raise ConfigError(f"no per-question scores for {spec} with metric={metric!r}"
                          + (f", variant={variant!r}" if variant else ""))
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
    frame: pd.DataFrame, spec_a: dict[str, str], spec_b: dict[str, str], metric: str,
    variant: str | None = None, method: str = "both", resamples: int = 10000, seed: int = 0,
) -> dict[str, Any]:
    """Run the paired test(s) on the questions both cells scored."""
    a = cell_scores(frame, spec_a, metric, variant)
    b = cell_scores(frame, spec_b, metric, variant)
    common = a.index.intersection(b.index).sort_values()
    if len(common) == 0:
        raise ConfigError("the two cells share no question ids; a paired test needs the same questions")
    out: dict[str, Any] = {
        "a": spec_a, "b": spec_b, "metric": metric, "variant": variant,
        "n_a": int(a.size), "n_b": int(b.size), "n_common": int(len(common)), "tests": [],
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
        f"metric {result['metric']}" + (f" ({result['variant']})" if result.get("variant") else "")
        + f": {result['n_common']} common questions (A has {result['n_a']}, B has {result['n_b']})",
    ]
    for t in result["tests"]:
        line = (f"  {t['method']:<13} mean A {t['mean_a']:.4f}  mean B {t['mean_b']:.4f}  "
                f"A-B {t['diff']:+.4f}  p = {t['p_value']:.4g}")
        if t.get("ci_low") is not None:
            line += f"  95% CI [{t['ci_low']:+.4f}, {t['ci_high']:+.4f}]"
        line += "  (exact)" if t.get("exact") else f"  ({t['resamples']} resamples)"
        lines.append(line)
    return "\n".join(lines)
