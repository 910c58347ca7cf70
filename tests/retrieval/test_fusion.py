"""cqabench.retrieval.fusion: fused runs against hand-computed RRF and CombSUM, and against ranx.

Every expected number in the small cases is worked out by hand in the comment beside it. The
reference case runs ranx's own `fuse` (the library the fusion literature is compared against)
on two rankings of the bundled real MuSiQue sample and asks for the same floats and order.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cqabench.common.errors import ConfigError, DataError
from cqabench.data.schema import CanonicalData, Query
from cqabench.retrieval import fusion
from cqabench.retrieval.base import rank
from cqabench.retrieval.jobs import fuse_runs
from cqabench.retrieval.runs import read_run, write_run

# tests/conftest.py: handed to a pytest-xdist worker before the other files of the fast tier
EARLY_BECAUSE = "ranx's numba kernels compile on a fresh environment: 30-50 s, one test"

# Two runs of two questions. q1: A = a (3.0), b (2.0), c (1.0); B = b (0.9), d (0.5), a (0.1).
# q2 is retrieved by A only; q3 by neither.
A = {"q1": [("a", 3.0), ("b", 2.0), ("c", 1.0)], "q2": [("x", 5.0)]}
B = {"q1": [("b", 0.9), ("d", 0.5), ("a", 0.1)]}


def _settings(**kw: object) -> dict:
    return fusion.resolve({"type": "fusion", "fuse": ["A", "B"], **kw}, default_depth=100)


def test_rrf_equals_the_hand_computed_sum_of_reciprocal_ranks() -> None:
    """rrf_k = 60. q1: a = 1/61 + 1/63, b = 1/62 + 1/61, c = 1/63, d = 1/62; so b > a > d > c.
    q2: x = 1/61 (absent from B: adds nothing). q3: nobody retrieved anything, it stays empty."""
    out = fusion.fuse([A, B], _settings(method="rrf", rrf_k=60), ["q1", "q2", "q3"])
    expected = {"b": 1 / 62 + 1 / 61, "a": 1 / 61 + 1 / 63, "d": 1 / 62, "c": 1 / 63}
    assert [d for d, _ in out["q1"]] == ["b", "a", "d", "c"]
    assert dict(out["q1"]) == pytest.approx(expected, rel=1e-12)
    assert out["q2"] == [("x", pytest.approx(1 / 61))]
    assert out["q3"] == []


def test_rrf_reads_our_ranks_so_tied_input_scores_rank_by_docid_descending() -> None:
    """A ties p and q at 1.0: our order (and trec_eval's) is q (rank 1), p (rank 2), whatever ranx's
    sort would do with the tie. With rrf_k = 1: q = 1/2, p = 1/3 from A; B gives p 1/2: p = 5/6, q = 1/2.
    The fused tie of r and s (each 1/(1+1) from one run) is ordered by docid descending: s, r."""
    a = {"q": [("p", 1.0), ("q", 1.0)]}
    b = {"q": [("p", 7.0)]}
    out = fusion.fuse([a, b], fusion.resolve({"type": "fusion", "fuse": ["a", "b"], "rrf_k": 1}, 100), ["q"])
    assert out["q"] == [("p", pytest.approx(1 / 3 + 1 / 2)), ("q", pytest.approx(1 / 2))]
    tie = fusion.fuse(
        [{"q": [("r", 1.0)]}, {"q": [("s", 9.0)]}],
        fusion.resolve({"type": "fusion", "fuse": ["a", "b"], "rrf_k": 1}, 100),
        ["q"],
    )
    assert tie["q"] == [("s", 0.5), ("r", 0.5)]


def test_combsum_min_max_equals_the_hand_computed_sum() -> None:
    """min-max per query and run. q1: A: a (3-1)/2 = 1, b 0.5, c 0; B: b (0.9-0.1)/0.8 = 1,
    d 0.4/0.8 = 0.5, a 0. Sums: b 1.5, a 1.0, d 0.5, c 0.0. q2 has one document: ranx's guarded
    denominator (1e-9) normalises it to 0."""
    out = fusion.fuse([A, B], _settings(method="combsum", norm="min-max"), ["q1", "q2"])
    assert [d for d, _ in out["q1"]] == ["b", "a", "d", "c"]
    assert dict(out["q1"]) == pytest.approx({"b": 1.5, "a": 1.0, "d": 0.5, "c": 0.0})
    assert out["q2"] == [("x", 0.0)]


def test_combsum_zmuv_and_combmnz_by_hand() -> None:
    """zmuv, q1 of A: mean 2, population std sqrt(2/3): a = 1/sqrt(2/3) = 1.2247, b 0, c -1.2247;
    of B: mean 0.5, std sqrt(0.32/3) = 0.32660: b 1.2247, d 0, a -1.2247. Sums: a 0, b 1.2247,
    c -1.2247, d 0 (a and d tie at 0: docid descending, d first).
    CombMNZ min-max multiplies each sum by the runs retrieving the document: b 1.5 x 2 = 3,
    a 1 x 2 = 2, d 0.5 x 1, c 0 x 1."""
    z = fusion.fuse([A, B], _settings(method="combsum", norm="zmuv"), ["q1"])
    s = 1 / (2 / 3) ** 0.5
    assert [d for d, _ in z["q1"]] == ["b", "d", "a", "c"]
    assert dict(z["q1"]) == pytest.approx({"b": s, "d": 0.0, "a": 0.0, "c": -s}, abs=1e-9)
    mnz = fusion.fuse([A, B], _settings(method="combmnz"), ["q1"])
    assert dict(mnz["q1"]) == pytest.approx({"b": 3.0, "a": 2.0, "d": 0.5, "c": 0.0})


def test_depth_cuts_the_fused_ranking() -> None:
    out = fusion.fuse([A, B], _settings(depth=2), ["q1"])
    assert [d for d, _ in out["q1"]] == ["b", "a"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fuse": ["a"]}, "fuse: needs a list of at least two run names"),
        ({"fuse": ["a", "a"]}, "fuse: names a run twice"),
        ({"fuse": ["a", "b"], "method": "borda"}, "method: 'borda' is not one of rrf, combsum, combmnz"),
        ({"fuse": ["a", "b"], "norm": "zmuv"}, "norm: rrf fuses ranks"),
        ({"fuse": ["a", "b"], "method": "combsum", "rrf_k": 60}, "rrf_k: is RRF's constant"),
        ({"fuse": ["a", "b"], "method": "combsum", "norm": "sum"}, "norm: 'sum' is not one of min-max, zmuv"),
        ({"fuse": ["a", "b"], "depth": 0}, "depth: must be a positive integer"),
        ({"fuse": ["a", "b"], "weights": [1, 2]}, "unknown key(s) weights"),
    ],
)
def test_bad_settings_name_their_key(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        fusion.resolve({"type": "fusion", **settings}, 100)
    assert message in str(err.value)


def test_defaults_are_recorded() -> None:
    assert _settings() == {"type": "fusion", "fuse": ["A", "B"], "method": "rrf", "rrf_k": 60, "depth": 100}
    assert _settings(method="combsum")["norm"] == "min-max"


def _queries(path: Path, qids: list[str]) -> Path:
    pq.write_table(CanonicalData(queries=[Query(q, f"question {q}") for q in qids]).tables()["queries"], path)
    return path


def test_the_job_writes_both_run_files_for_every_question(tmp_path: Path) -> None:
    """Files in, files out (what the fuse_runs rule runs): the TREC and Parquet runs read back
    equal to the in-memory fusion; a run of another split is refused, naming the query id."""
    write_run(A, None, tmp_path / "a.parquet", "a")
    write_run(B, tmp_path / "b.trec", None, "b")  # an input in TREC reads the same
    queries = _queries(tmp_path / "queries.parquet", ["q1", "q2", "q3"])
    settings = _settings(method="rrf")
    fuse_runs(
        [tmp_path / "a.parquet", tmp_path / "b.trec"],
        queries,
        settings,
        tmp_path / "f.trec",
        tmp_path / "f.parquet",
        "hybrid",
    )
    expected = fusion.fuse([A, B], settings, ["q1", "q2", "q3"])
    for path in ("f.trec", "f.parquet"):
        got = read_run(tmp_path / path)
        assert set(got) == {"q1", "q2"}  # q3 retrieved nothing: no row, as for any run
        assert got["q1"] == pytest.approx(dict(expected["q1"]))
    rows = pq.read_table(tmp_path / "f.parquet").to_pylist()
    assert [(r["docid"], r["rank"]) for r in rows if r["qid"] == "q1"] == [("b", 1), ("a", 2), ("d", 3), ("c", 4)]
    assert (tmp_path / "f.trec").read_text().splitlines()[0].split()[-1] == "hybrid"
    other = _queries(tmp_path / "other.parquet", ["q1"])
    with pytest.raises(DataError, match="q2"):
        fuse_runs([tmp_path / "a.parquet", tmp_path / "b.trec"], other, settings, None, tmp_path / "g.parquet", "x")
    assert json.loads(json.dumps(settings)) == settings  # what the rule passes as one JSON word


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def musique_runs() -> tuple[dict, dict, list[str]]:
    """Two real rankings of the MuSiQue sample (100 questions, each over all 1,890 paragraphs, top
    100): shared word count (many ties) and the share of the paragraph's words that are the
    question's. Scorers this plain keep the test about fusion, not about a retriever."""
    records = [json.loads(line) for line in (ROOT / "resources/raw/musique/musique_train_100.jsonl").open()]
    words = lambda text: re.findall(r"[a-z0-9]+", text.lower())  # noqa: E731
    paragraphs = {
        f"{r['id']}-{p['idx']}": words(p["title"] + " " + p["paragraph_text"]) for r in records for p in r["paragraphs"]
    }
    overlap: dict = {}
    share: dict = {}
    for r in records:
        q = set(words(r["question"]))
        hits = {d: sum(w in q for w in ws) for d, ws in paragraphs.items()}
        overlap[r["id"]] = sorted(((d, float(n)) for d, n in hits.items() if n), key=lambda x: -x[1])[:100]
        share[r["id"]] = sorted(((d, n / len(paragraphs[d])) for d, n in hits.items() if n), key=lambda x: -x[1])[:100]
    return overlap, share, [r["id"] for r in records]


def _ranx_fuse(inputs: list, settings: dict, qids: list[str]) -> dict:
    """ranx's fuse over the same inputs: for RRF each input handed over as 1/rank of our order
    (ranx's own sort does not say how it breaks ties), for the score methods the scores."""
    from ranx import Run
    from ranx import fuse as ranx_fuse

    by_rank = settings["method"] == "rrf"
    runs = []
    for i, run in enumerate(inputs):
        ordered = {q: rank(run.get(q, []), len(run.get(q, []))) for q in qids}
        runs.append(
            Run.from_dict(
                {
                    q: ({d: 1.0 / r for r, (d, _) in enumerate(o, 1)} if by_rank else dict(o))
                    for q, o in ordered.items()
                },
                name=f"in{i}",
            )
        )
    params = {"k": settings["rrf_k"]} if by_rank else {}
    method = fusion.METHODS[settings["method"]]
    fused = ranx_fuse(runs, norm=None if by_rank else settings["norm"], method=method, params=params)
    return {
        str(q): rank(((str(d), float(s)) for d, s in docs.items()), settings["depth"])
        for q, docs in fused.to_dict().items()
    }


@pytest.mark.parametrize(
    "kw",
    [
        {"method": "rrf", "rrf_k": 60},
        {"method": "rrf", "rrf_k": 1},
        {"method": "combsum", "norm": "min-max"},
        {"method": "combsum", "norm": "zmuv"},
        {"method": "combmnz", "norm": "min-max"},
        {"method": "combmnz", "norm": "zmuv"},
    ],
    ids=lambda kw: "-".join(str(v) for v in kw.values()),
)
def test_every_method_equals_ranx_on_real_rankings(kw: dict, musique_runs: tuple) -> None:
    """The same documents, the same order and the same floats as ranx (min-max and RRF bit for
    bit; zmuv to 1e-12: ranx's compiled mean and std may sum in another order than ours)."""
    overlap, share, qids = musique_runs
    settings = fusion.resolve({"type": "fusion", "fuse": ["a", "b"], "depth": 100, **kw}, default_depth=100)
    ours = fusion.fuse([overlap, share], settings, qids)
    theirs = _ranx_fuse([overlap, share], settings, qids)
    assert sum(len(v) for v in ours.values()) == 100 * len(qids)  # every question fused to depth 100
    for qid in qids:
        if kw.get("norm") == "zmuv":
            assert dict(ours[qid]) == pytest.approx(dict(theirs[qid]), rel=1e-12, abs=1e-12), qid
            assert [s for _, s in ours[qid]] == pytest.approx([s for _, s in theirs[qid]], rel=1e-12, abs=1e-12)
        else:
            assert ours[qid] == theirs[qid], qid
