"""The jobs a config makes, as Snakemake itself plans them: rule, wildcards and dependencies.

The estimate costs exactly the jobs `snakemake -n --forceall --configfile CONFIG` plans (every
job, whatever results/ holds), so a new rule is costed once (its cost function in `model`) and
never described a second time. The DAG is Snakemake's own (`snakemake.api`, `DAG.jobs` and
their dependencies), built in a child process (`python -m cqabench.estimate.dag CONFIG`) that
prints it as JSON: the Snakefile changes the working directory and Snakemake's logging, which a
command or a test must not inherit, and a crash of the planner is one error line here.

No recursion: the rules' resource functions cost one job at a time (`JobCosts.request`), never
the whole DAG; only `JobCosts.all` (the CLI and the `estimate` rule) asks for it. The child marks
its environment (`IN_DAG_ENV`): a DAG requested while a DAG is being built is refused.

Building the DAG of config/dexter.yaml takes 15-26 s on the 2-core development machine (the
planner's checks and ~12k jobs); the sample config's a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError

IN_DAG_ENV = "CQABENCH_ESTIMATE_DAG"
SNAKEFILE = Path(__file__).resolve().parents[3] / "Snakefile"  # this checkout's
# The rules in the order of the workflow's stages (tables list them in this order).
RULES = (
    "download",
    "prepare",
    "pool_corpus",
    "export_beir",
    "index",
    "colbert_codec",
    "encode_part",
    "gather_index",
    "search",
    "decompose_search",
    "import_run",
    "fuse_runs",
    "rerank_run",
    "evaluate_retrieval",
    "convert_model",
    "generate_batch",
    "generate_batch_share",
    "cell_spec",
    "generate",
    "evaluate_generation",
    "aggregate",
    "table",
    "report_tables",
    "report_plots",
    "estimate",
    "report_page",
)
# One `table_<id>` rule per paper table (workflow/rules/report.smk): costed as the family "table".
TABLE_PREFIX = "table_"
# Snakemake's own target rules: no job of the bill (they run nothing).
TARGET_RULES = frozenset({"all"})


def rule_family(rule: str) -> str:
    """The rule a job's cost model and tables file it under: `table_<id>` -> "table"."""
    return "table" if rule.startswith(TABLE_PREFIX) else rule


def job_id(rule: str, wildcards: dict[str, Any]) -> str:
    return rule + "(" + ",".join(f"{k}={wildcards[k]}" for k in sorted(wildcards)) + ")"


@dataclass
class Job:
    """One planned job; `deps` are the ids of the jobs it waits for."""

    rule: str
    wildcards: dict[str, str]
    deps: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return job_id(self.rule, self.wildcards)


def _stage(rule: str) -> int:
    family = rule_family(rule)
    return RULES.index(family) if family in RULES else len(RULES)


def ordered(jobs: list[Job]) -> list[Job]:
    """Jobs in stage order with every dependency before its dependents (a topological order)."""
    by_id = {j.id: j for j in jobs}
    done: dict[str, Job] = {}

    def visit(job: Job) -> None:
        stack = [(job, iter(sorted(job.deps, key=lambda d: (_stage(by_id[d].rule), d))))]
        while stack:
            node, deps = stack[-1]
            nxt = next((by_id[d] for d in deps if d not in done), None)
            if nxt is None:
                stack.pop()
                done.setdefault(node.id, node)
            else:
                stack.append((nxt, iter(sorted(nxt.deps, key=lambda d: (_stage(by_id[d].rule), d)))))

    for job in sorted(jobs, key=lambda j: (_stage(j.rule), j.id)):
        if job.id not in done:
            visit(job)
    return list(done.values())


def from_json(data: dict[str, Any]) -> list[Job]:
    """The child's JSON (`{"jobs": [{"rule", "wildcards", "deps": [index]}]}`) as jobs, target rules dropped."""
    rows = data["jobs"]
    ids = [job_id(r["rule"], r["wildcards"]) for r in rows]
    jobs = [Job(r["rule"], {k: str(v) for k, v in r["wildcards"].items()},
                sorted({ids[d] for d in r["deps"] if rows[d]["rule"] not in TARGET_RULES}))
            for r in rows if r["rule"] not in TARGET_RULES]  # fmt: skip
    return ordered(jobs)


def snakemake_jobs(config: dict[str, Any] | str | Path, root: str | Path = ".", timeout_s: float = 600) -> list[Job]:
    """The jobs Snakemake plans for a config (a file, or a mapping written to a temporary file)."""
    if os.environ.get(IN_DAG_ENV):
        raise ConfigError(
            "cqabench estimate: the DAG was asked for while Snakemake builds it (a rule's resources "
            "must cost one job, JobCosts.request, never the whole plan)"
        )
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(prefix="cqabench-dag-") as tmp:
        if isinstance(config, (str, Path)):
            path = Path(config).resolve()
        else:
            path = Path(tmp) / "config.json"
            path.write_text(json.dumps(config), encoding="utf-8")
        out = Path(tmp) / "dag.json"
        env = {**os.environ, IN_DAG_ENV: "1"}
        cmd = [sys.executable, "-m", "cqabench.estimate.dag", str(path), str(out)]
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"{path}: Snakemake's DAG took over {timeout_s:.0f} s to build") from None
        if proc.returncode != 0 or not out.is_file():
            where = path if isinstance(config, (str, Path)) else "the config"
            raise ConfigError(
                f"{where}: Snakemake could not plan the config: {_reason(proc.stderr + proc.stdout, proc.returncode)}"
            )
        return from_json(json.loads(out.read_text(encoding="utf-8")))


def _reason(output: str, status: int) -> str:
    """The planner's own message (from its `cqabench:` line on, joined into one line), else
    Snakemake's last error line, else the exit status."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    first = next((i for i, ln in enumerate(lines) if ln.startswith("cqabench")), None)
    if first is not None:
        return " ".join(lines[first : first + 8])
    return next((ln for ln in reversed(lines) if "Error" in ln), lines[-1] if lines else f"exit status {status}")


def _build(configfile: Path, out: Path) -> None:
    """In the child: Snakemake's DAG of every job (--forceall), written as JSON to `out`."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

    with SnakemakeApi(OutputSettings(quiet={Quietness.ALL, Quietness.PROGRESS, Quietness.RULES})) as api:
        wf_api = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[configfile]),
            snakefile=SNAKEFILE,
            workdir=Path.cwd(),
        )
        dag_api = wf_api.dag(DAGSettings(forceall=True))
        workflow = dag_api.workflow_api._workflow  # the API's own printd3dag goes through it
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        dag = workflow.dag
        jobs = list(dag.jobs)
        index = {job: i for i, job in enumerate(jobs)}
        rows = [
            {
                "rule": job.rule.name,
                "wildcards": dict(job.wildcards_dict),
                "deps": sorted(index[d] for d in dag.dependencies[job] if d in index),
            }
            for job in jobs
        ]
    out.write_text(json.dumps({"jobs": rows}), encoding="utf-8")


if __name__ == "__main__":
    _build(Path(sys.argv[1]), Path(sys.argv[2]))
