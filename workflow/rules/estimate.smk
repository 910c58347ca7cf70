# Estimate: what this configuration's jobs cost, from the config alone, before any runs.


# The bill, estimated from the config alone (cqabench.estimate; the
# makespan on the reference node, 8 GPUs and 64 cores): the report page puts it beside each
# rule's measured benchmark: files. Its jobs are Snakemake's own DAG of the config, so it runs
# where Snakemake runs (a localrule in Snakemake's environment, which has Snakemake); seconds to
# a minute, reads no result.
rule estimate:
    input:
        # a rate written by a benchmark (--write-rates) re-estimates; relative, as every input, so a
        # moved checkout plans nothing
        rates=os.path.relpath(RATES_FILE),
        config=ancient(CONFIG_FILE),
    output:
        csv=f"{REPORT_DIR}/estimate/estimate.csv",
        parquet=f"{REPORT_DIR}/estimate/estimate.parquet",
        jobs=f"{REPORT_DIR}/estimate/estimate_jobs.parquet",
        json=f"{REPORT_DIR}/estimate/estimate.json",
    log:
        f"{RESULTS}/logs/report/estimate.log",
    benchmark:
        f"{RESULTS}/benchmarks/estimate.tsv"
    localrule: True
    resources:
        **job_resources("estimate"),
    params:
        out_dir=lambda w, output: Path(output.json).parent,
        gpus=REFERENCE_NODE["gpus"],
        cores=REFERENCE_NODE["cores"],
        config_hash=CONFIG_HASH,  # it reads the whole config: a changed config re-estimates
    run:
        write_estimate(
            input.config,
            input.rates,
            params.out_dir,
            params.gpus,
            params.cores,
            log[0],
        )
