# cqabench: raw → canonical Parquet → indexes → runs → generation → metrics → fact table + report.
# `snakemake --cores all` runs config/config.yaml (the embedded default, offline, CPU);
# `snakemake --configfile config/dexter.yaml` is the paper's full reproduction.
from snakemake.utils import min_version

min_version("9.0")


# The embedded default unless a config file is given: `--configfile` replaces it rather than
# being merged into it, so no sample-only key leaks into the paper's reproduction.
if not config:

    configfile: "config/config.yaml"


# The landing page of `snakemake --report`: what was run, and where the report page is.
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/retrieval.smk"
include: "workflow/rules/generation.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/estimate.smk"
include: "workflow/rules/models.smk"


rule all:
    default_target: True
    input:
        PLAN.data_targets(),
        PLAN.retrieval_targets(),
        PLAN.generation_targets(),
        PLAN.evaluation_targets(),
        report_targets(),
