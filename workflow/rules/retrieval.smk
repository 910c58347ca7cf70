# Retrieval stage: index per (corpus, serialization, retriever) -> search per (dataset, split,
# serialization, retriever) -> evaluate; StrategyQA IR-Q / IR-D; external runs imported as ours.
# Every setting a rule uses is in `params:`, so a changed setting reruns the rule.
from cqabench.common.job_memory import MEMORY_RETRIES


rule index:
    input:
        corpus=lambda w: PLAN.corpus_path(w.corpus),
    output:
        directory(f"{RESULTS}/index/{{corpus}}/{{serialization}}/{{retriever}}"),
    log:
        f"{RESULTS}/logs/index/{{corpus}}/{{serialization}}/{{retriever}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/index/{{corpus}}/{{serialization}}/{{retriever}}.tsv"
    wildcard_constraints:
        retriever=_names(PLAN.unsharded_retrievers()),  # encode_jobs > 1: gather_index below
    priority: lambda w: retrieval_priority("index", w)
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/retrieval.yaml"
    threads: lambda w: retrieval_threads("index", w)
    resources:
        **job_resources("index", gpu=True, retries=True),
    params:
        settings=lambda w: retrieval_settings("index", w),
    shell:
        "cqabench index --corpus {input.corpus:q} --serialization {wildcards.serialization:q} "
        "--retriever-settings {params.settings} --out {output:q} > {log:q} 2>&1"


# encode_jobs: N > 1 (dense, SPLADE, ColBERT): N encode_part jobs, each its own GPU / SLURM job
# over a contiguous range of whole chunks of the corpus, then gather_index builds the same index
# the single `index` job would (cqabench/retrieval/parts.py; docs/retrievers_neural.md). A killed
# part leaves no folder (atomic), so a rerun runs that part, the gather and what follows.
# ColBERT's parts share colbert-ai's codec (centroids, residual buckets), trained once first.
rule colbert_codec:
    input:
        corpus=lambda w: PLAN.corpus_path(w.corpus),
    output:
        directory(
            f"{RESULTS}/index_parts/{{corpus}}/{{serialization}}/{{retriever}}/codec"
        ),
    log:
        f"{RESULTS}/logs/colbert_codec/{{corpus}}/{{serialization}}/{{retriever}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/colbert_codec/{{corpus}}/{{serialization}}/{{retriever}}.tsv"
    wildcard_constraints:
        retriever=_names(PLAN.codec_retrievers()),
    priority: lambda w: retrieval_priority("colbert_codec", w)
    retries: MEMORY_RETRIES
    conda:
        "../../envs/retrieval.yaml"
    threads: lambda w: retrieval_threads("colbert_codec", w)
    resources:
        **job_resources("colbert_codec", gpu=True, retries=True),
    params:
        settings=lambda w: retrieval_settings("colbert_codec", w),
    shell:
        "cqabench colbert-codec --corpus {input.corpus:q} --serialization {wildcards.serialization:q} "
        "--retriever-settings {params.settings} --out {output:q} > {log:q} 2>&1"


rule encode_part:
    input:
        corpus=lambda w: PLAN.corpus_path(w.corpus),
        codec=lambda w: PLAN.part_codec(w.corpus, w.serialization, w.retriever),
    output:
        directory(
            f"{RESULTS}/index_parts/{{corpus}}/{{serialization}}/{{retriever}}/{{part}}-of-{{parts}}"
        ),
    log:
        f"{RESULTS}/logs/encode_part/{{corpus}}/{{serialization}}/{{retriever}}/{{part}}-of-{{parts}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/encode_part/{{corpus}}/{{serialization}}/{{retriever}}/{{part}}-of-{{parts}}.tsv"
    wildcard_constraints:
        retriever=_names(PLAN.sharded_retrievers()),
        part=r"\d+",
        parts=r"\d+",
    priority: lambda w: retrieval_priority("encode_part", w)
    retries: MEMORY_RETRIES
    conda:
        "../../envs/retrieval.yaml"
    threads: lambda w: retrieval_threads("encode_part", w)
    resources:
        **job_resources("encode_part", gpu=True, retries=True),
    params:
        settings=lambda w: retrieval_settings("encode_part", w),
        codec=lambda w: PLAN.codec_arg(w.corpus, w.serialization, w.retriever),
    shell:
        "cqabench encode-part --corpus {input.corpus:q} --serialization {wildcards.serialization:q} "
        "--retriever-settings {params.settings} --part {wildcards.part} --of {wildcards.parts} "
        "--out {output:q} {params.codec} > {log:q} 2>&1"


rule gather_index:
    input:
        corpus=lambda w: PLAN.corpus_path(w.corpus),
        parts=lambda w: PLAN.index_parts(w.corpus, w.serialization, w.retriever),
        codec=lambda w: PLAN.part_codec(w.corpus, w.serialization, w.retriever),
    output:
        directory(f"{RESULTS}/index/{{corpus}}/{{serialization}}/{{retriever}}"),
    log:
        f"{RESULTS}/logs/gather_index/{{corpus}}/{{serialization}}/{{retriever}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/gather_index/{{corpus}}/{{serialization}}/{{retriever}}.tsv"
    wildcard_constraints:
        retriever=_names(PLAN.sharded_retrievers()),
    priority: lambda w: retrieval_priority("gather_index", w)
    retries: MEMORY_RETRIES
    conda:
        "../../envs/retrieval.yaml"
    threads: lambda w: retrieval_threads("gather_index", w)
    resources:
        **job_resources("gather_index", retries=True),
        # No model runs here: links the parts' shards (flat), trains and fills faiss on CPU, or
        # builds ColBERT's IVF from the parts' codes (colbert-ai's finalize).
        gpu=0,
    params:
        settings=lambda w: as_arg(PLAN.retriever_configs[w.retriever]),
        codec=lambda w: PLAN.codec_arg(w.corpus, w.serialization, w.retriever),
    shell:
        "cqabench gather-index --corpus {input.corpus:q} --serialization {wildcards.serialization:q} "
        "--retriever-settings {params.settings} --parts {input.parts:q} --out {output:q} "
        "{params.codec} > {log:q} 2>&1"


rule search:
    input:
        index=lambda w: PLAN.index_dir(
            PLAN.corpus_of(w.dataset), w.serialization, w.retriever
        ),
        queries=PLAN.data_path("{dataset}", "{split}", "queries"),
    output:
        trec=PLAN.run_file(
            "{dataset}", "{split}", "{serialization}", "{retriever}", "trec"
        ),
        parquet=PLAN.run_file(
            "{dataset}", "{split}", "{serialization}", "{retriever}", "parquet"
        ),
    log:
        f"{RESULTS}/logs/search/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/search/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}.tsv"
    wildcard_constraints:
        retriever=_names(PLAN.retriever_configs),
    priority: lambda w: retrieval_priority("search", w)
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/retrieval.yaml"
    threads: lambda w: retrieval_threads("search", w)
    resources:
        **job_resources("search", gpu=True, retries=True),
    params:
        settings=lambda w: retrieval_settings("search", w),
        k=PLAN.retrieval_k,
    shell:
        "cqabench search --index {input.index:q} --queries {input.queries:q} "
        "--retriever-settings {params.settings} --k {params.k} --tag {wildcards.retriever:q} "
        "--out-trec {output.trec:q} --out-parquet {output.parquet:q} > {log:q} 2>&1"


rule decompose_search:
    input:
        index=lambda w: PLAN.index_dir(
            PLAN.corpus_of(w.dataset), w.serialization, w.retriever
        ),
        queries=PLAN.data_path("{dataset}", "{split}", "queries"),
    output:
        trec=PLAN.run_file(
            "{dataset}", "{split}", "{serialization}", "{retriever}-{kind}", "trec"
        ),
        parquet=PLAN.run_file(
            "{dataset}", "{split}", "{serialization}", "{retriever}-{kind}", "parquet"
        ),
        steps=f"{RESULTS}/runs/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}-{{kind}}.steps.json",
    log:
        f"{RESULTS}/logs/decompose_search/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}-{{kind}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/decompose_search/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}-{{kind}}.tsv"
    wildcard_constraints:
        retriever=_names(PLAN.retriever_configs),
        kind="irq|ird-gold|ird-pred",
    priority: lambda w: retrieval_priority("decompose_search", w)
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/retrieval.yaml"
    threads: lambda w: retrieval_threads("decompose_search", w)
    resources:
        **job_resources("decompose_search", gpu=True, retries=True),
    params:
        settings=lambda w: retrieval_settings("decompose_search", w),
        kind=lambda w: _SUFFIX_KIND[w.kind],
        k=PLAN.decomposition_k,
    shell:
        "cqabench decompose-search --index {input.index:q} --queries {input.queries:q} "
        "--retriever-settings {params.settings} --kind {params.kind} --k {params.k} "
        "--tag {wildcards.retriever:q}-{wildcards.kind} --out-trec {output.trec:q} "
        "--out-parquet {output.parquet:q} --out-log {output.steps:q} > {log:q} 2>&1"


rule import_run:
    input:
        run=PLAN.external_input,
        queries=PLAN.data_path("{dataset}", "{split}", "queries"),
    output:
        trec=PLAN.run_file("{dataset}", "{split}", "{serialization}", "{name}", "trec"),
        parquet=PLAN.run_file(
            "{dataset}", "{split}", "{serialization}", "{name}", "parquet"
        ),
    log:
        f"{RESULTS}/logs/import_run/{{dataset}}/{{split}}/{{serialization}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/import_run/{{dataset}}/{{split}}/{{serialization}}/{{name}}.tsv"
    wildcard_constraints:
        name=_names(PLAN.external_runs),
    conda:
        "../../envs/retrieval.yaml"
    resources:
        **job_resources("import_run"),
    params:
        spec=lambda w: as_arg(PLAN.external_runs[w.name]),
        format=lambda w: PLAN.external_runs[w.name].get("format", "trec"),
    shell:
        "cqabench import-run --run {input.run:q} --format {params.format} --queries {input.queries:q} "
        "--tag {wildcards.name:q} --out-trec {output.trec:q} --out-parquet {output.parquet:q} > {log:q} 2>&1"


rule evaluate_retrieval:
    input:
        # run, qrels, queries; a run the config does not plan (a retriever defined, not listed) is refused by name
        unpack(lambda w: PLAN.retrieval_inputs(w)),
        config=ancient(CONFIG_FILE),
    output:
        metrics=f"{RESULTS}/retrieval/{{dataset}}/{{split}}/{{serialization}}/{{run}}/metrics.json",
        per_query=f"{RESULTS}/retrieval/{{dataset}}/{{split}}/{{serialization}}/{{run}}/per_query.parquet",
    log:
        f"{RESULTS}/logs/evaluate_retrieval/{{dataset}}/{{split}}/{{serialization}}/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate_retrieval/{{dataset}}/{{split}}/{{serialization}}/{{run}}.tsv"
    wildcard_constraints:
        run=_names(sorted(set(PLAN.all_run_names) | set(PLAN.retriever_configs))),
    conda:
        "../../envs/retrieval.yaml"
    resources:
        **job_resources("evaluate_retrieval"),
    params:
        # what the job reads from --config (Plan.retrieval_cell): a change rescores the run
        cell=lambda w: as_arg(
            PLAN.retrieval_cell(w.dataset, w.split, w.serialization, w.run)
        ),
        drop=str(PLAN.drop_identical_ids).lower(),
        strategyqa=lambda w: "--strategyqa-recall" if w.dataset == "strategyqa" else "",
    shell:
        "cqabench evaluate-retrieval --run {input.run:q} --qrels {input.qrels:q} --queries {input.queries:q} "
        "--config {input.config:q} --cell {wildcards.dataset}/{wildcards.split}/{wildcards.serialization}/{wildcards.run} "
        "--drop-identical-ids {params.drop} {params.strategyqa} "
        "--out-json {output.metrics:q} --out-per-query {output.per_query:q} > {log:q} 2>&1"


# Retrieval pipelines (retrieval.pipelines): runs made from other runs of the same dataset split.
# A fusion fuses its input runs with ranx; a rerank reorders its input run's top `depth` with a
# cross-encoder. Both write the run files every run has, so evaluate_retrieval, significance, RAG
# and rebuild by path treat them like any other run (cqabench.planner.pipelines; docs/retrieval.md).
# Every setting is in `params:`, so a changed setting reruns the rule and what reads its run.


rule fuse_runs:
    input:
        unpack(PLAN.pipeline_inputs),
    output:
        trec=PLAN.run_file("{dataset}", "{split}", "{serialization}", "{name}", "trec"),
        parquet=PLAN.run_file(
            "{dataset}", "{split}", "{serialization}", "{name}", "parquet"
        ),
    log:
        f"{RESULTS}/logs/fuse_runs/{{dataset}}/{{split}}/{{serialization}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/fuse_runs/{{dataset}}/{{split}}/{{serialization}}/{{name}}.tsv"
    wildcard_constraints:
        name=_names(PLAN.pipelines_of_type("fusion")),
    conda:
        "../../envs/retrieval.yaml"
    resources:
        **job_resources("fuse_runs"),
    params:
        settings=lambda w: as_arg(PLAN.pipeline_settings(w.name)),
    shell:
        "cqabench fuse-runs --runs {input.runs:q} --queries {input.queries:q} --settings {params.settings} "
        "--tag {wildcards.name:q} --out-trec {output.trec:q} --out-parquet {output.parquet:q} > {log:q} 2>&1"


rule rerank_run:
    input:
        unpack(PLAN.pipeline_inputs),
    output:
        trec=PLAN.run_file("{dataset}", "{split}", "{serialization}", "{name}", "trec"),
        parquet=PLAN.run_file(
            "{dataset}", "{split}", "{serialization}", "{name}", "parquet"
        ),
        record=f"{RESULTS}/runs/{{dataset}}/{{split}}/{{serialization}}/{{name}}.rerank.json",
    log:
        f"{RESULTS}/logs/rerank_run/{{dataset}}/{{split}}/{{serialization}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/rerank_run/{{dataset}}/{{split}}/{{serialization}}/{{name}}.tsv"
    wildcard_constraints:
        name=_names(PLAN.pipelines_of_type("rerank")),
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/retrieval.yaml"
    resources:
        # device cuda: the job asks the scheduler for a GPU, as the neural index and search jobs do
        **job_resources("rerank_run", gpu=True, retries=True),
    params:
        settings=lambda w: as_arg(PLAN.pipeline_settings(w.name)),
    shell:
        "cqabench rerank-run --run {input.runs:q} --queries {input.queries:q} --corpus {input.corpus:q} "
        "--serialization {wildcards.serialization:q} --settings {params.settings} --tag {wildcards.name:q} "
        "--out-trec {output.trec:q} --out-parquet {output.parquet:q} --out-log {output.record:q} > {log:q} 2>&1"
