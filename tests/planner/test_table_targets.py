"""One paper table, one target (`table_<id>`), and cells named by a path (issue 20, points 5 and 6).

1. DEXTER Table 2 asked for alone plans data and retrieval only: no generation job (dry run of
   config/dexter.yaml); each shipped table's cells are counted by hand.
2. A table built by its own job from its own cells' metric files is the table the whole fact
   table gives (every table of the sample, on metric files written for every planned cell).
3. A generation cell outside the grid that the config can make (RAG at k = 2) reaches the fact
   table and the report once it exists; one it cannot make (closed-k3, rag-k200, an unknown
   prompt) is refused by path with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner import Cell, Environment, Plan
from dry_runs import dry_run, snakemake_n

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)
RAG_K2 = Cell("tatqa", "dev", "pipe", "bm25", "smollm2-135m", "few-shot", "rag", 2)  # the sample's k: 1, 3, 5


def _config(name: str = "config.yaml") -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config" / name).read_text())


# ---- 1. one table, one command ----


@pytest.mark.snakemake
def test_dexter_table2_target_plans_data_and_retrieval_only() -> None:
    """`snakemake -n table_dexter_table2_ndcg10 --configfile config/dexter.yaml`: was 2,610 jobs,
    528 of them generation (the report needed every cell); now the 59 retrieval cells' ancestors
    (the resolved config they read is written before planning, no job)."""
    by_rule = dry_run("dexter.yaml", "table_dexter_table2_ndcg10", forceall=False).counts
    print("table_dexter_table2_ndcg10:", dict(by_rule), "total", sum(by_rule.values()))
    assert not {"generate", "generate_batch", "evaluate_generation", "convert_model"} & set(by_rule)
    assert not {"aggregate", "report_tables", "report_plots", "report_page"} & set(by_rule)
    assert by_rule["table_dexter_table2_ndcg10"] == 1
    # 8 retrievers x 7 datasets + StrategyQA's IR-Q and two IR-D runs; each neural index in parts of
    # 500,000 passages (passages_per_part): AmbigQA 49, OTT-QA 13, the pooled wiki-multihop corpus 2,
    # StrategyQA, TAT-QA and FinQA 1 each, for each of the 7 neural retrievers
    assert by_rule["evaluate_retrieval"] == 59 and by_rule["search"] == 56 and by_rule["decompose_search"] == 3
    assert by_rule["encode_part"] == 7 * (49 + 13 + 2 + 1 + 1 + 1)
    assert "resolved_config" not in by_rule  # written by Snakemake's process before planning
    assert sum(by_rule.values()) == 675
    # The table file itself plans the same jobs.
    by_file = dry_run("dexter.yaml", "results/dexter/report/tables/dexter_table2_ndcg10.md", forceall=False).counts
    assert by_file == by_rule


def test_each_shipped_table_needs_only_its_cells() -> None:
    """Counted by hand: DEXTER config: 8 retrievers x 7 datasets + 3 IR-Q / IR-D runs = 59 retrieval
    cells; 528 generation cells, of which TANQ's 24 (3 LLMs x 4 prompts x closed, oracle) write
    no c-EM / F1_ans / EM-tol; Table 8 is oracle with few-shot-CoT: 3 LLMs x 7 datasets."""
    plan = Plan(_config("dexter.yaml"), ENV)
    counts = {t: (len(c["retrieval"]), len(c["generation"])) for t in plan.table_specs()
              for c in [plan.table_cells(t)]}  # fmt: skip
    assert counts == {
        "dexter_table2_ndcg10": (59, 0),
        "dexter_table7_recall100": (59, 0),
        "dexter_table3_answers": (0, 528 - 24),
        "dexter_table8_open_models": (0, 21),
        "strategyqa_recall10": (11, 0),  # every run of StrategyQA writes its Recall@10
        **{
            t: (0, 24)
            for t in (
                "tanq_table5_by_type",
                "tanq_table6_by_skill",
                "tanq_table7_by_n_skills",
                "tanq_table8_by_n_relations",
                "tanq_table9_by_table_length",
                "tanq_table10_failures",
            )
        },
    }
    table8 = plan.table_cells("dexter_table8_open_models")["generation"]
    assert {(c.prompt, c.setting, c.k) for c in table8} == {("few-shot-cot", "oracle", 0)}
    assert {c.dataset for c in table8} == {
        "musique",
        "2wikimultihopqa",
        "strategyqa",
        "ambigqa",
        "ottqa",
        "tatqa",
        "finqa",
    }
    inputs = plan.table_inputs("dexter_table2_ndcg10")
    assert inputs["expected"] == ["config/expected/dexter.yaml"] and "per_question" not in inputs
    assert "results/dexter/retrieval/strategyqa/dev/pipe/bm25-ird-gold/metrics.json" in inputs["metrics"]
    assert all(p.startswith("results/dexter/retrieval/") for p in inputs["metrics"])
    tanq = Plan(_config("tanq.yaml"), ENV)
    t5 = tanq.table_inputs("tanq_table5_by_type")
    assert len(t5["metrics"]) == len(t5["per_question"]) == 4  # closed and oracle x 2 prompts: the whole grid
    assert t5["data"] == ["results/tanq/data/tanq/test/queries.parquet", "results/tanq/data/tanq/test/answers.parquet"]


def test_written_metrics_are_what_the_writers_write(tmp_path: Path) -> None:
    """The rows table_targets expects of a cell are the rows the real writers give it."""
    from cqabench.evaluation.metrics.retrieval import evaluate_files
    from cqabench.evaluation.scoring import METRICS, score_predictions
    from cqabench.planner.table_targets import written_metrics

    for dataset in METRICS:  # no question: every summary row is written, with a reason
        summary, _ = score_predictions(dataset, [], [], [])
        assert {(r["metric"], r["variant"]) for r in summary} == written_metrics("generation", dataset), dataset
    run, qrels, queries = tmp_path / "run.parquet", tmp_path / "qrels.parquet", tmp_path / "queries.parquet"
    pq.write_table(pa.Table.from_pylist([{"qid": "q1", "docid": "d1", "rank": 1, "score": 2.0}]), run)
    pq.write_table(pa.Table.from_pylist([{"qid": "q1", "docid": "d1", "relevance": 1, "annotator": ""}]), qrels)
    pq.write_table(pa.Table.from_pylist([{"qid": "q1", "evidence": [[["d1"]]]}]), queries)
    for dataset in ("musique", "strategyqa"):
        doc = evaluate_files(
            run,
            qrels,
            queries,
            {"dataset": dataset},
            tmp_path / "m.json",
            tmp_path / "pq.parquet",
            with_strategyqa_recall=dataset == "strategyqa",
        )  # as rule evaluate_retrieval passes it
        assert {(m["metric"], m["variant"]) for m in doc["metrics"]} == written_metrics("retrieval", dataset), dataset


# ---- 2. a table from its own inputs is the table of the whole fact table ----


def _value(label: str) -> float:
    return (zlib.crc32(label.encode()) % 1000) / 1000


def _write(root: Path, rel: str, doc: dict[str, Any], per_question: list[dict[str, Any]] | None = None) -> None:
    folder = root / rel
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(doc))
    if per_question is not None:
        pq.write_table(pa.Table.from_pylist(per_question), folder / "per_question.parquet")


def _fill(root: Path, plan: Plan, cells: list[tuple]) -> None:
    """metrics.json (and TANQ's per_question.parquet) for every retrieval cell and for `cells`,
    with the rows the real writers give them (test above) and made-up values; TANQ's prepared split."""
    from cqabench.planner.table_targets import written_metrics

    for ds, sp, ser, run in plan.retrieval_cells():
        cell = {"stage": "retrieval", "dataset": ds, "split": sp, "corpus": plan.corpus_of(ds),
                "relevance": plan.relevance_of(ds), "serialization": ser, "retriever": run,
                "retriever_settings": plan.run_settings(run)}  # fmt: skip
        rel = plan.retrieval_metrics_file(ds, sp, ser, run)
        rows = [{"metric": m, "variant": v, "value": _value(rel + m + v), "n": 10, "unit": "fraction"}
                for m, v in sorted(written_metrics("retrieval", ds))]  # fmt: skip
        _write(root, str(Path(rel).parent), {"cell": cell, "metrics": rows, "provenance": {}})
    qids = [f"t{i}" for i in range(4)]
    for c in cells:
        rel = str(Path(plan.answer_metrics_file(c)).parent)
        rows = [{"metric": m, "variant": v, "value": _value(rel + m + v), "n": 4, "unit": "fraction"}
                for m, v in sorted(written_metrics("generation", c.dataset))]  # fmt: skip
        per_question = None
        if c.dataset == "tanq":
            per_question = [{"qid": q, "metric": m, "variant": "official", "value": _value(rel + q + m)}
                            for q in qids for m in ("rms_precision", "rms_recall", "rms_f1")]  # fmt: skip
        _write(root, rel, {"cell": plan.generation_cell(c), "metrics": rows, "provenance": {}}, per_question)
    data = root / "results/sample/data/tanq/test"
    data.mkdir(parents=True, exist_ok=True)
    types = ["simple", "wikidata_comp", "intersection", "simple"]
    skills = [["filter_num"], [], ["time_calc", "approx"], []]
    queries = [{"qid": q, "question_type": t, "skills": k} for q, t, k in zip(qids, types, skills)]
    pq.write_table(pa.Table.from_pylist(queries), data / "queries.parquet")
    pq.write_table(pa.Table.from_pylist([
        {"qid": q, "table_header": ["entity", "a", "b"][: 2 + i % 2], "table_rows": [["x", "1", "2"]] * (1 + 3 * i)}
        for i, q in enumerate(qids)
    ]), data / "answers.parquet")  # fmt: skip


def test_each_table_from_its_own_cells_is_the_table_of_the_whole_fact_table(workdir: Path, monkeypatch) -> None:
    """Every metric file of the sample's cells (and one off-grid cell, RAG at k = 2): the whole
    fact table rendered by report-tables vs each table's own job (paper-table over Plan.table_inputs)."""
    from cqabench.cli import main

    grid = Plan(_config(), Environment(root=workdir, python="python", vllm_python=sys.executable))
    _fill(workdir, grid, grid.generation_cells() + [RAG_K2])
    plan = Plan(_config(), Environment(root=workdir, python="python", vllm_python=sys.executable))
    assert plan.off_grid_cells() == [RAG_K2] and plan.uncounted_cells() == []
    assert plan.answer_metrics_file(RAG_K2) in plan.metric_files()
    monkeypatch.chdir(workdir)
    config = json.dumps(_config())
    assert (
        main(
            [
                "aggregate",
                "--metrics",
                *plan.metric_files(),
                "--results-dir",
                "results/sample",
                "--data-dir",
                "results/sample/data",
                "--out-metrics",
                "whole/metrics.parquet",
                "--out-per-question",
                "whole/per_question.parquet",
            ]
        )
        == 0
    )
    facts = pd.read_parquet("whole/metrics.parquet")
    assert "metrics/tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k2" in set(facts["cell_id"])  # counted
    assert (
        main(
            [
                "report-tables",
                "--metrics",
                "whole/metrics.parquet",
                "--per-question",
                "whole/per_question.parquet",
                "--expected",
                *plan.expected_files,
                "--out-dir",
                "whole/tables",
                "--run",
                "sample",
                "--config",
                config,
                "--bootstrap-resamples",
                "99",
                "--test-resamples",
                "99",
            ]
        )
        == 0
    )
    own_summaries = []
    for table_id in plan.table_specs():
        inputs = plan.table_inputs(table_id)
        assert (
            main(
                [
                    "paper-table",
                    "--table",
                    table_id,
                    "--expected",
                    *inputs["expected"],
                    "--metrics",
                    *inputs["metrics"],
                    "--results-dir",
                    "results/sample",
                    "--data-dir",
                    "results/sample/data",
                    "--out-dir",
                    "own",
                    "--run",
                    "sample",
                    "--config",
                    config,
                ]
            )
            == 0
        )
        for ext in ("md", "html", "caption.rst"):
            own = Path(f"own/{table_id}.{ext}").read_text()
            assert own == Path(f"whole/tables/{table_id}.{ext}").read_text(), (table_id, ext)
        own_summaries += json.loads(Path(f"own/{table_id}.summary.json").read_text())
    assert own_summaries == json.loads(Path("whole/tables/summary.json").read_text())
    # Tables built from something: the retrieval tables have every run, Table 3 the off-grid cell too.
    shown = {s["id"]: s["ours_only"] + s["not_comparable"] + s["ok"] + s["fail"] for s in own_summaries}
    assert shown["dexter_table2_ndcg10"] > 0 and shown["tanq_table5_by_type"] > 0 and shown["tanq_table10_failures"] > 0
    table3 = Path("own/dexter_table3_answers.md").read_text()
    k2 = [line for line in table3.splitlines() if line.startswith("| smollm2-135m / few-shot / RAG / BM25 / 2 |")]
    cover_em = _value(str(Path(plan.answer_metrics_file(RAG_K2)).parent) + "cover_em" + "default")
    assert len(k2) == 1 and f"{cover_em:.3f}" in k2[0], k2
    # report-tables gathering those summaries (the workflow's report_tables) writes the same summary.json.
    summaries = [f"own/{t}.summary.json" for t in plan.table_specs()]
    assert (
        main(
            [
                "report-tables",
                "--metrics",
                "whole/metrics.parquet",
                "--per-question",
                "whole/per_question.parquet",
                "--table-summaries",
                *summaries,
                "--out-dir",
                "gathered",
                "--bootstrap-resamples",
                "99",
                "--test-resamples",
                "99",
            ]
        )
        == 0
    )
    assert json.loads(Path("gathered/summary.json").read_text()) == own_summaries


# ---- 3. cells named by a path ----


@pytest.mark.snakemake
def test_an_off_grid_cell_asked_for_by_path_reaches_the_fact_table_and_its_table(workdir: Path) -> None:
    """RAG at k = 2 (the sample plans k 1, 3, 5): asked for by path it plans alone (not waiting for
    the model's engine batch, of which it is no member); once its predictions exist, the fact
    table and DEXTER Table 3 take its metrics, and evaluate_generation makes them."""
    cell = "tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k2"
    alone = snakemake_n(workdir, "--forceall", f"results/sample/generation/{cell}/predictions.parquet").counts
    assert alone["generate"] == 1 and "generate_batch" not in alone, alone
    folder = workdir / "results/sample/generation" / cell
    folder.mkdir(parents=True)
    (folder / "predictions.parquet").touch()
    (folder / "summary.json").touch()
    # (the aggregate and table jobs read their cells from the resolved config, as the planner lists
    # them in their inputs)
    plan = snakemake_n(workdir, "results/sample/metrics.parquet")
    assert f"results/sample/metrics/{cell}/metrics.json" in plan.shell_of("cqabench aggregate ").input
    assert f"output: results/sample/metrics/{cell}/metrics.json" in plan.text  # its evaluate_generation job
    table3 = snakemake_n(workdir, "table_dexter_table3_answers")
    assert f"results/sample/metrics/{cell}/metrics.json" in table3.shell_of("cqabench paper-table ").input


def test_the_fact_table_marks_the_off_grid_cell(workdir: Path, monkeypatch) -> None:
    """The sample's grid and RAG at k = 2 on disk: `aggregate --config` (the workflow's way) marks the
    k = 2 cell's rows `off_grid` and no other (a grid cell of the same split and run, a retrieval
    cell); given the files by hand (--metrics) it knows no grid, and the column is null."""
    from cqabench.cli import main

    env = Environment(root=workdir, python="python", vllm_python=sys.executable)
    grid = Plan(_config(), env)
    _fill(workdir, grid, grid.generation_cells() + [RAG_K2])
    monkeypatch.chdir(workdir)
    out = ["--results-dir", "results/sample", "--data-dir", "results/sample/data", "--out-per-question", "pq.parquet"]
    assert main(["aggregate", "--config", json.dumps(_config()), "--out-metrics", "planned.parquet", *out]) == 0
    facts = pd.read_parquet("planned.parquet").groupby("cell_id")["off_grid"].agg(set).to_dict()
    assert facts["metrics/tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k2"] == {True}
    assert facts["metrics/tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k1"] == {False}  # k 1 is in the grid
    assert facts["retrieval/tatqa/dev/pipe/bm25"] == {False}
    assert [c for c, marks in facts.items() if True in marks] == [
        "metrics/tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k2"
    ]
    files = Plan(_config(), env).metric_files()
    assert main(["aggregate", "--metrics", *files, "--out-metrics", "by_hand.parquet", *out]) == 0
    assert pd.read_parquet("by_hand.parquet")["off_grid"].isna().all()


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        (
            "tatqa/dev/pipe/none/smollm2-135m/few-shot/closed-k3",
            "closed-book shows no documents, so it has no k: its folder is closed-k0, not closed-k3",
        ),
        (
            "tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k200",
            "k 200 exceeds retrieval.k: 100 (the run bm25 holds at most 100 documents per question)",
        ),
        (
            "tatqa/dev/pipe/none/smollm2-135m/fewshot/closed-k0",
            "prompt 'fewshot' is unknown; valid: ['few-shot', 'few-shot-cot', 'zero-shot-cot', 'self-ask']",
        ),
        ("tatqa/dev/pipe/none/smollm2-135m/few-shot/rag-k5", "rag needs a retriever, not 'none'"),
        (
            "tatqa/dev/pipe/bm99/smollm2-135m/few-shot/rag-k5",
            "rag reads a run: 'bm99' is not a run of tatqa/dev (runs: ['bm25', 'minilm', 'bm25-minilm-rrf'])",
        ),
        (
            "tatqa/dev/pipe/bm25/smollm2-135m/few-shot/oracle-k0",
            "oracle shows every gold document and retrieves nothing: its retriever is 'none', not 'bm25'",
        ),
        ("ambigqa/dev/pipe/none/smollm2-135m/few-shot/oracle-k0", "oracle needs gold documents: "),
        (
            "tanq/test/pipe/bm25/smollm2-135m/few-shot/open-book-k2",
            "open-book's WikiSearch shows one article: its folder is open-book-k1, not open-book-k2",
        ),
        ("tatqa/dev/pipe/none/gpt-9/few-shot/closed-k0", "llm 'gpt-9' is not in generation.llms ['smollm2-135m']"),
        (
            "tatqa/train/pipe/none/smollm2-135m/few-shot/closed-k0",
            "'train' is not an evaluated split of tatqa (datasets.tatqa.splits: ['dev'])",
        ),
        ("tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k02", "k '02' is not a whole number written plainly"),
        ("tatqa/dev/pipe/none/smollm2-135m/few-shot/closedbook-k0", "setting 'closedbook' is unknown; valid: "),
    ],
)
def test_a_cell_the_config_cannot_make_is_refused_with_its_path_and_why(cell: str, why: str) -> None:
    plan = Plan(_config(), ENV)
    w = Cell.parse(cell)
    path = f"results/sample/metrics/{cell}/metrics.json"
    with pytest.raises(ConfigError) as err:
        plan.checked_cell(w, path)
    assert str(err.value).startswith(f"{path}: the config cannot make this cell: ")
    assert why in str(err.value)


def test_cells_off_the_grid_the_config_can_make_are_not_refused() -> None:
    plan = Plan(_config(), ENV)
    for cell in (
        "tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k2",  # another k within the run
        "tatqa/dev/pipe/minilm/smollm2-135m/few-shot/rag-k100",  # the whole run
        "tatqa/dev/pipe/none/smollm2-135m/few-shot-cot/closed-k0",
    ):  # a prompt with its template
        assert plan.checked_cell(Cell.parse(cell), cell) == Cell.from_label(cell)


@pytest.mark.snakemake
def test_snakemake_refuses_an_impossible_cell_naming_the_path(workdir: Path) -> None:
    for target, why in (
        (
            "results/sample/generation/tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k200/predictions.parquet",
            "k 200 exceeds retrieval.k: 100",
        ),
        (
            "results/sample/metrics/tatqa/dev/pipe/none/smollm2-135m/few-shot/closed-k3/metrics.json",
            "closed-book shows no documents, so it has no k",
        ),
    ):
        done = subprocess.run(SNAKEMAKE + ["-n", target], cwd=workdir, capture_output=True, text=True, timeout=300,
                              check=False)  # fmt: skip
        assert done.returncode != 0
        assert f"ConfigError: {target}: the config cannot make this cell: {why}" in done.stdout + done.stderr


@pytest.mark.snakemake
def test_existing_cells_the_config_cannot_make_are_left_out_and_named(workdir: Path) -> None:
    stale = workdir / "results/sample/metrics/tatqa/dev/pipe/none/gone-llm/few-shot/closed-k0"
    stale.mkdir(parents=True)
    (stale / "metrics.json").write_text("{}")
    plan = Plan(_config(), Environment(root=workdir, python="python", vllm_python=sys.executable))
    assert plan.off_grid_cells() == []
    assert plan.uncounted_cells() == [
        (
            "tatqa/dev/pipe/none/gone-llm/few-shot/closed-k0",
            [
                "llm 'gone-llm' is not in generation.llms ['smollm2-135m'] (the LLMs whose "
                "environment, device and API key planning checks)"
            ],
        )
    ]
    assert not [f for f in plan.metric_files() if "gone-llm" in f]
    text = snakemake_n(workdir, "results/sample/metrics.parquet").text
    assert "cqabench: 1 existing cell(s) under results/sample/ are not counted" in text
    assert "tatqa/dev/pipe/none/gone-llm/few-shot/closed-k0: llm 'gone-llm' is not in generation.llms" in text


def test_api_keys_are_asked_only_of_the_llms_of_the_jobs_to_run() -> None:
    plan = Plan(_config("dexter.yaml"), ENV)
    assert plan.missing_api_keys({}) == [("gpt-3.5-turbo", "OPENAI_API_KEY")]  # default: generation.llms
    assert plan.missing_api_keys({}, []) == []  # data and retrieval jobs only
    assert plan.missing_api_keys({}, ["mistral-7b", "llama2-7b"]) == []
    assert plan.missing_api_keys({}, ["gpt-3.5-turbo", "mistral-7b"]) == [("gpt-3.5-turbo", "OPENAI_API_KEY")]
    assert plan.missing_api_keys({"OPENAI_API_KEY": "x"}, ["gpt-3.5-turbo"]) == []
