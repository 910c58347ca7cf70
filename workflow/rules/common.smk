# Snakemake glue only: validate the config, build the plan (cqabench.planner: matrix expansion,
# cross-reference checks, every path) that the rules read as `PLAN`, and add what is Snakemake's:
# the jobs' shell prefix and interpreters, their resources (`job_resources`), onstart checks.
import os
import shlex
import sys
from pathlib import Path

from snakemake.utils import validate

# The package of this checkout, for planning (it need not be installed).
sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from cqabench.planner import needed_models as models_stage
from cqabench.planner.config_files import check_files as check_config_files
from cqabench.planner.config_files import check_schema as check_config_schema
from cqabench.common.errors import ConfigError
from cqabench.common.job_memory import start_run
from cqabench.common.layout import ONNX_CACHE_DIR
from cqabench.retrieval.job_resources import job_settings, job_threads
from cqabench.generation.llm.convert import CONVERTER_VERSION
from cqabench.planner import (
    Cell,
    GEN_ENVS,
    SUFFIX_KIND as _SUFFIX_KIND,
    Environment,
    Plan,
    as_arg,
    as_json,
)
from cqabench.planner import names_pattern as _names, one_of as _one_of
from cqabench.common.provenance import config_hash
from cqabench.planner import resolved_config

# Snakemake's YAML loader keeps the last of two equal keys silently: re-read every config file
# strictly first (cqabench.planner.config_files), so a duplicated key stops here with its file and line.
try:
    check_config_files(workflow.configfiles)
    # one line naming the key, not Snakemake's schema dump (and what to do instead of --config)
    check_config_schema(
        config,
        Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml",
        dict(workflow.config_settings.config),
    )
except ConfigError as exc:
    sys.exit(f"cqabench: {exc}")
validate(config, schema="../schemas/config.schema.yaml")
# Every fact-table row records the config of the run that built the table (canonical JSON, so
# key order and comments do not change it); docs/report.md, "Provenance columns".
CONFIG_HASH = config_hash(config)

# Rules call `cqabench`, defined for every job's shell as the package of this checkout run with
# the Python of the environment the job runs in: the project venv's (the one running Snakemake),
# or a per-rule conda env's under `--sdm conda` (those envs hold dependencies only). Cluster jobs
# see the same checkout on the shared filesystem.
_CONDA = any(
    "conda" in str(m).lower() for m in workflow.deployment_settings.deployment_method
)
_PYTHON = "python" if _CONDA else shlex.quote(sys.executable)
_PACKAGE_DIR = shlex.quote(str(Path(workflow.basedir) / "workflow"))
# `python -m cqabench` runs the CLI (cqabench.common.job_memory.run_job) so that Snakemake's retries redo only out-of-memory failures:
# a job that failed otherwise stops at once on its retry (CQABENCH_RUN_ID names this run).
start_run(workflow.is_main_process)

# The vLLM environments: the CPU build (`make setup`: .venv-vllm) for LLMs with device: cpu, the
# CUDA build (`make setup-gpu`: .venv-vllm-gpu) for LLMs on a GPU; CQABENCH_VLLM_PYTHON replaces
# both, conda runs use envs/vllm.yaml instead. Planning never reads them: each vLLM job checks its
# interpreter when it starts (`vllm_check`), a run checks those of its jobs in `onstart:`.
# (Beside the real checkout, also when the Snakefile is reached through a symlink.)
_CHECKOUT = Path(workflow.main_snakefile).resolve().parent
VLLM_PYTHON = os.environ.get("CQABENCH_VLLM_PYTHON") or str(
    _CHECKOUT / ".venv-vllm" / "bin" / "python"
)
VLLM_GPU_PYTHON = os.environ.get("CQABENCH_VLLM_PYTHON") or str(
    _CHECKOUT / ".venv-vllm-gpu" / "bin" / "python"
)

_VLLM_PYTHONS = dict(vllm_python=VLLM_PYTHON, vllm_gpu_python=VLLM_GPU_PYTHON)

try:
    PLAN = Plan(
        config,
        Environment(root=Path("."), python=_PYTHON, conda=_CONDA, **_VLLM_PYTHONS),
    )
except ConfigError as exc:
    # One message naming every broken key, no traceback: nothing has run, nothing to clean up.
    sys.exit(f"cqabench: {exc}")
# An item cache at the old default (results/cache/llm): its answers would be asked again.
if PLAN.legacy_cache_problem():
    sys.exit(f"cqabench: {PLAN.legacy_cache_problem()}")

# The resolved config the jobs read (--config), written here, before the DAG, by the main
# process only, and only when its text differs: no rule makes it, so a target asked for after a
# config change is built by the first command, and a stale or hand-edited file is never used
# (cqabench.planner.resolved_config; every job also checks the sha256 exported below).
CONFIG_FILE = PLAN.config_file
CONFIG_TEXT = resolved_config.text_of(config)
# Snakemake's DAG built for the estimate (cqabench.estimate.dag, a child process, possibly inside
# a running workflow) only plans: it writes the file when it is missing, never over a run's.
_PLANNING_ONLY = (
    bool(os.environ.get("CQABENCH_ESTIMATE_DAG")) and Path(CONFIG_FILE).exists()
)
if workflow.is_main_process and not _PLANNING_ONLY:
    try:
        _had_config_file = Path(CONFIG_FILE).exists()
        if resolved_config.refresh(CONFIG_FILE, config) and _had_config_file:
            print(
                f"cqabench: {CONFIG_FILE} rewritten from this run's config (it held another one)",
                file=sys.stderr,
            )
    except ConfigError as exc:
        sys.exit(f"cqabench: {exc}")

# The interpreters by role (Plan.python_role): a job's shell names the role's variable, set by
# the prefix below, so a moved checkout or another venv path reruns nothing.
PYTHON_OF_ROLE = {
    "project": _PYTHON,
    "vllm": shlex.quote(VLLM_PYTHON),
    "vllm_gpu": shlex.quote(VLLM_GPU_PYTHON),
}
PYTHON_VARS = {role: f"CQABENCH_{role.upper()}_PYTHON_PATH" for role in PYTHON_OF_ROLE}


def python_word(llm):
    """The shell word of the interpreter of an LLM's generation jobs: its role's variable
    (`python` itself under conda, where each job's env provides it)."""
    role = PLAN.python_role(llm)
    return "python" if role == "conda" else f'"${PYTHON_VARS[role]}"'


# (The prefix is formatted like a shell command, hence the doubled braces.) It is no rerun
# trigger (Snakemake compares a rule's shell text and params): what differs between checkouts
# and runs, the interpreters' paths and the config's sha256, is exported here, never in params.
# CQABENCH_PYTHON, when a job sets it, runs the package with another interpreter (vLLM jobs do,
# vLLM needs transformers 5 and lives in its own environment: `python_word`).
# CQABENCH_EXPORT_CACHE: one ONNX export of an encoder serves the indexes of every corpus and config.
shell.prefix(
    (
        'set -euo pipefail; cqabench() {{ PYTHONPATH=%s "${{CQABENCH_PYTHON:-%s}}" -m cqabench "$@"; }}; '
        # the vLLM interpreter check that starts every generation job (`vllm_check`)
        'cqabench_vllm_check() {{ PYTHONPATH=%s %s -m cqabench.generation.vllm_env "$@"; }}; '
        'export CQABENCH_EXPORT_CACHE="${{CQABENCH_EXPORT_CACHE:-%s}}"; '
        # open-book jobs in vLLM's environment search the tool corpus through this one (Java BM25)
        'export CQABENCH_SEARCH_PYTHON="${{CQABENCH_SEARCH_PYTHON:-%s}}"; '
        # fetched hub checkpoints (config key models_dir; cqabench.models.store): jobs load them from here
        "export CQABENCH_MODELS_DIR=%s; "
        # the interpreter of each role (`python_word`): generation jobs name the role, not the path
        + "".join(f"export {var}=%s; " for var in PYTHON_VARS.values())
        # the resolved config this run planned: a job refuses another (resolved_config.verify)
        + f"export {resolved_config.ENV_FILE}=%s {resolved_config.ENV_SHA256}=%s; "
    )
    % (
        _PACKAGE_DIR,
        _PYTHON,
        _PACKAGE_DIR,
        _PYTHON,
        shlex.quote(ONNX_CACHE_DIR),
        _PYTHON,
        shlex.quote(models_stage.models_dir_of(config)),
        *(PYTHON_OF_ROLE[role] for role in PYTHON_VARS),
        shlex.quote(CONFIG_FILE),
        resolved_config.sha256_of(CONFIG_TEXT),
    )
)

# Hub checkpoints: jobs run offline and load them only from models_dir/<org>/<name>, filled by
# `cqabench fetch-models` or the fetch_models rule on a node with network (cqabench.planner.needed_models).
# A model not there is named at planning time; a real run whose jobs load one stops in onstart
# (check_models).
# (Snakemake sets its targets only after reading the Snakefile: the command line says whether
# this run is the fetch itself.)
_MISSING_MODELS = models_stage.missing(PLAN)
if (
    _MISSING_MODELS
    and workflow.is_main_process
    and models_stage.FETCH_RULE not in sys.argv[1:]
):
    print(
        "cqabench: "
        + models_stage.missing_message(PLAN, _MISSING_MODELS, workflow.configfiles),
        file=sys.stderr,
    )

# Every rule's mem_mb, runtime and gpu are its job's estimate (cqabench.estimate: measured
# per-item costs in benchmarks/rates.yaml x the job's items, with margins; docs/cluster.md).
from cqabench.estimate.model import REFERENCE_NODE, JobCosts
from cqabench.estimate.rates import RATES_FILE
from cqabench.estimate.rule_resources import requested, rule_resources
from cqabench.estimate.run import write_estimate

try:
    _COSTS = JobCosts(PLAN, strict=False)
except ConfigError as exc:
    # A broken benchmarks/rates.yaml (every rule's resources read it): one line naming the file
    # and key, as for a broken config, not a traceback.
    sys.exit(f"cqabench: {exc}")


def job_resources(rule, gpu=False, retries=False):
    """What `resources: **job_resources("<rule>", ...)` gives a rule: mem_mb and runtime, and
    with `gpu` the gpu count, from its job's estimate; with `retries` (the rules that declare
    MEMORY_RETRIES) mem_mb doubles per attempt (cqabench.estimate.rule_resources)."""
    return rule_resources(_COSTS, rule, gpu=gpu, retries=retries)


def retrieval_threads(rule, w):
    """The CPU threads a retrieval job declares: its retriever's `threads`, else 8 on a GPU
    job, else 1 (cqabench.retrieval.job_resources); SLURM gives that many CPUs."""
    gpu = requested(_COSTS, rule, w)["gpu"]
    return job_threads(PLAN.retriever_configs[w.retriever], gpu)


def retrieval_priority(rule, w):
    """Jobs that declare several threads (BM25's JVM, a GPU job's CPUs) start before one-thread
    jobs: on a few local cores such a job waits for a moment when all of its cores are free, and
    the sample's short BM25 jobs then ran one by one at the end of the retrieval stage, with a
    core idle (about a minute of make run). Scheduling order only; on a cluster, submission order.
    """
    return 1 if retrieval_threads(rule, w) > 1 else 0


def retrieval_settings(rule, w):
    """The retriever settings a retrieval job's command gets: with the declared threads."""
    gpu = requested(_COSTS, rule, w)["gpu"]
    return as_arg(job_settings(PLAN.retriever_configs[w.retriever], gpu))


# The two roots every output path starts with (the results tree, its report folder), and the
# report's plots with their captions (workflow/report/*.rst); everything else the rules read from
# the plan itself (`PLAN.<name>`, cqabench.planner).
RESULTS = PLAN.results
REPORT_DIR = PLAN.report_dir
PLOTS = {
    "k_effect": "k_effect.rst",
    "retriever_heatmap": "heatmap.rst",
    "tanq_skills": "skills.rst",
}


def _cell_inputs(w):
    """The generate rule's inputs, the batch manifest ancient: only its existence orders the
    cell after the batch; what reruns the cell is its own inputs and spec (Plan.cell_spec).
    """
    inputs = PLAN.cell_inputs(w)
    if "batch" in inputs:
        inputs["batch"] = ancient(inputs["batch"])
    return {**inputs, "config": ancient(CONFIG_FILE)}


# A generation cell's folder, its wildcards in braces: the rules' paths put it in f-strings.
CELL_DIR = Cell.PATTERN

# Cells under results/ that the config can no longer make (an LLM dropped from generation.llms, a
# k beyond a lowered retrieval.k) are left out of the fact table: say so once, naming each.
if workflow.is_main_process and PLAN.uncounted_cells():
    _left_out = PLAN.uncounted_cells()
    print(
        f"cqabench: {len(_left_out)} existing cell(s) under {RESULTS}/ are not counted "
        "(delete their folders, or make the config allow them):",
        file=sys.stderr,
    )
    for _folder, _why in _left_out[:10]:
        print(f"  {_folder}: {'; '.join(_why)}", file=sys.stderr)
    if len(_left_out) > 10:
        print(f"  ... and {len(_left_out) - 10} more", file=sys.stderr)


def report_targets():
    return (
        [
            f"{RESULTS}/metrics.parquet",
            f"{RESULTS}/per_question.parquet",
            f"{REPORT_DIR}/tables/summary.json",
        ]
        + [
            PLAN.table_file(t, ext)
            for t in PLAN.expected_table_ids()
            for ext in ("md", "html")
        ]
        + [f"{REPORT_DIR}/plots/{name}.png" for name in PLOTS]
        + [f"{REPORT_DIR}/estimate/estimate.csv", f"{REPORT_DIR}/index.html"]
    )


# the only rules whose jobs can call an LLM API
API_RULES = ("generate", "generate_batch")


def check_api_keys():
    """Called from `onstart:`: a missing API key stops a real run before any job starts, but only
    a run that will call the API: the LLMs checked are those of the generate and generate_batch
    jobs Snakemake is about to run, so data, retrieval and a retrieval table need no key.

    Planning (`-n`, `--lint`, `--touch`) needs no credentials; the key itself is never read
    into a log, only whether its variable is set. `cqabench generate` checks again at job start.
    """
    llms = {
        job.wildcards_dict.get("llm")
        for job in workflow.dag.needrun_jobs()
        if job.rule.name in API_RULES
    }
    missing = PLAN.missing_api_keys(os.environ, llms)
    for name, env in missing:
        print(
            f"llms.{name}: backend openai reads its API key from ${env}, which is not set",
            file=sys.stderr,
        )
    if missing:
        raise SystemExit(1)


def check_models():
    """Called from `onstart:`: a run whose jobs load a hub model that is not in models_dir stops
    before any job starts (each such job would fail offline), naming the models and the fetch.
    """
    if workflow.touch:  # --touch runs no job
        return
    jobs = [(job.rule.name, job.wildcards_dict) for job in workflow.dag.needrun_jobs()]
    absent = models_stage.missing(PLAN, only=models_stage.needed_by_jobs(PLAN, jobs))
    if absent:
        print(
            "cqabench: "
            + models_stage.missing_message(PLAN, absent, workflow.configfiles),
            file=sys.stderr,
        )
        raise SystemExit(1)


def vllm_check(wildcards):
    """The command that starts every generation job: cqabench.generation.vllm_env checks a vLLM LLM's
    interpreter (missing, without vllm, or the CPU build for a GPU job: one line, on stderr and in
    the job's log, saying what to build or set; exit 1) and passes other backends at once. Run by
    the job's own Python where the job runs (a cluster node, a conda env); the rule adds --log.
    """
    llm = wildcards.llm
    spec = PLAN.llms[llm]
    args = ["--backend", spec["backend"]]
    args += ["--device", str(spec["device"])] if "device" in spec else []
    args += ["--gpu"] if PLAN.uses_gpu(llm) else []
    # the interpreter as its role's variable (`python_word`): no checkout path in the job's params
    return "cqabench_vllm_check --llm %s --python %s %s" % (
        shlex.quote(llm),
        python_word(llm),
        " ".join(map(shlex.quote, args)),
    )


def check_vllm_environments():
    """Called from `onstart:`: the interpreters of the vLLM jobs about to run, checked as each job
    checks its own (`vllm_check`), so a run stops before its first job rather than at its first
    vLLM job, hours of retrieval later. Planning (`-n`, `--lint`, `--report`) never gets here;
    `--touch` runs no job; under `--sdm conda` the jobs' conda envs are checked by the jobs.
    """
    if _CONDA or workflow.touch:
        return
    from cqabench.generation.vllm_env import problem

    wanted = {}
    for job in workflow.dag.needrun_jobs():
        llm = job.wildcards_dict.get("llm")
        if job.rule.name in ("generate", "generate_batch") and llm in PLAN.llms:
            if PLAN.llms[llm]["backend"] == "vllm":
                wanted[llm] = (PLAN.python_for(llm), PLAN.uses_gpu(llm))
    found = [
        problem(llm, python, gpu, str(PLAN.llms[llm].get("device", "")))
        for llm, (python, gpu) in sorted(wanted.items())
    ]
    for line in filter(None, found):
        print(f"cqabench: {line}", file=sys.stderr)
    if any(found):
        raise SystemExit(1)


def check_cluster_profile():
    """Called from `onstart:` (once the executor is known): stop a SLURM run before any job is
    submitted when profiles/default is applied too.

    profiles/default is Snakemake's *workflow profile*: every run from this checkout loads it
    unless `--workflow-profile` is given, and it wins over `--profile` key by key, so on SLURM its
    workstation values (default-resources, the gpu=1 pool, latency-wait 5) would silently replace
    profiles/slurm's account, GPU model and sizes (docs/cluster.md).
    """
    plugin = workflow.executor_plugin
    if plugin is None or plugin.name != "slurm":
        return
    # Whatever names it (`profiles/default`, `default`, a path to its config.yaml, or no flag at
    # all): what counts is the profile Snakemake applies (cqabench.planner.cluster_profile).
    from cqabench.planner.cluster_profile import cluster_profile_problem

    cwds = dict.fromkeys(Path(d) for d in (os.getcwd(), os.environ.get("PWD")) if d)
    problem = cluster_profile_problem(
        sys.argv[1:], Path(workflow.main_snakefile), list(cwds)
    )
    if problem is None:
        return
    print(problem, file=sys.stderr)
    raise SystemExit(1)


wildcard_constraints:
    dataset=_one_of(PLAN.datasets),
    split="train|dev|test",
    serialization="pipe|markdown|linear",
    corpus=_one_of(set(PLAN.corpora) | set(PLAN.pooled) | set(PLAN.tool_corpora)),
