"""Snakemake's dry run (`snakemake -n`), run once per session per question and read by one parser.

Why: a dry run of config/dexter.yaml plans 2,126 jobs and takes 15-26 s on a 2-core machine; the
suite used to repeat the same `-n --forceall` of the same config in a dozen tests, each with its own
regexes over the printed text. `dry_run` answers every test that asks the same question (config
content, targets, flags) from one subprocess per session; `snakemake_n` runs a test's own dry run
(a results/ state it built, an edited checkout) and hands back the same parsed `DryRun`.

Set CQABENCH_DRY_RUN_LOG=<file> to append one line per `snakemake -n` subprocess started here (the
config, the arguments and the seconds it took): how issue 35's counts are measured.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from conftest import REPO, once_per_session, workflow_workdir

# Each job block of Snakemake's printout starts with its timestamp line: [Mon Dec  7 17:20:16 2026]
_STAMP = re.compile(r"^\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]$", re.MULTILINE)
_HEAD = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$", re.MULTILINE)
_FIELD = re.compile(r"^    (\w+): (.*)$", re.MULTILINE)
_STATS = re.compile(r"^job\s+count\s*\n-+\s+-+\s*\n(.*?)^total\s+(\d+)", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Job:
    """One job block of the printout: what a user reads for it."""

    rule: str
    wildcards: dict[str, str]
    input: list[str]
    output: list[str]
    log: list[str]
    benchmark: list[str]
    resources: dict[str, str]
    shell: str | None  # the command as printed (printshellcmds, on in profiles/default); None for run: rules
    block: str  # the block's own text, for a check on a line no field above keeps

    @property
    def writes(self) -> list[str]:
        """Every path the job writes: outputs, logs, benchmarks."""
        return self.output + self.log + self.benchmark

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """(rule, sorted wildcards): a job's identity, as cqabench.estimate names it."""
        return self.rule, tuple(sorted(self.wildcards.items()))


@dataclass(frozen=True)
class DryRun:
    """A parsed `snakemake -n` (or a real run's log: its job stats and job blocks read the same)."""

    stdout: str
    stderr: str = ""
    jobs: list[Job] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # the job-stats table, in its order, without `total`
    total: int = 0  # the table's `total` (0 when nothing is to be done)

    @property
    def text(self) -> str:
        return self.stdout + self.stderr

    def outputs(self) -> list[str]:
        """Every planned output path, job by job (`output:` lines)."""
        return [p for job in self.jobs for p in job.output]

    def job_set(self) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        """(rule, sorted wildcards) of every job but the `all` target."""
        return {job.key for job in self.jobs if job.rule != "all"}

    def of_rule(self, rule: str) -> list[Job]:
        return [job for job in self.jobs if job.rule == rule]

    def shell_of(self, command: str) -> Job:
        """The one job whose shell command starts with `command`."""
        found = [job for job in self.jobs if job.shell and job.shell.startswith(command)]
        assert len(found) == 1, f"{len(found)} planned jobs run {command!r}"
        return found[0]


def _paths(value: str | None) -> list[str]:
    return [p.strip() for p in value.split(", ")] if value else []


def _pairs(value: str | None) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in value.split(", ")) if value else {}


def _job(block: str) -> Job | None:
    head = _HEAD.search(block)
    if not head:
        return None
    fields_part, _, shell = block.partition("\nShell command: ")
    fields = {m.group(1): m.group(2).strip() for m in _FIELD.finditer(fields_part)}
    command = shell.split("\n\n", 1)[0].split("\nJob stats:", 1)[0].strip() if shell else ""
    return Job(
        rule=head.group(1),
        wildcards=_pairs(fields.get("wildcards")),
        input=_paths(fields.get("input")),
        output=_paths(fields.get("output")),
        log=_paths(fields.get("log")),
        benchmark=_paths(fields.get("benchmark")),
        resources=_pairs(fields.get("resources")),
        shell=None if command in ("", "None") else command,
        block=block,
    )


def parse(stdout: str, stderr: str = "") -> DryRun:
    """Snakemake's printout as jobs and job-stats counts (the first table: a dry run prints it twice)."""
    text = stdout + stderr
    jobs = []
    for block in _STAMP.split(text)[1:]:
        job = _job(block.split("\nJob stats:", 1)[0].split("\nReasons:", 1)[0])
        if job:
            jobs.append(job)
    counts: Counter = Counter()
    stats = _STATS.search(text)
    if stats:
        for line in stats.group(1).strip().splitlines():
            rule, count = line.split()
            counts[rule] = int(count)
    return DryRun(stdout=stdout, stderr=stderr, jobs=jobs, counts=counts, total=int(stats.group(2)) if stats else 0)


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    """Offline, this interpreter's tools first on PATH, the suite's python as the vLLM python
    (planning never starts it); `extra` wins."""
    return {**os.environ, "HF_HUB_OFFLINE": "1",
            "CQABENCH_VLLM_PYTHON": os.environ.get("CQABENCH_VLLM_PYTHON", sys.executable),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            **(extra or {})}  # fmt: skip


def snakemake_n(work: Path, *args: str, env: dict[str, str] | None = None, timeout: int = 900,
                check: bool = True) -> DryRun:  # fmt: skip
    """`python -m snakemake -n *args` with cwd=work, parsed; with `check` a failure fails the test
    with Snakemake's own message. For a dry run only this test can ask (its own results/ state)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", *args], cwd=work, capture_output=True,
                          text=True, env=_env(env), timeout=timeout, check=False)  # fmt: skip
    log = os.environ.get("CQABENCH_DRY_RUN_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{time.monotonic() - started:.1f}s\t{' '.join(args)}\n")
    if check:
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return parse(done.stdout, done.stderr)


def dry_run(config: str | Path, *targets: str, forceall: bool = True) -> DryRun:
    """`snakemake -n [--forceall] --configfile <config> -- <targets>` in a fresh `workflow_workdir`
    (empty results/: with or without --forceall every job of the targets is planned), once per
    session per (config content, targets, forceall), pytest-xdist workers included. `config` is a
    shipped config's file name ("dexter.yaml": config/dexter.yaml) or the path of a test's own
    config file."""
    path = REPO / "config" / config if isinstance(config, str) and "/" not in config else Path(config)
    key = (hashlib.sha256(path.read_bytes()).hexdigest(), targets, forceall)

    def run() -> DryRun:
        work = workflow_workdir(Path(tempfile.mkdtemp(prefix="cqab-dry-run-")))  # never the checkout's results/
        flags = ["--forceall"] if forceall else []
        return snakemake_n(work, *flags, "--configfile", str(path.resolve()), *(["--", *targets] if targets else []))

    return once_per_session(f"dry_run:{key!r}", run)
