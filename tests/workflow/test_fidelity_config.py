"""The full configurations follow the papers (config/dexter.yaml, config/tanq.yaml), as named config
values that `snakemake -n` plans; docs/full_reproduction.md is the plan, per rule and per paper table.

Run as a script to regenerate docs/full_reproduction.md from the dry runs:

    python tests/workflow/test_fidelity_config.py
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(1, str(REPO / "tests"))  # conftest, also when run as a script (regenerating the page)

from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.data.prepare import select_questions  # noqa: E402
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query  # noqa: E402
from cqabench.report.expected import load_expected  # noqa: E402
from dry_runs import DryRun, dry_run  # noqa: E402

PAGE = REPO / "docs" / "full_reproduction.md"
PLAN_CMD = "snakemake -n --forceall --configfile {config}"


def _config(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text(encoding="utf-8"))


def planned_outputs(plan: DryRun) -> set[str]:
    return set(plan.outputs())


# ---- which planned file a published cell needs ---------------------------------------------------


def _split(config: dict, dataset: str) -> str:
    return config["datasets"][dataset]["splits"][0]


def cell_path(config: dict, spec, cell: dict) -> str:
    """The metrics.json a table cell is read from, in the config's layout (docs/architecture.md)."""
    ser = config["serializations"][0]
    if spec.id.startswith(("dexter_table2", "dexter_table7", "strategyqa")):
        ds = cell["dataset"]
        return f"results/{config['name']}/retrieval/{ds}/{_split(config, ds)}/{ser}/{cell['retriever']}/metrics.json"
    fixed = {**spec.filters, **cell}
    ds = fixed.get("dataset")
    retriever, k = fixed.get("retriever", "none"), fixed.get("k", 0)
    return (
        f"results/{config['name']}/metrics/{ds}/{_split(config, ds)}/{ser}/{retriever}/{fixed['llm']}/{fixed['prompt']}/"
        f"{fixed['setting']}-k{k}/metrics.json"
    )


def table_coverage(config_name: str, expected: list[str]) -> list[dict]:
    """Per paper table: published cells, the paper-only ones, how many the plan produces, which not."""
    config = _config(config_name)
    outputs = planned_outputs(dry_run(config_name))
    rows = []
    for path in expected:
        for spec in load_expected(REPO / path):
            reference = [c for c in spec.cells if spec.is_reference(c)]
            ours = [c for c in spec.cells if not spec.is_reference(c)]
            if (
                spec.source == "per_question" or spec.label_set == "tanq"
            ):  # TANQ: the paper's models only; ours are extra rows
                produced = sorted({p for p in outputs if p.startswith(f"results/{config['name']}/metrics/tanq/")})
                rows.append(
                    {
                        "id": spec.id,
                        "title": spec.title,
                        "published": len(spec.cells),
                        "reference": len(reference),
                        "to_produce": len(ours),
                        "planned": 0,
                        "not_planned": [],
                        "our_cells": len([p for p in produced if p.endswith("metrics.json")]),
                    }
                )
                continue
            paths = {tuple(sorted(c.items())): cell_path(config, spec, c) for c in ours}
            missing = sorted({p for p in paths.values() if p not in outputs})
            rows.append(
                {
                    "id": spec.id,
                    "title": spec.title,
                    "published": len(spec.cells),
                    "reference": len(reference),
                    "to_produce": len(ours),
                    "planned": sum(1 for p in paths.values() if p in outputs),
                    "not_planned": missing,
                    "files": len(set(paths.values())),
                }
            )
    return rows


def figure2_paths(config_name: str) -> list[str]:
    """DEXTER Figure 2: gpt-3.5-turbo few-shot-CoT over ColBERTv2 at k 1, 3, 5, 10 on the seven datasets."""
    config = _config(config_name)
    return [
        cell_path(
            config,
            type("S", (), {"id": "fig2", "filters": {}})(),
            {
                "dataset": ds,
                "llm": "gpt-3.5-turbo",
                "prompt": "few-shot-cot",
                "setting": "rag",
                "retriever": "colbertv2",
                "k": k,
            },
        )
        for ds in config["retrieval"]["datasets"]
        for k in (1, 3, 5, 10)
    ]


def figure2_cells(config_name: str) -> tuple[int, int]:
    outputs = planned_outputs(dry_run(config_name))
    wanted = figure2_paths(config_name)
    return sum(1 for p in wanted if p in outputs), len(wanted)


def generation_cells(plan: DryRun) -> list[tuple[str, ...]]:
    pattern = re.compile(
        r"results/[^/]+/metrics/([^/]+)/([^/]+)/([^/]+)/([^/]+)/([^/]+)/([^/]+)/(\w+)-k(\d+)/metrics\.json"
    )
    return sorted({m.groups() for p in planned_outputs(plan) if (m := pattern.fullmatch(p))})


def table_target_rows(name: str) -> list[str]:
    """One row per paper table: its target rule and the cells it plans (the planner's, Plan.table_cells)."""
    from cqabench.planner import Environment, Plan

    plan = Plan(_config(name), Environment(root=REPO, python="python", vllm_python=sys.executable))
    rows = []
    for table_id in plan.table_specs():
        cells = plan.table_cells(table_id)
        rows.append(f"| `table_{table_id}` | {len(cells['retrieval'])} | {len(cells['generation'])} |")
    return rows


def table_targets(name: str) -> list[str]:
    return [
        f"One paper table alone (`snakemake --cores all table_<id> --configfile config/{name}`, or its file",
        "`results/<name>/report/tables/<id>.md`): the table's job reads the metric files of these cells only, and",
        'plans them with their ancestors (docs/report.md, "One table, one target"):',
        "",
        "| target | retrieval cells | generation cells |",
        "|---|---:|---:|",
        *table_target_rows(name),
        "",
    ]


# ---- the docs page ------------------------------------------------------------------------------


def page() -> str:
    lines = [
        "# The planned full reproduction: jobs and paper cells",
        "",
        "Generated from the dry runs below by `python tests/workflow/test_fidelity_config.py`; the test of the",
        "same file checks that the job counts here are the planner's and that every published cell of",
        "DEXTER Tables 2, 3, 7, 8 and StrategyQA is produced by some planned job. `--forceall` plans",
        "every job, whatever `results/` already holds (without it, finished jobs are left out).",
        "How each setting relates to the papers: [fidelity.md](fidelity.md).",
        "",
    ]
    for name, expected, what in (
        ("dexter.yaml", ["config/expected/dexter.yaml", "config/expected/strategyqa.yaml"], "DEXTER and StrategyQA"),
        ("tanq.yaml", ["config/expected/tanq.yaml"], "TANQ"),
    ):
        plan = dry_run(name)
        lines += [
            f"## `config/{name}` ({what})",
            "",
            "```",
            PLAN_CMD.format(config=f"config/{name}"),
            "```",
            "",
            "| rule | jobs |",
            "|---|---:|",
        ]
        lines += [f"| {rule} | {n} |" for rule, n in plan.counts.items()]
        lines += [f"| **total** | **{plan.total}** |", ""]
        cells = generation_cells(plan)
        if cells:
            by = Counter((c[4], c[6]) for c in cells)
            lines += [
                "Generation cells (each is one `generate` and one `evaluate_generation` job), by LLM and setting:",
                "",
                "| llm | " + " | ".join(sorted({s for _, s in by})) + " |",
                "|---|" + "---:|" * len({s for _, s in by}),
            ]
            settings = sorted({s for _, s in by})
            for llm in sorted({m for m, _ in by}):
                lines.append(f"| {llm} | " + " | ".join(str(by.get((llm, s), 0)) for s in settings) + " |")
            lines.append("")
        lines += [
            "Published cells per paper table (`reference`: rows only the paper has, e.g. its supervised",
            "baseline, human experts or its own models, which no run of ours can produce):",
            "",
            "| table | published | reference | to produce | planned | not planned |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for row in table_coverage(name, expected):
            not_planned = "; ".join(f"`{p}`" for p in row["not_planned"]) or "none"
            if "our_cells" in row:
                not_planned = (
                    f"the paper's models only; our rows come from {row['our_cells']} planned TANQ "
                    "cells (every LLM x setting)"
                )
            lines.append(
                f"| {row['title']} | {row['published']} | {row['reference']} | {row['to_produce']} | "
                f"{row['planned']} | {not_planned} |"
            )
        lines.append("")
        lines += table_targets(name)
        if name == "dexter.yaml":
            got, want = figure2_cells(name)
            needed = {
                cell_path(_config(name), spec, c)
                for path in expected[:1]
                for spec in load_expected(REPO / path)
                if spec.id in ("dexter_table3_answers", "dexter_table8_open_models")
                for c in spec.cells
                if not spec.is_reference(c)
            } | set(figure2_paths(name))
            extra = len(cells) - len(needed)
            lines += [
                f"DEXTER Figure 2 (gpt-3.5-turbo, few-shot-CoT, ColBERTv2 top-k, k = 1, 3, 5, 10): {got} of {want} "
                "cells planned.",
                "",
                f"The paper's generation cells (Tables 3 and 8, Figure 2) are {len(needed)} of the {len(cells)} "
                f"planned: the generation grid is one product (every LLM x prompt x setting x k), so {extra} planned "
                "cells map to no published number (the open models closed-book and with RAG, self-ask with context, "
                "k 1 / 3 / 5 for prompts other than few-shot-CoT, the TANQ cells). They cost jobs, not correctness; "
                "a per-group generation matrix would plan only the paper's cells.",
                "",
            ]
    return "\n".join(lines).rstrip() + "\n"


# ---- tests: the configs ------------------------------------------------------------------------


def test_dexter_config_follows_the_paper_in_named_values() -> None:
    c = _config("dexter.yaml")
    ds, r, gen = c["datasets"], c["retrievers"], c["generation"]
    assert r["mpnet"]["model"] == "sentence-transformers/multi-qa-mpnet-base-cos-v1"
    assert ds["finqa"]["splits"] == ["test"]
    assert ds["musique"]["hops"] == [2] and ds["musique"]["answerable_only"] is True
    assert "ans_v1.0_dev" in ds["musique"]["files"]["dev"]["questions"]["path"]
    assert ds["2wikimultihopqa"]["limit"] == 1200 and ds["2wikimultihopqa"]["splits"] == ["dev"]
    for name, spec in r.items():  # the first 512 word pieces of every document, for every neural retriever
        length = {"dense": "max_length", "splade": "doc_max_length", "colbert": "doc_maxlen"}.get(spec["type"])
        if length:
            assert spec[length] == 512, name
    assert (
        gen["rag_retrievers"] == ["colbertv2"] and {1, 3, 5, 10} <= set(gen["k"]) and "few-shot-cot" in gen["prompts"]
    )
    assert ds["ambigqa"]["files"]["dev"]["passages"]["url"].endswith("psgs_w100_20200201.tsv.gz")
    gpt = c["llms"]["gpt-3.5-turbo"]["sampling"]
    assert gpt == {"temperature": 0.3, "max_new_tokens": 512, "frequency_penalty": 0.8, "presence_penalty": 0.6}
    # Table 5 names the base model (the toolkit's LlamaEngine loaded the chat model): the paper's.
    assert c["llms"]["llama2-7b"]["source"] == "meta-llama/Llama-2-7b-hf"
    for name in ("mistral-7b", "llama2-7b"):  # decided and written down (docs/fidelity.md)
        assert (
            c["llms"][name]["sampling"]["temperature"] == 0.3 and "frequency_penalty" not in c["llms"][name]["sampling"]
        )
    assert c["raw_dir"] != "resources/raw"  # the sample's same-named files must not stand in for the full data
    assert set(c["retrieval"]["datasets"]) == {
        "musique",
        "2wikimultihopqa",
        "strategyqa",
        "ambigqa",
        "ottqa",
        "tatqa",
        "finqa",
    }


@pytest.mark.snakemake
def test_dexter_dry_run_plans_the_papers_setup() -> None:
    plan = dry_run("dexter.yaml")
    text = plan.text  # what a user reads
    assert "cqabench prepare --dataset musique --split dev" in text
    assert re.search(r"prepare --dataset musique --split dev .*--hops 2 --answerable-only", text)
    assert re.search(r"prepare --dataset 2wikimultihopqa --split dev .*--limit 1200", text)
    assert not re.search(
        r"prepare --dataset (musique|2wikimultihopqa) --split train .*--(limit|hops)", text
    )  # corpus only
    outputs = planned_outputs(plan)
    assert (
        "results/dexter/data/finqa/test/queries.parquet" in outputs
        and "results/dexter/data/finqa/dev/queries.parquet" in outputs
    )
    assert not any(
        p.startswith("results/dexter/retrieval/finqa/dev/") for p in outputs
    )  # FinQA is evaluated on test only
    # The pooled corpus reads every corpus split (train paragraphs too).
    pool = next(j.input for j in plan.of_rule("pool_corpus") if j.input[0].startswith("results/dexter/data/musique"))
    assert (
        "results/dexter/data/musique/train/corpus.parquet" in pool
        and "results/dexter/data/2wikimultihopqa/train/corpus.parquet" in pool
    )
    assert '"model": "sentence-transformers/multi-qa-mpnet-base-cos-v1"' in text
    for setting in ('"max_length": 512', '"doc_max_length": 512', '"doc_maxlen": 512'):
        assert setting in text, setting
    for ds in ("musique", "2wikimultihopqa", "ambigqa", "strategyqa", "tatqa", "ottqa"):
        for k in (1, 3, 5, 10):
            assert (
                f"results/dexter/generation/{ds}/dev/pipe/colbertv2/gpt-3.5-turbo/few-shot-cot/rag-k{k}/predictions.parquet"
                in outputs
            )
    assert (
        "results/dexter/generation/finqa/test/pipe/colbertv2/gpt-3.5-turbo/few-shot-cot/rag-k10/predictions.parquet"
        in outputs
    )
    got, want = figure2_cells("dexter.yaml")
    assert got == want == 28
    # Table 5's checkpoint, in what every llama2-7b cell's job reads from the resolved config
    # (--config results/dexter/config.json: Plan.generation_settings)
    from cqabench.planner import Environment, Plan

    dexter = Plan(_config("dexter.yaml"), Environment(root=REPO))
    llama = [c for c in dexter.generation_cells() if c.llm == "llama2-7b"]
    sources = {dexter.generation_settings(c)["llm"]["source"] for c in llama}
    assert llama and sources == {"meta-llama/Llama-2-7b-hf"}
    # written by the main process at parse time (planner/resolved_config.py), read by the cells' jobs
    assert "results/dexter/config.json" not in planned_outputs(plan)
    assert re.search(r"rule generate[^\n]*:\n    input: [^\n]*results/dexter/config\.json", text)


@pytest.mark.snakemake
def test_every_published_dexter_cell_is_planned() -> None:
    rows = table_coverage("dexter.yaml", ["config/expected/dexter.yaml", "config/expected/strategyqa.yaml"])
    # the loop below must run over every paper table, each with cells to produce (an empty
    # coverage would pass it)
    assert [r["id"] for r in rows] == [
        "dexter_table2_ndcg10",
        "dexter_table7_recall100",
        "dexter_table3_answers",
        "dexter_table8_open_models",
        "strategyqa_recall10",
    ]
    assert all(r["to_produce"] > 0 for r in rows)
    for row in rows:
        assert row["not_planned"] == [] and row["planned"] == row["to_produce"], row["id"]


@pytest.mark.parametrize("name", ["dexter.yaml", "tanq.yaml"])
def test_full_configs_are_valid(name: str) -> None:
    from snakemake.utils import validate

    validate(_config(name), str(REPO / "workflow/schemas/config.schema.yaml"))


@pytest.mark.snakemake
def test_tanq_config_plans_the_papers_settings() -> None:
    c = _config("tanq.yaml")
    assert c["datasets"]["tanq"]["splits"] == ["test"] and set(c["generation"]["settings"]) == {"closed", "oracle"}
    assert c["generation"]["oracle_distractors"]["tanq"] > 0 and c["report"]["expected"] == [
        "config/expected/tanq.yaml"
    ]
    template = (REPO / c["generation"]["prompts_dir"] / "few-shot" / "table.txt").read_text()
    demos = [line for line in template.splitlines() if line.startswith("Question: ") and "{{question}}" not in line]
    assert len(demos) == 3  # the paper's 3 demonstrations
    outputs = planned_outputs(dry_run("tanq.yaml"))
    for llm in c["generation"]["llms"]:
        for setting in ("closed", "oracle"):
            assert f"results/tanq/metrics/tanq/test/pipe/none/{llm}/few-shot/{setting}-k0/metrics.json" in outputs
    for tid in (
        "tanq_table5_by_type",
        "tanq_table6_by_skill",
        "tanq_table7_by_n_skills",
        "tanq_table8_by_n_relations",
        "tanq_table9_by_table_length",
        "tanq_table10_failures",
    ):
        assert f"results/tanq/report/tables/{tid}.md" in outputs, tid


@pytest.mark.snakemake
def test_full_reproduction_page_matches_the_planner() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for name in ("dexter.yaml", "tanq.yaml"):
        assert PLAN_CMD.format(config=f"config/{name}") in text
        section = text[text.index(f"## `config/{name}`") :]
        plan = dry_run(name)
        for rule, n in [*plan.counts.items(), ("total", plan.total)]:
            row = f"| **total** | **{n}** |" if rule == "total" else f"| {rule} | {n} |"
            assert row in section, (
                f"{name}: {row!r} not in docs/full_reproduction.md; regenerate: python tests/workflow/test_fidelity_config.py"
            )
        for row in table_target_rows(name):
            assert row in section, (
                f"{name}: {row!r} not in docs/full_reproduction.md; regenerate: python tests/workflow/test_fidelity_config.py"
            )


# ---- tests: the question filters ---------------------------------------------------------------


def _data() -> CanonicalData:
    qs = [
        Query("2hop1__a", "q1", question_type="2hop", meta='{"answerable": true}'),
        Query("3hop1__b", "q2", question_type="3hop", meta='{"answerable": true}'),
        Query("2hop2__c", "q3", question_type="2hop", meta='{"answerable": false}'),
        Query("2hop1__d", "q4", question_type="2hop", meta='{"answerable": true}'),
    ]
    return CanonicalData(
        queries=qs,
        corpus=[Document(f"d{i}", "t", "x") for i in range(4)],
        qrels=[Qrel(q.qid, f"d{i}") for i, q in enumerate(qs)],
        answers=[Answer(q.qid, "aliases", aliases=["a"]) for q in qs],
    )


def test_hops_answerable_and_limit_select_questions_and_keep_the_corpus() -> None:
    data = _data()
    kept = select_questions(data, "musique", hops=[2], answerable_only=True)
    assert [q.qid for q in kept.queries] == ["2hop1__a", "2hop1__d"]
    assert [r.qid for r in kept.qrels] == ["2hop1__a", "2hop1__d"] and len(kept.answers) == 2
    assert len(kept.corpus) == 4  # the corpus is the whole file's
    assert [q.qid for q in select_questions(data, "musique", hops=[2], limit=2).queries] == ["2hop1__a", "2hop2__c"]
    assert [q.qid for q in select_questions(data, "2wikimultihopqa", limit=1).queries] == ["2hop1__a"]
    assert select_questions(data, "tatqa") is data
    with pytest.raises(ConfigError, match="MuSiQue"):
        select_questions(data, "tatqa", hops=[2])


def test_prepare_keeps_the_corpus_whatever_the_limit(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from cqabench.data.prepare import prepare

    raw = REPO / "resources/raw/musique/musique_train_100.jsonl"
    prepare("musique", "train", {"questions": raw}, tmp_path / "all")
    prepare("musique", "train", {"questions": raw}, tmp_path / "sel", limit=5, hops=[2])
    assert pq.read_table(tmp_path / "sel/queries.parquet").num_rows == 5
    assert set(pq.read_table(tmp_path / "sel/queries.parquet").column("question_type").to_pylist()) == {"2hop"}
    assert (
        pq.read_table(tmp_path / "sel/corpus.parquet").num_rows
        == pq.read_table(tmp_path / "all/corpus.parquet").num_rows
    )


if __name__ == "__main__":
    PAGE.write_text(page(), encoding="utf-8")
    print(f"wrote {PAGE}")


@pytest.mark.snakemake
def test_architecture_job_counts_are_the_planners() -> None:
    """docs/architecture.md states each shipped config's job count; they are the dry runs' totals."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name in ("config.yaml", "dexter.yaml", "tanq.yaml"):
        total = dry_run(name).total
        row = re.search(rf"^\| `config/{re.escape(name)}`[^|]*\| ([\d,]+) \|$", text, re.MULTILINE)
        assert row, f"docs/architecture.md has no job-count row for config/{name}"
        assert int(row.group(1).replace(",", "")) == total, (
            f"docs/architecture.md says config/{name} plans {row.group(1)} jobs; "
            f"`snakemake -n --forceall` plans {total:,}"
        )
