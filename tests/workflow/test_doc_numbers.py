"""Numbers the docs quote about the default run are the plan's or the data's, and this file
checks them (issue 36 item 8): job and cell counts against the planner's jobs (in process, the
same jobs `snakemake -n` lists, tests/estimate/test_estimate.py), question counts against the
bundled sample, the report page's sections against the page's own builder. A score or a timing
of one run is not a property of the code: the docs do not quote scores of the default run in
prose (its report page has them), and a timing is quoted once, dated, with its machine (README,
"Quick start"). `test_no_doc_quotes_a_score_of_the_default_run` keeps it so.
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = [
    REPO / "README.md",
    REPO / "config" / "README.md",
    REPO / "resources" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
]


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _one(pattern: str, text: str, where: str) -> re.Match:
    found = re.search(pattern, text)
    assert found, f"{where}: the sentence /{pattern}/ is gone; update this test with the doc"
    return found


@cache
def _jobs(config: str) -> dict:
    """config/<config>'s planned jobs by id (Snakemake's DAG as the estimate reads it, but `all`)."""
    from conftest import planned_jobs

    return {j.id: j for j in planned_jobs(config)}


def _ancestors(config: str, rule: str) -> set[str]:
    """The job of `rule` in config/<config>'s plan and every job it depends on."""
    jobs = _jobs(config)
    [start] = [i for i, j in jobs.items() if j.rule == rule]
    seen, stack = {start}, [start]
    while stack:
        for dep in jobs[stack.pop()].deps:
            if dep not in seen:
                seen.add(dep)
                stack.append(dep)
    return seen


def _target_jobs(config: str, rule: str) -> int:
    """What `snakemake -n <rule>` plans: the rule's job and its ancestors (results/<name>/config.json
    is written before planning, by no job)."""
    return len(_ancestors(config, rule))


@pytest.mark.snakemake
def test_job_and_cell_counts_quoted_are_the_plans() -> None:
    """README: the default's 231 jobs and 43 cells, the full config's 2,634 jobs and each paper
    table target's jobs; docs/generation.md the 43 cells again."""
    sample = _jobs("config.yaml")
    assert _int(_one(r"A fresh clone \([^,]+, ([\d,]+) jobs", README, "README").group(1)) == len(sample) + 1  # + all
    cells = sum(1 for j in sample.values() if j.rule == "generate")
    assert _int(_one(r"then the (\d+) cells' own jobs", README, "README").group(1)) == cells
    generation = (REPO / "docs" / "generation.md").read_text(encoding="utf-8")
    assert (
        _int(_one(r"\((\d+) cells with SmolLM2-135M in the default's plan", generation, "generation.md").group(1))
        == cells
    )
    assert (
        _int(_one(r"whole workflow\s+plans ([\d,]+) jobs", README, "README").group(1)) == len(_jobs("dexter.yaml")) + 1
    )
    table = README.split("| target | plans | jobs |")[1].split("\n\n")[0]
    rows = re.findall(r"^\| (`table_\w+`.*?) \| .* \| ([\d,]+) \|$", table, flags=re.M)
    assert len(rows) == 5, table
    for targets, jobs in rows:
        for target in re.findall(r"`(table_\w+)`", targets):
            assert _target_jobs("dexter.yaml", target) == _int(jobs), target


@cache
def _sample_questions() -> dict[str, int]:
    """Questions per dataset of the bundled sample (the default config's splits, counted)."""
    from cqabench.estimate import run

    est = run.estimate(
        run.load_config(REPO / "config" / "config.yaml"), 8, 64, root=REPO, jobs=list(_jobs("config.yaml").values())
    )
    return {s["dataset"]: s["questions"] for s in est.splits}


@pytest.mark.snakemake
def test_question_counts_quoted_are_the_samples() -> None:
    """README: the first 30 questions of every dataset, all of the smaller FinQA (30) and TANQ
    (10) samples; resources/README.md: 2WikiMultihopQA's 38 dev questions, the first 30 asked."""
    limit = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["generation"]["max_questions"]
    counts = _sample_questions()
    assert _int(_one(r"for the first (\d+) questions of every dataset", README, "README").group(1)) == limit
    named = _one(r"all of the smaller (\w+) and (\w+) samples, (\d+) and (\d+) questions", README, "README").groups()
    smaller = {d: n for d, n in counts.items() if n <= limit}
    assert smaller == {named[0].lower(): _int(named[2]), named[1].lower(): _int(named[3])}
    resources = (REPO / "resources" / "README.md").read_text(encoding="utf-8")
    found = _one(
        r"2WikiMultihopQA\*\* has (\d+) dev questions \(the default asks the first (\d+)\)", resources, "resources"
    )
    assert (_int(found.group(1)), _int(found.group(2))) == (counts["2wikimultihopqa"], limit)


def test_report_doc_lists_the_pages_sections(tmp_path: Path) -> None:
    """docs/report.md numbers the report page's sections; the page the workflow writes (with its
    estimate) has exactly that many, in that order (it said 11 of 12)."""
    from cqabench.report.page import build_sections

    sections = build_sections(
        config={"name": "x"},
        metrics=pd.DataFrame(),
        tables_dir=tmp_path,
        plots_dir=tmp_path,
        table_ids=[],
        specs=[],
        benchmarks_dir=tmp_path,
        rules=[],
        fact_csv="metrics.csv",
        fact_html="fact_table.html",
        estimate_dir=tmp_path,
    )
    text = (REPO / "docs" / "report.md").read_text(encoding="utf-8")
    listing = _one(r"(?s)of (\d+) sections: (1\. .*?)\nA figure with nothing", text, "report.md")
    item = r"(?:^|\s)(\d{1,2})\. (?=\S)"  # "4. the retriever × dataset heatmap"
    numbers = [int(n) for n in re.findall(item, listing.group(2))]
    assert int(listing.group(1)) == len(sections) == len(numbers)
    assert numbers == list(range(1, len(sections) + 1))
    keywords = [
        "what was run",
        "paper tables",
        "Figure 2",
        "heatmap",
        "significance",
        "pipelines",
        "TANQ",
        "parse rates",
        "answers by setting",
        "wall time",
        "estimated cost",
        "metrics.csv",
    ]
    items = re.split(item.replace("(\\d{1,2})", "\\d{1,2}"), listing.group(2))[1:]
    assert all(k.lower() in item.lower() for k, item in zip(keywords, items, strict=True))
    assert [s.id for s in sections][10] == "estimate"


def test_readme_layout_names_every_doc() -> None:
    layout = README.split("## Layout")[1].split("```")[1]
    line = layout[layout.index("docs/ ") :]
    named = set(re.findall(r"[a-z_]+", line.split("docs/", 1)[1]))
    assert {p.stem for p in (REPO / "docs").glob("*.md")} <= named


SCORE = re.compile(r"(?<![\"\d.])\b0\.\d{3,}\b(?!\")")  # a quoted "0.126" is an example answer, not a score
# where a number is shown to come from: the test that asserts it, or the script that measured it
SOURCES = ("tests/", "benchmarks/", "scripts/")


def _passages(text: str) -> list[str]:
    """Paragraphs, a table's rows each one of its own (a table is one block of many claims)."""
    out: list[str] = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            out += lines
        else:
            out.append(block)
    return out


def test_no_doc_quotes_a_score_of_the_default_run() -> None:
    """A paragraph (or table row) that speaks of the default run quotes no score (0.xxx) unless it
    names the test that asserts that number or the script that measured it; the stale numbers
    issue 36 found are gone."""
    bad = []
    for doc in DOCS:
        for paragraph in _passages(doc.read_text(encoding="utf-8")):
            if (
                re.search(r"default run|the default's (?:cell|run)", paragraph)
                and SCORE.search(paragraph)
                and not any(source in paragraph for source in SOURCES)
            ):
                bad.append(f"{doc.relative_to(REPO)}: {SCORE.search(paragraph).group(0)} in {paragraph[:120]!r}")
    assert not bad, "\n".join(bad)
    every = "\n".join(doc.read_text(encoding="utf-8") for doc in DOCS)
    for stale in ("0.590474", "1,151", "531 s", "~35 min", "cqabench/planner.py", "55 engine starts"):
        assert stale not in every, stale


@pytest.mark.snakemake
def test_slurm_quickstart_fetches_table2s_models_and_names_table3s_cells() -> None:
    """Issue 36 item 9: step 3 fetched every model of config/dexter.yaml (the gated Llama-2 too)
    for Table 2; its `--only` list is now exactly the retrievers' checkpoints. Table 3's plan holds
    504 answer cells, 168 per LLM (Llama-2's included), as the page and README say."""
    from cqabench.planner import Environment, Plan, needed_models

    text = (REPO / "docs" / "slurm_quickstart.md").read_text(encoding="utf-8")
    command = _one(r"cqabench fetch-models --configfile config/dexter.yaml --only ([^`]*?)\n```", text, "quickstart")
    listed = command.group(1).replace("\\\n", " ").split()
    wanted = [
        r.repo_id
        for r in needed_models.requests(
            Plan(
                yaml.safe_load((REPO / "config" / "dexter.yaml").read_text()),
                Environment(root=REPO, python="python", vllm_python=sys.executable),
            )
        )
        if all(k.startswith("retrievers.") for k in r.keys)
    ]
    assert listed == wanted
    cells = [
        i
        for i in _ancestors("dexter.yaml", "table_dexter_table3_answers")
        if _jobs("dexter.yaml")[i].rule == "evaluate_generation"
    ]
    per_llm = {llm: sum(f"llm={llm}" in i for i in cells) for llm in ("gpt-3.5-turbo", "mistral-7b", "llama2-7b")}
    assert _int(_one(r"its plan holds ([\d,]+) answer cells, (\d+) per LLM", text, "quickstart").group(1)) == len(cells)
    assert set(per_llm.values()) == {_int(_one(r"(\d+) per LLM of `generation.llms`", text, "quickstart").group(1))}
    assert _int(_one(r"its ([\d,]+) answer cells \(every LLM", README, "README").group(1)) == len(cells)
