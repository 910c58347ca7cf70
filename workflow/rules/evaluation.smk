# Answer evaluation: one job per generation cell, scored with the dataset's metrics.


rule evaluate_generation:
    input:
        # predictions, summary, queries, answers; a cell the config cannot make is refused by path
        unpack(PLAN.evaluation_inputs),
        config=ancient(CONFIG_FILE),
    output:
        metrics=f"{RESULTS}/metrics/{CELL_DIR}/metrics.json",
        per_question=f"{RESULTS}/metrics/{CELL_DIR}/per_question.parquet",
    log:
        f"{RESULTS}/logs/evaluate_generation/{CELL_DIR}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate_generation/{CELL_DIR}.tsv"
    wildcard_constraints:
        retriever=CELL_PART,
        llm=CELL_PART,
        prompt=CELL_PART,
        setting=CELL_PART,
        k=CELL_PART,
    conda:
        "../../envs/evaluation.yaml"
    resources:
        **job_resources("evaluate_generation"),
    params:
        # what the job reads from --config (Plan.generation_cell): a change rescores the cell
        cell=lambda w: as_arg(PLAN.generation_cell(w)),
        label=Cell.label_of,
    shell:
        "cqabench evaluate-generation --dataset {wildcards.dataset:q} --predictions {input.predictions:q} "
        "--queries {input.queries:q} --answers {input.answers:q} --summary {input.summary:q} "
        "--config {input.config:q} --cell {params.label:q} "
        "--out-json {output.metrics:q} --out-per-question {output.per_question:q} > {log:q} 2>&1"
