"""Paired tests: checked against scipy's reference implementation and against hand computation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.report.significance import (
    adjust,
    benjamini_hochberg,
    bootstrap_test,
    compare,
    holm,
    parse_spec,
    randomization_test,
)


def test_exact_randomization_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    a = rng.random(12)
    b = a - 0.15 + rng.normal(0, 0.2, 12)
    ours = randomization_test(a, b, resamples=10000)
    assert ours.exact and ours.resamples == 2**12
    ref = stats.permutation_test(
        (a, b), lambda x, y: np.mean(x - y), permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    )
    assert ours.p_value == pytest.approx(ref.pvalue, abs=1e-12)
    assert ours.diff == pytest.approx(np.mean(a - b))


def test_randomization_by_hand() -> None:
    # d = (1, 1, 1): of the 8 sign patterns only +++ and --- reach |mean| = 1, so p = 2/8.
    r = randomization_test([1, 1, 1], [0, 0, 0])
    assert r.p_value == pytest.approx(0.25) and r.diff == 1.0
    # Identical systems: every pattern gives 0 >= 0, p = 1.
    assert randomization_test([0.3, 0.5], [0.3, 0.5]).p_value == 1.0


def test_sampled_randomization_close_to_exact() -> None:
    rng = np.random.default_rng(2)
    a = rng.random(16)
    b = rng.random(16)
    exact = randomization_test(a, b, resamples=2**16).p_value
    sampled = randomization_test(a, b, resamples=4000, seed=3)
    assert not sampled.exact and sampled.p_value == pytest.approx(exact, abs=0.03)


def test_bootstrap_ci_and_p() -> None:
    rng = np.random.default_rng(4)
    a = rng.binomial(1, 0.6, 400).astype(float)
    b = rng.binomial(1, 0.3, 400).astype(float)
    r = bootstrap_test(a, b, resamples=3000, seed=0)
    diff = a.mean() - b.mean()
    se = np.std(a - b, ddof=1) / np.sqrt(400)
    # The percentile interval sits close to the normal-approximation interval d ± 1.96 se.
    assert r.ci_low == pytest.approx(diff - 1.96 * se, abs=0.01)
    assert r.ci_high == pytest.approx(diff + 1.96 * se, abs=0.01)
    assert r.p_value < 0.001
    same = bootstrap_test(a, a, resamples=500)
    assert same.diff == 0 and same.p_value == 1.0


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="equal-length"):
        randomization_test([1, 2], [1])
    with pytest.raises(ConfigError, match="NaN"):
        bootstrap_test([1, np.nan], [1, 2])
    with pytest.raises(ConfigError, match="key=value"):
        parse_spec("dataset")


def _frame() -> pd.DataFrame:
    rows = []
    for k, scores in ((1, [1, 0, 0, 1, 0]), (5, [1, 1, 1, 1, 0])):
        for i, s in enumerate(scores):
            rows.append(
                {
                    "cell_id": f"c{k}",
                    "dataset": "musique",
                    "llm": "m",
                    "k": k,
                    "qid": f"q{i}",
                    "metric": "cover_em",
                    "variant": "dexter",
                    "value": float(s),
                }
            )
    return pd.DataFrame(rows)


def test_compare_selects_cells_by_text_specs() -> None:
    out = compare(_frame(), parse_spec("dataset=musique,k=5"), parse_spec("k=1"), "cover_em")
    assert out["n_common"] == 5
    rnd = out["tests"][0]
    assert rnd["method"] == "randomization" and rnd["diff"] == pytest.approx(0.4)
    # d = (0,1,1,0,0): 4 sign patterns over the two non-zero entries, |mean| = 0.4 for 2 of them.
    assert rnd["exact"] and rnd["p_value"] == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="matches 2 cells"):
        compare(_frame(), {"dataset": "musique"}, {"k": "1"}, "cover_em")
    with pytest.raises(ConfigError, match="unknown columns"):
        compare(_frame(), {"retriever": "bm25"}, {"k": "1"}, "cover_em")


def test_cli(tmp_path, capsys) -> None:
    path = tmp_path / "pq.parquet"
    _frame().to_parquet(path)
    rc = main(
        [
            "significance",
            "--per-question",
            str(path),
            "--a",
            "k=5",
            "--b",
            "k=1",
            "--metric",
            "cover_em",
            "--resamples",
            "500",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "A-B +0.4000" in text and "(exact)" in text and "95% CI" in text
    assert (tmp_path / "r.json").exists()
    assert main(["significance", "--per-question", str(path), "--a", "k=9", "--b", "k=1", "--metric", "cover_em"]) == 1


def test_numeric_columns_match_numerically(tmp_path, capsys) -> None:
    """k=5 picks the k = 5 cell although the fact table's k reads back as 5.0 (issue 20, point 8).

    A retrieval row has no k, so the Parquet int64 column holds a null and pandas reads it as
    float64: compared as text, only 'k=5.0' matched, and docs/report.md's 'k=5' example exited 1."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _frame().to_dict("records") + [
        {
            "cell_id": "r",
            "dataset": "musique",
            "llm": None,
            "k": None,
            "qid": "q0",
            "metric": "ndcg_cut_10",
            "variant": "trec_eval",
            "value": 0.5,
        }
    ]
    path = tmp_path / "pq.parquet"
    schema = pa.schema(
        [
            ("cell_id", pa.string()),
            ("dataset", pa.string()),
            ("llm", pa.string()),
            ("k", pa.int64()),
            ("qid", pa.string()),
            ("metric", pa.string()),
            ("variant", pa.string()),
            ("value", pa.float64()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema), path)
    assert pd.read_parquet(path)["k"].dtype == "float64"  # what `cqabench significance` reads
    args = ["significance", "--per-question", str(path), "--b", "k=1", "--metric", "cover_em", "--resamples", "500"]
    for k in ("5", "5.0", " 5 "):
        assert main([*args, "--a", f"k={k}"]) == 0, k
        assert "A-B +0.4000" in capsys.readouterr().out
    frame = pd.read_parquet(path)
    with pytest.raises(ConfigError, match="k is a numeric column"):
        compare(frame, {"k": "five"}, {"k": "1"}, "cover_em")
    with pytest.raises(ConfigError, match="no per-question scores"):
        compare(frame, {"k": "3"}, {"k": "1"}, "cover_em")
    flags = frame.assign(paper_data=frame["k"] == 5)
    out = compare(flags, {"paper_data": "true"}, {"paper_data": "False"}, "cover_em")
    assert out["n_common"] == 5 and out["tests"][0]["diff"] == pytest.approx(0.4)


def test_exact_sign_flip_by_enumerating_every_flip() -> None:
    """p = share of the 2^n sign patterns whose |mean| reaches the observed one, counted here by hand."""
    a = np.array([0.9, 0.4, 0.7, 0.5, 1.0])
    b = np.array([0.4, 0.6, 0.3, 0.4, 0.2])
    d = a - b  # 0.5, -0.2, 0.4, 0.1, 0.8
    observed = abs(d.mean())
    hits = 0
    for bits in range(2**5):
        signs = np.array([-1.0 if bits >> i & 1 else 1.0 for i in range(5)])
        hits += abs((signs * d).mean()) >= observed - 1e-12
    r = randomization_test(a, b)
    assert r.exact and r.resamples == 32
    # |sum| ≥ 1.6 for (all +), (flip −0.2: 2.0), (flip −0.2 and 0.1: 1.8) and their negatives: 6 of 32.
    assert hits == 6 and r.p_value == pytest.approx(6 / 32)
    assert r.diff == pytest.approx(0.32)


def test_one_pair_and_sampled_flips() -> None:
    one = randomization_test([1.0], [0.0])
    assert one.p_value == 1.0 and one.exact  # +d and -d both reach |d|
    rng = np.random.default_rng(5)
    a, b = rng.random(30), rng.random(30)
    r = randomization_test(a, b, resamples=2000, seed=1)
    assert not r.exact and r.resamples == 2000
    assert r.p_value == randomization_test(a, b, resamples=2000, seed=1).p_value  # seeded
    # p is (hits + 1) / (resamples + 1) per tail, never 0
    assert randomization_test(np.ones(30), np.zeros(30), resamples=500).p_value == pytest.approx(2 / 501)


def test_bootstrap_interval_and_p_value_worked_by_hand() -> None:
    # d = a - b = [1, 1, 1, 0]: a resample's mean is k/4, k ~ Binomial(4, 3/4), P(k) = 1, 12, 54,
    # 108, 81 (/256). Percentile interval: the 2.5 % point is k = 1 (CDF 13/256 = 0.051 > 0.025 >
    # 1/256), the 97.5 % point k = 4 (CDF at 3: 175/256 = 0.684) -> (0.25, 1.0).
    r = bootstrap_test([1, 1, 1, 0], [0, 0, 0, 0], resamples=9999, seed=2)
    assert (r.ci_low, r.ci_high) == (0.25, 1.0) and r.diff == 0.75
    # p: resampled means at least |0.75| from the observed 0.75 are those at 0 only (k = 0, 1/256),
    # so the exact p is 1/256 = 0.0039; the estimate is (hits + 1) / 10,000 with hits ~ Bin(9999, 1/256)
    # (sd 6.2): within 4 sd of the exact value.
    assert abs(r.p_value - (9999 / 256 + 1) / 10000) < 4 * 6.2 / 10000
    # d = [1, -1]: means -1, 0, 1 with P 1/4, 1/2, 1/4 -> interval (-1, 1); observed 0, every
    # resample is at least 0 away -> p = 1
    r = bootstrap_test([1, 0], [0, 1], resamples=999, seed=2)
    assert (r.ci_low, r.ci_high, r.p_value) == (-1.0, 1.0, 1.0)


def test_holm_and_bh_on_a_known_vector() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max.
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted p * m / rank = 0.02, 0.02, 0.04, 0.04 -> running min from the largest.
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust([0.01, None, 0.04, 0.03, 0.005], "bh") == [
        pytest.approx(0.02),
        None,
        pytest.approx(0.04),
        pytest.approx(0.04),
        pytest.approx(0.02),
    ]
    assert adjust([0.5, 0.9], "bh") == [pytest.approx(0.9), pytest.approx(0.9)]
    assert adjust([], "holm") == [] and adjust([None], "bh") == [None]
    with pytest.raises(ConfigError, match="holm"):
        adjust([0.1], "bonferroni")
