# Report stage: every cell's metrics.json -> fact tables -> paper-layout tables and plots.
# `snakemake --report report.html` bundles the outputs marked report(...) with the captions in
# workflow/report/*.rst. Helpers and target lists are in common.smk.


rule aggregate:
    input:
        metrics=lambda w: _metric_files(),
        queries=lambda w: [data_path(ds, split, "queries") for ds in DATASETS for split in splits(ds)],
    output:
        metrics=report(f"{RESULTS}/metrics.parquet", caption="../report/fact_table.rst", category="Fact tables"),
        per_question=f"{RESULTS}/per_question.parquet",
    params:
        results=lambda w, output: Path(output.metrics).parent,
        # the run's config: a changed config re-aggregates (cheap) without rerunning the cells
        config_hash=CONFIG_HASH,
    log:
        f"{RESULTS}/logs/report/aggregate.log",
    conda:
        "../../envs/evaluation.yaml"
    shell:
        "cqabench aggregate --metrics {input.metrics:q} --results-dir {params.results:q} --data-dir {params.results:q}/data "
        "--out-metrics {output.metrics:q} --out-per-question {output.per_question:q} --config-hash {params.config_hash} "
        "2> {log:q}"


# The paper tables, answers_by_setting (closed-book vs RAG@k vs oracle, with intervals and
# corrected paired tests) and retrieval_vs_baseline (every run vs BM25 per dataset, one family)
# come from one job: all read the same fact tables. report.significance picks the correction. Cells the
# configuration does not plan (not_planned_cells(), common.smk) are listed with their reason.
rule report_tables:
    input:
        metrics=f"{RESULTS}/metrics.parquet",
        per_question=f"{RESULTS}/per_question.parquet",
        expected=EXPECTED_FILES,
    output:
        summary=f"{REPORT_DIR}/tables/summary.json",
        answers_md=f"{REPORT_DIR}/tables/answers_by_setting.md",
        answers_json=f"{REPORT_DIR}/tables/answers_by_setting.json",
        answers_html=report(
            f"{REPORT_DIR}/tables/answers_by_setting.html",
            caption="../report/answers.rst",
            category="Tables",
            labels={"table": "answers_by_setting"},
        ),
        retrieval_md=f"{REPORT_DIR}/tables/retrieval_vs_baseline.md",
        retrieval_json=f"{REPORT_DIR}/tables/retrieval_vs_baseline.json",
        retrieval_html=report(
            f"{REPORT_DIR}/tables/retrieval_vs_baseline.html",
            caption="../report/retrieval_significance.rst",
            category="Tables",
            labels={"table": "retrieval_vs_baseline"},
        ),
        markdown=[f"{REPORT_DIR}/tables/{t}.md" for t in TABLE_IDS],
        html=[
            report(
                f"{REPORT_DIR}/tables/{t}.html",
                caption="../report/tables.rst",
                category="Tables",
                labels={"table": t},
            )
            for t in TABLE_IDS
        ],
    params:
        out_dir=lambda w, output: Path(output.summary).parent,
        not_planned=lambda w: as_arg(not_planned_cells()),
        correction=SIGNIFICANCE["correction"],
        alpha=SIGNIFICANCE["alpha"],
        baseline=SIGNIFICANCE["baseline"],
    log:
        f"{RESULTS}/logs/report/tables.log",
    conda:
        "../../envs/evaluation.yaml"
    shell:
        "cqabench report-tables --metrics {input.metrics:q} --per-question {input.per_question:q} "
        "--expected {input.expected:q} --out-dir {params.out_dir:q} --not-planned {params.not_planned} "
        "--correction {params.correction} --alpha {params.alpha} --baseline {params.baseline:q} > {log:q} 2>&1"


rule report_plots:
    input:
        metrics=f"{RESULTS}/metrics.parquet",
        per_question=f"{RESULTS}/per_question.parquet",
    output:
        **{
            name: report(f"{REPORT_DIR}/plots/{name}.png", caption=f"../report/{caption}", category="Plots")
            for name, caption in PLOTS.items()
        },
    params:
        k_values=" ".join(str(k) for k in GEN_K),
    log:
        f"{RESULTS}/logs/report/plots.log",
    conda:
        "../../envs/evaluation.yaml"
    shell:
        "cqabench report-plots --metrics {input.metrics:q} --per-question {input.per_question:q} "
        "--k-effect {output.k_effect:q} --heatmap {output.retriever_heatmap:q} "
        "--skills {output.tanq_skills:q} --k-values {params.k_values} 2> {log:q}"
