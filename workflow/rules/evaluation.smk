# Answer evaluation: one job per generation cell, scored with the dataset's metrics.


rule evaluate_generation:
    input:
        predictions=f"{RESULTS}/generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/predictions.parquet",
        summary=f"{RESULTS}/generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/summary.json",
        queries=data_path("{dataset}", "{split}", "queries"),
        answers=data_path("{dataset}", "{split}", "answers"),
    output:
        metrics=f"{RESULTS}/metrics/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/metrics.json",
        per_question=f"{RESULTS}/metrics/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/per_question.parquet",
    log:
        f"{RESULTS}/logs/evaluate_generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate_generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}.tsv"
    wildcard_constraints:
        retriever=_one_of(["none", *ALL_RUN_NAMES, *TOOL_RETRIEVERS]),
        llm=_names(LLMS),
        prompt=_one_of(STRATEGIES),
        setting=_one_of(SETTINGS),
        k=r"\d+",
    conda:
        "../../envs/evaluation.yaml"
    params:
        cell=lambda w: as_arg(_generation_cell(w)),
    shell:
        "cqabench evaluate-generation --dataset {wildcards.dataset:q} --predictions {input.predictions:q} "
        "--queries {input.queries:q} --answers {input.answers:q} --summary {input.summary:q} --cell {params.cell} "
        "--out-json {output.metrics:q} --out-per-question {output.per_question:q} > {log:q} 2>&1"
