# cqabench: raw → canonical Parquet → indexes → runs → generation → metrics → fact table + report.
# `snakemake --cores all` runs config/config.yaml (the embedded default, offline, CPU);
# `snakemake --configfile config/dexter.yaml` is the paper's full reproduction.
import sys

from snakemake.utils import min_version

min_version("9.0")


# The embedded default unless a config file is given: `--configfile` replaces it rather than
# being merged into it, so no sample-only key leaks into the paper's reproduction.
if not config:

    configfile: "config/config.yaml"


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
    if any(a == "--workflow-profile" or a.startswith("--workflow-profile=") for a in sys.argv):
        return
    print(
        "the SLURM executor runs with profiles/default applied as Snakemake's workflow profile, whose "
        "workstation values (default-resources, resources, latency-wait) override profiles/slurm's; "
        "run: snakemake --workflow-profile none --profile profiles/slurm ...",
        file=sys.stderr,
    )
    raise SystemExit(1)


# The landing page of `snakemake --report`: what was run, and where the report page is.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/retrieval.smk"
include: "workflow/rules/generation.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        data_targets(),
        retrieval_targets(),
        generation_targets(),
        evaluation_targets(),
        report_targets(),
    default_target: True
