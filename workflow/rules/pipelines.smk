# Retrieval pipelines (retrieval.pipelines): runs made from other runs of the same dataset split.
# A fusion fuses its input runs with ranx; a rerank reorders its input run's top `depth` with a
# cross-encoder. Both write the run files every run has, so eval_retrieval, significance, RAG
# and rebuild by path treat them like any other run (cqabench.planner.pipelines; docs/retrieval.md).
# Every setting is in `params:`, so a changed setting reruns the rule and what reads its run.


rule fuse_runs:
    input:
        unpack(lambda w: pipeline_inputs(w)),
    output:
        trec=run_file("{dataset}", "{split}", "{serialization}", "{name}", "trec"),
        parquet=run_file("{dataset}", "{split}", "{serialization}", "{name}", "parquet"),
    log:
        f"{RESULTS}/logs/fuse_runs/{{dataset}}/{{split}}/{{serialization}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/fuse_runs/{{dataset}}/{{split}}/{{serialization}}/{{name}}.tsv"
    wildcard_constraints:
        name=_names(FUSIONS),
    conda:
        "../../envs/retrieval.yaml"
    resources:
        mem_mb=lambda w: _request("fuse_runs", w)["mem_mb"],
        runtime=lambda w: _request("fuse_runs", w)["runtime"],
    params:
        settings=lambda w: as_arg(pipeline_settings(w.name)),
    shell:
        "cqabench fuse --runs {input.runs:q} --queries {input.queries:q} --settings {params.settings} "
        "--tag {wildcards.name:q} --out-trec {output.trec:q} --out-parquet {output.parquet:q} > {log:q} 2>&1"


rule rerank_run:
    input:
        unpack(lambda w: pipeline_inputs(w)),
    output:
        trec=run_file("{dataset}", "{split}", "{serialization}", "{name}", "trec"),
        parquet=run_file("{dataset}", "{split}", "{serialization}", "{name}", "parquet"),
        record=f"{RESULTS}/runs/{{dataset}}/{{split}}/{{serialization}}/{{name}}.rerank.json",
    log:
        f"{RESULTS}/logs/rerank_run/{{dataset}}/{{split}}/{{serialization}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/rerank_run/{{dataset}}/{{split}}/{{serialization}}/{{name}}.tsv"
    wildcard_constraints:
        name=_names(RERANKS),
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/retrieval.yaml"
    resources:
        # device cuda: the job asks the scheduler for a GPU, as the neural index and search jobs do
        gpu=lambda w: _request("rerank_run", w)["gpu"],
        mem_mb=lambda w, attempt: memory_mb(
            _request("rerank_run", w)["mem_mb"], attempt
        ),
        runtime=lambda w: _request("rerank_run", w)["runtime"],
    params:
        settings=lambda w: as_arg(pipeline_settings(w.name)),
    shell:
        "cqabench rerank --run {input.runs:q} --queries {input.queries:q} --corpus {input.corpus:q} "
        "--serialization {wildcards.serialization:q} --settings {params.settings} --tag {wildcards.name:q} "
        "--out-trec {output.trec:q} --out-parquet {output.parquet:q} --out-log {output.record:q} > {log:q} 2>&1"
