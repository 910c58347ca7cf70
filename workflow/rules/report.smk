# Report stage: every cell's metrics.json -> fact tables -> paper-layout tables and plots -> the
# report page (results/<name>/report/index.html, one self-contained file). `snakemake --report
# report.html` bundles the outputs marked report(...) with the captions in workflow/report/*.rst
# (each paper table's caption is written by its table_<id> job). Helpers and targets: cqabench.planner.


rule aggregate:
    input:
        metrics=lambda w: PLAN.metric_files(),
        queries=lambda w: [
            PLAN.data_path(ds, split, "queries")
            for ds in PLAN.datasets
            for split in PLAN.splits(ds)
        ],
        config=ancient(CONFIG_FILE),
    output:
        # Not report(): Snakemake shows Parquet as a blank text/plain page; report_page writes the
        # CSV and HTML views of it that the report bundles instead.
        metrics=f"{RESULTS}/metrics.parquet",
        per_question=f"{RESULTS}/per_question.parquet",
    log:
        f"{RESULTS}/logs/report/aggregate.log",
    benchmark:
        f"{RESULTS}/benchmarks/aggregate.tsv"
    conda:
        "../../envs/evaluation.yaml"
    resources:
        **job_resources("aggregate"),
    params:
        results=lambda w, output: Path(output.metrics).parent,
        # the run's config: a changed config re-aggregates (cheap) without rerunning the cells
        config_hash=CONFIG_HASH,
    shell:
        "cqabench aggregate --config {input.config:q} --results-dir {params.results:q} --data-dir {params.results:q}/data "
        "--out-metrics {output.metrics:q} --out-per-question {output.per_question:q} --config-hash {params.config_hash} "
        "2> {log:q}"


# One target rule per paper table, `table_<id>` (`snakemake table_dexter_table2_ndcg10`, or the
# file results/<name>/report/tables/<id>.md): it reads only the metric files of the cells that table
# needs (Plan.table_inputs, cqabench.planner.table_targets), so DEXTER's Tables 2 and 7 plan data and
# retrieval alone. Its numbers are the ones the whole fact table gives for that table.
for _table in PLAN.expected_table_ids():

    rule:
        name:
            f"table_{_table}"
        input:
            unpack(lambda w, t=_table: PLAN.table_inputs(t)),
            # the run's setup per dataset (split, relevance, questions, corpus): each cell's comparability
            # (ancient: the config's hash in params reruns the table, not the file's mtime)
            config=ancient(CONFIG_FILE),
        output:
            md=PLAN.table_file(_table, "md"),
            # the table's own caption (what it compares, n, split, unit, caveat), written by the job
            caption=PLAN.table_file(_table, "caption.rst"),
            html=report(
                PLAN.table_file(_table, "html"),
                caption=f"../../{PLAN.table_file(_table, 'caption.rst')}",
                category="Tables",
                labels={"table": _table},
            ),
            summary=PLAN.table_file(_table, "summary.json"),
        log:
            f"{RESULTS}/logs/report/table_{_table}.log",
        benchmark:
            f"{RESULTS}/benchmarks/table_{_table}.tsv"
        conda:
            "../../envs/evaluation.yaml"
        resources:
            **job_resources(f"table_{_table}"),
        params:
            table=_table,
            out_dir=lambda w, output: Path(output.md).parent,
            results=lambda w, output: Path(output.md).parents[2],  # <results>/report/tables/<id>.md
            run=shlex.quote(str(config.get("name", "unnamed"))),
            paper_data="--paper-data" if PLAN.paper_data else "",
            config_hash=CONFIG_HASH,  # it reads the whole config: a changed config rewrites it
        shell:
            "cqabench paper-table --table {params.table} --expected {input.expected:q} "
            "--results-dir {params.results:q} --data-dir {params.results:q}/data "
            "--out-dir {params.out_dir:q} --run {params.run} {params.paper_data} --config {input.config:q} "
            "> {log:q} 2>&1"


# answers_by_setting (closed-book vs RAG@k vs oracle, with intervals and corrected paired tests)
# retrieval_vs_baseline (every run vs BM25 per dataset, one family) and retrieval_pipelines (fused and
# reranked runs vs BM25 on nDCG@10 and Recall@100) read the fact tables;
# summary.json gathers the paper tables' summaries. report.significance picks the correction. Cells the
# configuration does not plan (Plan.not_planned_cells(), cqabench.planner) are listed with their reason.
rule report_tables:
    input:
        metrics=f"{RESULTS}/metrics.parquet",
        per_question=f"{RESULTS}/per_question.parquet",
        summaries=[
            PLAN.table_file(t, "summary.json") for t in PLAN.expected_table_ids()
        ],
        config=ancient(CONFIG_FILE),
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
        pipelines_md=f"{REPORT_DIR}/tables/retrieval_pipelines.md",
        pipelines_json=f"{REPORT_DIR}/tables/retrieval_pipelines.json",
        pipelines_html=report(
            f"{REPORT_DIR}/tables/retrieval_pipelines.html",
            caption="../report/retrieval_pipelines.rst",
            category="Tables",
            labels={"table": "retrieval_pipelines"},
        ),
    log:
        f"{RESULTS}/logs/report/tables.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_tables.tsv"
    conda:
        "../../envs/evaluation.yaml"
    resources:
        **job_resources("report_tables"),
    params:
        out_dir=lambda w, output: Path(output.summary).parent,
        # what the job reads from --config (Plan.not_planned_cells): a change rewrites the tables
        not_planned=lambda w: as_arg(PLAN.not_planned_cells()),
        correction=PLAN.significance["correction"],
        alpha=PLAN.significance["alpha"],
        baseline=PLAN.significance["baseline"],
    shell:
        "cqabench report-tables --metrics {input.metrics:q} --per-question {input.per_question:q} "
        "--table-summaries {input.summaries:q} --out-dir {params.out_dir:q} --not-planned-from {input.config:q} "
        "--correction {params.correction} --alpha {params.alpha} --baseline {params.baseline:q} > {log:q} 2>&1"


rule report_plots:
    input:
        metrics=f"{RESULTS}/metrics.parquet",
        per_question=f"{RESULTS}/per_question.parquet",
        expected=PLAN.expected_files,
        # the run's setup: a heatmap cell its paper table marks not comparable gets no Δ
        config=CONFIG_FILE,
    output:
        **{
            name: report(
                f"{REPORT_DIR}/plots/{name}.png",
                caption=f"../report/{caption}",
                category="Plots",
            )
            for name, caption in PLOTS.items()
        },
        # DEXTER Figure 2 as SVG too (the report page embeds it); figures.json says per figure
        # whether it has data marks, so the page prints why instead of showing an empty image
        k_effect_svg=report(
            f"{REPORT_DIR}/plots/k_effect.svg",
            caption="../report/k_effect.rst",
            category="Plots",
        ),
        figures=f"{REPORT_DIR}/plots/figures.json",
    log:
        f"{RESULTS}/logs/report/plots.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_plots.tsv"
    conda:
        "../../envs/evaluation.yaml"
    resources:
        **job_resources("report_plots"),
    params:
        k_values=" ".join(str(k) for k in PLAN.gen_k),
    shell:
        "cqabench report-plots --metrics {input.metrics:q} --per-question {input.per_question:q} "
        "--k-effect {output.k_effect:q} --k-effect-svg {output.k_effect_svg:q} --heatmap {output.retriever_heatmap:q} "
        "--skills {output.tanq_skills:q} --k-values {params.k_values} --expected {input.expected:q} "
        "--config {input.config:q} --manifest {output.figures:q} > {log:q} 2>&1"


# One page a researcher can publish: what was run, the paper tables, Figure 2, the heatmap, TANQ
# breakdowns, parse rates, answers by setting, wall time / peak RSS per rule (benchmark: files)
# and the fact table as CSV + HTML. It takes the BEIR exports as input only so that it runs last
# and its benchmark table covers every rule. Logic: cqabench.report.page.
rule report_page:
    input:
        metrics=f"{RESULTS}/metrics.parquet",
        summary=f"{REPORT_DIR}/tables/summary.json",
        tables=[PLAN.table_file(t, "html") for t in PLAN.expected_table_ids()],
        answers=f"{REPORT_DIR}/tables/answers_by_setting.json",
        answers_html=f"{REPORT_DIR}/tables/answers_by_setting.html",
        retrieval_html=f"{REPORT_DIR}/tables/retrieval_vs_baseline.html",
        pipelines_html=f"{REPORT_DIR}/tables/retrieval_pipelines.html",
        plots=[f"{REPORT_DIR}/plots/{name}.png" for name in PLOTS],
        k_effect_svg=f"{REPORT_DIR}/plots/k_effect.svg",
        figures=f"{REPORT_DIR}/plots/figures.json",
        expected=PLAN.expected_files,
        exports=lambda w: PLAN.data_targets(),
        estimate=f"{REPORT_DIR}/estimate/estimate.json",
        estimate_jobs=f"{REPORT_DIR}/estimate/estimate_jobs.parquet",
        config=ancient(CONFIG_FILE),
    output:
        page=report(
            f"{REPORT_DIR}/index.html",
            caption="../report/page.rst",
            category="Report page",
        ),
        # The full views (every column) are linked from the page; `snakemake --report` bundles the
        # compact view, whose data URI stays under Chromium's 2 MiB limit (a longer one shows blank;
        # Snakemake shows a CSV as nothing at all). cqabench.report.fact_views.
        csv=f"{REPORT_DIR}/metrics.csv",
        html=f"{REPORT_DIR}/fact_table.html",
        view=report(
            f"{REPORT_DIR}/fact_table_view.html",
            caption="../report/fact_table.rst",
            category="Fact tables",
        ),
    log:
        f"{RESULTS}/logs/report/page.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_page.tsv"
    conda:
        "../../envs/evaluation.yaml"
    resources:
        **job_resources("report_page"),
    params:
        tables=" ".join(PLAN.expected_table_ids()),
        rules=lambda w: " ".join(
            sorted(r.name for r in workflow.rules if r.name != "all")
        ),
        tables_dir=lambda w, input: Path(input.summary).parent,
        plots_dir=lambda w, input: Path(input.plots[0]).parent,
        benchmarks_dir=f"{RESULTS}/benchmarks",
        # Wall times of jobs that ran before their rule declared benchmark: (no memory there).
        snakemake_logs=".snakemake/log",
        estimate_dir=lambda w, input: Path(input.estimate).parent,
        config_hash=CONFIG_HASH,  # it reads the whole config: a changed config rewrites the page
    shell:
        "cqabench report-page --config {input.config:q} --metrics {input.metrics:q} "
        "--tables-dir {params.tables_dir:q} --plots-dir {params.plots_dir:q} --table-ids {params.tables} "
        "--expected {input.expected:q} --benchmarks-dir {params.benchmarks_dir:q} --rules {params.rules} "
        "--snakemake-logs {params.snakemake_logs:q} --estimate-dir {params.estimate_dir:q} "
        "--fact-csv {output.csv:q} --fact-html {output.html:q} --fact-report-html {output.view:q} "
        "--out {output.page:q} > {log:q} 2>&1"
