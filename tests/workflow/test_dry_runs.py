"""The suite's one reader of Snakemake's dry-run printout (tests/dry_runs.py), on text written as
Snakemake 9 prints it, and its per-session cache (one subprocess per config content, targets, flags)."""

from __future__ import annotations

from pathlib import Path

import pytest

import dry_runs
from dry_runs import DryRun, parse

# Two job blocks, as `snakemake -n` prints them (a shell rule with printshellcmds, a run: rule),
# the job-stats table printed before and after them, and the closing summary.
STATS = """\
Job stats:
job            count
-----------  -------
prepare            1
cell_spec          1
all                1
total              3
"""
PRINTOUT = (
    """\
Building DAG of jobs...
"""
    + STATS
    + """


[Mon Dec  7 17:20:16 2026]
rule prepare:
    input: resources/raw/finqa/dev_30.json
    output: results/sample/data/finqa/dev/queries.parquet, results/sample/data/finqa/dev/qrels.parquet
    log: results/sample/logs/prepare/finqa/dev.log
    jobid: 7
    benchmark: results/sample/benchmarks/prepare/finqa/dev.tsv
    reason: Forced execution
    wildcards: dataset=finqa, split=dev
    resources: tmpdir=/tmp, mem_mb=1000, mem=1 GB, runtime=10, gpu=0
Shell command: cqabench prepare --dataset finqa --split dev 2> results/sample/logs/prepare/finqa/dev.log

[Mon Dec  7 17:20:16 2026]
localrule cell_spec:
    input: results/sample/config.json
    output: results/sample/generation/finqa/dev/pipe/none/m/few-shot/closed-k0/spec.json
    jobid: 9
    reason: Forced execution
    wildcards: dataset=finqa, split=dev, retriever=none
    resources: tmpdir=/tmp, mem_mb=4000, runtime=60, gpu=0
Shell command: None

[Mon Dec  7 17:20:16 2026]
localrule all:
    input: results/sample/data/finqa/dev/qrels.parquet
    jobid: 0
    reason: Forced execution
    resources: tmpdir=/tmp
"""
    + STATS
    + """
Reasons:
    (check individual jobs above for details)
This was a dry-run (flag -n). The order of jobs does not reflect the order of execution.
"""
)


def test_the_printout_reads_as_jobs_and_job_stats() -> None:
    plan = parse(PRINTOUT, "Using workflow specific profile profiles/default\n")
    assert list(plan.counts.items()) == [("prepare", 1), ("cell_spec", 1), ("all", 1)] and plan.total == 3
    assert [job.rule for job in plan.jobs] == ["prepare", "cell_spec", "all"]
    prepare, spec, every = plan.jobs
    assert prepare.wildcards == {"dataset": "finqa", "split": "dev"}
    assert prepare.input == ["resources/raw/finqa/dev_30.json"]
    assert prepare.output == [
        "results/sample/data/finqa/dev/queries.parquet",
        "results/sample/data/finqa/dev/qrels.parquet",
    ]
    assert prepare.writes == [
        *prepare.output,
        "results/sample/logs/prepare/finqa/dev.log",
        "results/sample/benchmarks/prepare/finqa/dev.tsv",
    ]
    assert prepare.resources == {"tmpdir": "/tmp", "mem_mb": "1000", "mem": "1 GB", "runtime": "10", "gpu": "0"}
    assert prepare.shell == "cqabench prepare --dataset finqa --split dev 2> results/sample/logs/prepare/finqa/dev.log"
    assert (
        spec.shell is None
        and spec.log == []
        and spec.key == ("cell_spec", (("dataset", "finqa"), ("retriever", "none"), ("split", "dev")))
    )
    assert every.wildcards == {} and every.output == [] and every.shell is None  # the last block: no table in it
    assert plan.job_set() == {prepare.key, spec.key}  # `all` left out
    assert plan.outputs() == [*prepare.output, *spec.output]
    assert plan.shell_of("cqabench prepare ") is prepare
    assert plan.text.endswith("profiles/default\n")


def test_nothing_to_be_done_and_a_real_runs_log() -> None:
    """An up-to-date plan has no table (counts empty, total 0); a real run prints its table to stderr."""
    idle = parse("Building DAG of jobs...\nNothing to be done (all requested files are present and up to date).\n")
    assert idle.counts == {} and idle.total == 0 and idle.jobs == []
    run = parse(
        "",
        "Job stats:\njob             count\n------------  -------\nencode_part         1\ngather_index        1\n"
        "total               2\n\nSelect jobs to execute...\n",
    )
    assert run.counts == {"encode_part": 1, "gather_index": 1} and run.total == 2


def test_one_subprocess_per_config_content_targets_and_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test's edited config is planned anew; the same question again, under any path, is not."""
    started: list[tuple[str, ...]] = []

    def fake(work: Path, *args: str, **_: object) -> DryRun:
        started.append(args)
        return DryRun(stdout=str(len(started)))

    monkeypatch.setattr(dry_runs, "snakemake_n", fake)
    import conftest

    # a session cache of its own, in memory only (no xdist worker reads these fakes)
    monkeypatch.setattr(conftest, "_SESSION", {})
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    edited = tmp_path / "edited.yaml"
    edited.write_text("name: sample\n")
    same = tmp_path / "same.yaml"
    same.write_text("name: sample\n")
    first = dry_runs.dry_run(edited)
    assert dry_runs.dry_run(same) is first  # same content
    assert dry_runs.dry_run(edited, forceall=False) is not first
    assert dry_runs.dry_run(edited, "results/sample/metrics.parquet") is not first
    edited.write_text("name: other\n")
    assert dry_runs.dry_run(edited) is not first
    assert len(started) == 4
    assert started[0] == ("--forceall", "--configfile", str(edited.resolve()))
    assert started[1] == ("--configfile", str(edited.resolve()))
    assert started[2] == ("--forceall", "--configfile", str(edited.resolve()), "--", "results/sample/metrics.parquet")
    dry_runs.dry_run("config.yaml")  # a shipped config by its file name
    assert started[-1] == ("--forceall", "--configfile", str(dry_runs.REPO / "config" / "config.yaml"))
