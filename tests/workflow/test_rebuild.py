"""What a change rebuilds, counted from Snakemake's dry-run job table (`snakemake -n`).

1. Asking for one answer cell's metrics.json plans only that file's ancestors.
2. Editing one prompt template reruns exactly the generation and evaluation jobs of the cells
   that use it (plus the report jobs downstream), nothing upstream.
3. With the default's engine batch, a changed retriever setting (BM25's k1) or template replans
   exactly the cells that read it: each cell's job depends on its own spec (the files and
   settings its prompts are made from), the batch manifest only orders it (`ancient`).

All run in a throw-away copy of the checkout (prompts copied where one is edited) on the
embedded default config. For (2) and (3) every output exists as an empty stand-in made up to date
with `snakemake --touch`, so the dry run shows what the edit alone triggers; the stand-ins are
made once per session (tests/conftest.py `sample_stand_ins`, a copied checkout, shared with
test_moved_checkout) and each test edits its own copy of that folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import TOUCH_CLI, workflow_workdir
from dry_runs import DryRun, dry_run, snakemake_n

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "config" / "config.yaml")


def _snakemake(work: Path, *args: str) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    cli = [TOUCH_CLI] if "--touch" in args else ["-m", "snakemake"]
    done = subprocess.run(
        [sys.executable, *cli, "--configfile", CONFIG, "--cores", "1", *args],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _n(work: Path, *args: str) -> DryRun:
    """`snakemake -n` of the default config in `work` (its own results/ state), parsed."""
    return snakemake_n(work, "--configfile", CONFIG, "--cores", "1", *args, timeout=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """For the plans of one target (no edits: the tests that edit work on `sample_stand_ins`)."""
    return workflow_workdir(tmp_path_factory.mktemp("rebuild"))


@pytest.fixture(scope="module")
def forced() -> DryRun:
    """`snakemake -n --forceall` of the default config: the session's shared run (the copied
    prompts of `work` are the checkout's until a test edits one, and put back after)."""
    plan = dry_run("config.yaml")
    # The default plans answer-metric cells; without them every test below would check nothing.
    assert any("/metrics/" in o and o.endswith("metrics.json") for o in plan.outputs()), (
        "no answer-metric cells planned"
    )
    return plan


def _answer_cells(forced: DryRun) -> list[str]:
    return sorted(
        o for o in forced.outputs() if o.startswith("results/sample/metrics/") and o.endswith("/metrics.json")
    )


def _unbatched_config(work: Path) -> str:
    """The default config without engine batches: every cell is its own job from scratch."""
    import yaml

    config = yaml.safe_load(Path(CONFIG).read_text())
    config["generation"]["batch_llms"] = []
    path = work / "unbatched.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.snakemake
def test_one_cell_builds_only_its_ancestors(work: Path, forced: DryRun) -> None:
    target = _answer_cells(forced)[0]
    # With engine batches (the default), a cell built from nothing waits for its model's batch.
    batched = _n(work, "--forceall", target)
    assert [j.output for j in batched.of_rule("generate_batch")] == [
        ["results/sample/generation/_batches/smollm2-135m.json"]
    ]
    plan = _n(work, "--forceall", target, "--configfile", _unbatched_config(work))
    made = plan.outputs()
    assert target in made
    # No other cell's metrics, no report, nothing of another dataset beyond what the pooled corpus needs.
    others = [o for o in made if o.endswith("metrics.json") and o != target and o.startswith("results/sample/metrics/")]
    assert others == []
    assert not {"aggregate", "report_tables", "report_plots", "report_page", "all"} & set(plan.counts)
    gen_folder = target.replace("results/sample/metrics/", "results/sample/generation/").rsplit("/", 1)[0]
    generation_jobs = [j.output for j in plan.jobs if any(o.startswith("results/sample/generation/") for o in j.output)]
    assert len(generation_jobs) == 1 and all(o.startswith(gen_folder) for o in generation_jobs[0])
    assert sum(plan.counts.values()) < sum(forced.counts.values())


def _stand_ins(work: Path, forced: DryRun, *config: str) -> None:
    """Every output of the forced plan as an empty stand-in, made up to date with `--touch --forceall`
    (every job touched in order, so each also gets Snakemake's metadata: its params, for the
    params rerun trigger; a plain `--touch` skips stand-ins that already look up to date)."""
    dirs = {o for o in forced.outputs() if not Path(o).suffix}  # directory() outputs: indexes, exports, models
    for rel in forced.outputs():
        path = work / rel
        if rel in dirs:
            path.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    _snakemake(work, "--touch", "--forceall", *config)
    assert sum(_n(work, *config).counts.values()) == 0, "stand-ins are not up to date"


def _own_copy(sample_stand_ins: tuple[Path, DryRun], tmp_path: Path) -> Path:
    """The test's own copy of the session's stand-ins (tests/conftest.py), to edit: the stand-ins,
    their mtimes (copy2) and Snakemake's metadata (.snakemake/) come along, so nothing is out of
    date in it either."""
    work = tmp_path / "work"
    shutil.copytree(sample_stand_ins[0], work, symlinks=True)
    return work


REPORT_JOBS = {"aggregate": 1, "report_tables": 1, "report_plots": 1, "report_page": 1, "all": 1}
# The default's paper tables, each its own job (table_<id>, cqabench.planner.table_targets).
TANQ_TABLES = (
    "tanq_table5_by_type",
    "tanq_table6_by_skill",
    "tanq_table7_by_n_skills",
    "tanq_table8_by_n_relations",
    "tanq_table9_by_table_length",
    "tanq_table10_failures",
)
TABLE_JOBS = {
    f"table_{t}": 1
    for t in (
        "dexter_table2_ndcg10",
        "dexter_table7_recall100",
        "dexter_table3_answers",
        "dexter_table8_open_models",
        "strategyqa_recall10",
        *TANQ_TABLES,
    )
}


@pytest.mark.snakemake
def test_a_retriever_setting_or_template_replans_only_its_cells_under_a_batch(
    sample_stand_ins: tuple[Path, DryRun], tmp_path: Path
) -> None:
    """Hand-counted from config/config.yaml. BM25 serves 6 indexes (the corpora wiki-multihop, ambigqa,
    ottqa, tatqa, finqa, and the open-book tool corpus wiki-tools), 7 searches (one per searched
    dataset) and StrategyQA's 3 IR-Q / IR-D runs, each evaluated (10); the BM25+MiniLM fusion of the
    7 datasets fuses a BM25 run, so it is re-fused and re-evaluated too (7 + 7); BM25 and the fused run
    are read by 7 datasets x 2 k RAG cells each and TANQ's open-book cell (29): their specs, the
    batch, their jobs and evaluations. The other 14 cells (closed, oracle) and MiniLM's index and
    searches are not replanned, though the batch reruns.
    Every paper table reruns: each reads the whole config (its comparability notes), which the k1
    change edits (their params carry the config's hash); the jobs that read only their own part
    of it (cells, evaluations) rerun on that part alone (their params). A template edit leaves the config alone: only DEXTER Table 3, which
    shows the 12 numeric cells (TAT-QA and FinQA few-shot), reruns."""
    import yaml

    work = _own_copy(sample_stand_ins, tmp_path)  # a stale copy would fail the exact job tables below
    config = yaml.safe_load(Path(CONFIG).read_text())
    assert config["generation"]["batch_llms"], "the default no longer batches: this test checks nothing"
    config["retrievers"]["bm25"]["k1"] = 1.2
    changed = work / "bm25_k1.yaml"
    changed.write_text(yaml.safe_dump(config))
    run = _n(work, "--configfile", str(changed))
    assert run.counts == Counter(
        {
            "index": 6,
            "search": 7,
            "decompose_search": 3,
            "fuse_runs": 7,
            "evaluate_retrieval": 17,
            "cell_spec": 29,
            "generate_batch": 1,
            "generate": 29,
            "evaluate_generation": 29,
            "estimate": 1,  # it reads the whole config
            **REPORT_JOBS,
            **TABLE_JOBS,
        }
    ), run.counts
    cells = [
        o.split("/") for o in run.outputs() if o.startswith("results/sample/generation/") and o.endswith(".parquet")
    ]
    # results/sample/generation/{dataset}/{split}/{serialization}/{retriever}/{llm}/{prompt}/{setting}-k{k}/predictions.parquet
    assert {(c[6], c[9].split("-k")[0]) for c in cells} == {
        ("bm25", "rag"),
        ("bm25-minilm-rrf", "rag"),
        ("bm25", "open-book"),
    }

    # The numeric template (TAT-QA and FinQA: closed, 4 RAG, oracle each) reruns those 12 cells only.
    template = work / "resources" / "prompts" / "few-shot" / "numeric.txt"
    before, stat = template.read_text(), template.stat()
    template.write_text(before + "\n")
    try:
        run = _n(work)
    finally:
        template.write_text(before)
        os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert run.counts == Counter(
        {
            "cell_spec": 12,
            "generate_batch": 1,
            "generate": 12,
            "evaluate_generation": 12,
            "table_dexter_table3_answers": 1,
            **REPORT_JOBS,
        }
    ), run.counts
    cells = [
        o.split("/") for o in run.outputs() if o.startswith("results/sample/generation/") and o.endswith(".parquet")
    ]
    assert sorted({c[3] for c in cells}) == ["finqa", "tatqa"] and len(cells) == 12


@pytest.mark.snakemake
def test_editing_one_template_reruns_exactly_its_cells(
    sample_stand_ins: tuple[Path, DryRun], forced: DryRun, tmp_path: Path
) -> None:
    work = _own_copy(sample_stand_ins, tmp_path)

    cells = _answer_cells(forced)
    # One lost cell, with its batch up to date, is rebuilt alone: its own job, its evaluation, the report.
    lost = (
        cells[0]
        .replace("results/sample/metrics/", "results/sample/generation/")
        .replace("metrics.json", "predictions.parquet")
    )
    (work / lost).unlink()
    alone = _n(work).counts
    # ... and of the paper tables only the one that shows it (a few-shot RAG cell: DEXTER Table 3;
    # Table 8 is oracle with few-shot-CoT), each table being its own job (table_<id>).
    assert cells[0].split("/")[8:10] == ["few-shot", "rag-k1"], cells[0]
    assert alone == Counter(
        {
            "generate": 1,
            "evaluate_generation": 1,
            "aggregate": 1,
            "report_tables": 1,
            "table_dexter_table3_answers": 1,
            "report_plots": 1,
            "report_page": 1,
            "all": 1,
        }
    ), alone
    # The same per-cell semantics without batches (every cell its own job from scratch).
    unbatched = _unbatched_config(work)
    _snakemake(work, "--touch", "--configfile", unbatched)
    # results/sample/metrics/{dataset}/{split}/{serialization}/{retriever|none}/{llm}/{prompt}/{setting}-k{k}/metrics.json
    prompt = cells[0].split("/")[8]
    using = [c for c in cells if c.split("/")[8] == prompt]
    templates = sorted((work / "resources" / "prompts" / prompt).glob("*"))
    assert templates, f"no template files for prompt {prompt}"
    # Edit every template of this prompt family would be too broad: edit the one the first cell uses.
    dataset = cells[0].split("/")[3]
    text_before = {t: t.read_text() for t in templates}
    edited = None
    for template in templates:
        template.write_text(text_before[template] + "\n")
        run = _n(work, "--configfile", unbatched)
        if any(c in run.outputs() for c in using if c.split("/")[3] == dataset):
            edited = (template, run)
            break
        template.write_text(text_before[template])
    assert edited, f"editing no template of {prompt} reran the cells of {dataset}"
    template, run = edited
    try:
        rerun = [o for o in run.outputs() if o.startswith("results/sample/metrics/") and o.endswith("metrics.json")]
        assert rerun and all(c.split("/")[8] == prompt for c in rerun), rerun
        generation = [o for o in run.outputs() if o.startswith("results/sample/generation/") and o.endswith(".parquet")]
        assert len(generation) == len(rerun)
        counts = run.counts
        stages = tuple(f"results/sample/{stage}/" for stage in ("data", "runs", "index", "retrieval", "corpora"))
        upstream = {j.rule for j in run.jobs if any(o.startswith(stages) for o in j.output)}
        assert upstream == set(), f"an edited template reran upstream rules {upstream}"
        tables = sum(n for rule, n in counts.items() if rule.startswith("table_"))
        assert sum(counts.values()) == 2 * len(rerun) + tables + sum(
            counts[r] for r in ("aggregate", "report_tables", "report_plots", "report_page", "all")
        )
    finally:
        template.write_text(text_before[template])


@pytest.mark.snakemake
def test_one_run_file_builds_only_that_run(work: Path) -> None:
    target = "results/sample/runs/musique/train/pipe/bm25.trec"
    plan = _n(work, "--forceall", target)
    # Its ancestors only: the two datasets of the pooled corpus, the corpus, one index, one search.
    assert plan.counts == Counter({"prepare": 2, "pool_corpus": 1, "index": 1, "search": 1})
    made = plan.outputs()
    assert "results/sample/index/wiki-multihop/pipe/bm25" in made
    assert not [
        o
        for o in made
        if o.startswith("results/sample/runs/") and not o.startswith("results/sample/runs/musique/train/pipe/bm25.")
    ]
