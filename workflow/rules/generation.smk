# Generation stage: GGUF -> HF model folder once; one job per (dataset, split, serialization,
# retriever|none, llm, prompt, setting, k). Items are cached outside the outputs, so a killed job
# resumes without calling the model again for what it already answered.
from cqabench.common.job_memory import MEMORY_RETRIES

CELL_PART = "[^/]+"  # a generation cell's folder names, checked by the planner instead


rule convert_model:
    output:
        directory(f"{PLAN.models_dir}/{{llm}}"),
    log:
        f"{RESULTS}/logs/convert_model/{{llm}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/convert_model/{{llm}}.tsv"
    wildcard_constraints:
        llm=_names(PLAN.gguf_llms),
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/generation.yaml"
    resources:
        **job_resources("convert_model", retries=True),
    params:
        source=lambda w: PLAN.llms[w.llm]["source"],
        dtype=lambda w: PLAN.llms[w.llm].get("dtype", "float32"),
        converter=CONVERTER_VERSION,  # a new converter (tokenizer fix) re-converts the folder
    shell:
        "cqabench convert-model --source {params.source:q} --dtype {params.dtype:q} --out {output:q} > {log:q} 2>&1"


# What one batched cell's prompts are made from (its files, template hash and settings): the
# cell's own rerun triggers, upstream of the batch. Snakemake skips the checks of jobs below one
# that reruns, so checked on the cell job they would be lost whenever the batch reruns for another
# cell (Plan.cell_spec); here a changed template or setting reruns this file, the batch and the cell.
rule cell_spec:
    input:
        unpack(PLAN.generation_inputs),
    output:
        f"{RESULTS}/generation/{CELL_DIR}/spec.json",
    log:
        f"{RESULTS}/logs/cell_spec/{CELL_DIR}.log",
    wildcard_constraints:
        retriever=CELL_PART,
        llm=_names(PLAN.gen_batch_llms),
        prompt=CELL_PART,
        setting=CELL_PART,
        k=CELL_PART,
    localrule: True
    conda:
        "../../envs/generation.yaml"
    resources:
        **job_resources("cell_spec"),
    params:
        spec=lambda w: as_json(PLAN.cell_spec(w)),
    # a shell job: Snakemake's local executor starts a `run:` job as a new Snakemake process
    # (12 s each here; the sample's 43 held a core for 522 s of make run on 2 cores). printf
    # needs nothing; the environment is the one the cell's own jobs use (every shell rule names one)
    shell:
        "printf '%s\\n' {params.spec:q} > {output:q} 2> {log:q}"


# Cells of the LLMs in generation.batch_llms are generated in one engine session first (an
# engine start costs more than a sample cell); each cell's own job then assembles its
# predictions from the item cache. docs/generation.md says when to use it.
rule generate_batch:
    input:
        PLAN.batch_inputs,
        config=ancient(CONFIG_FILE),
    output:
        PLAN.batch_manifest("{llm}"),
    log:
        f"{RESULTS}/logs/generate_batch/{{llm}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate_batch/{{llm}}.tsv"
    wildcard_constraints:
        llm=_names(PLAN.gen_batch_llms),
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        lambda w: GEN_ENVS[PLAN.llms[w.llm]["backend"]]
    threads: PLAN.threads
    resources:
        # the estimate's; llms.<name>.mem_mb / runtime_min, when set, win (cqabench.estimate.model)
        **job_resources("generate_batch", gpu=True, retries=True),
    params:
        # what the job reads from --config (Plan.batch_member_docs / batch_shared_settings): a
        # change of a member cell or a shared setting reruns the batch
        cells=PLAN.batch_members,
        settings=PLAN.batch_settings,
        cache=lambda w: f"{PLAN.llm_cache_dir}/{w.llm}",
        python=lambda w: python_word(w.llm),
        check=vllm_check,  # the job's interpreter checked first (cqabench.generation.vllm_env)
        share=PLAN.batch_share_arg,  # "" here; --share <i>-of-<n> in generate_batch_share
    shell:
        "{params.check} --log {log:q} && CQABENCH_PYTHON={params.python} cqabench generate-batch --llm {wildcards.llm:q} "
        "{params.share} --config {input.config:q} --threads {threads} --cache {params.cache:q} --out {output:q} > {log:q} 2>&1"


# A batch split over generation.batch_jobs jobs (GPUs: a 7B model's batch is too long for one
# job): one engine session per share of the questions, every prompt of a question in one share
# (cqabench.generation.shares). The same job as generate_batch but for its --share and paths.
use rule generate_batch as generate_batch_share with:
    output:
        PLAN.batch_share_file("{llm}", "{share}"),
    log:
        f"{RESULTS}/logs/generate_batch_share/{{llm}}/{{share}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate_batch_share/{{llm}}/{{share}}.tsv"
    wildcard_constraints:
        llm=_names(PLAN.gen_batch_llms),
        share=_names(PLAN.all_batch_shares()),
    resources:
        # `with:` replaces all of them: the estimate's for a share (1/N of the questions)
        **job_resources("generate_batch_share", gpu=True, retries=True),


rule generate:
    input:
        unpack(_cell_inputs),
    output:
        predictions=f"{RESULTS}/generation/{CELL_DIR}/predictions.parquet",
        summary=f"{RESULTS}/generation/{CELL_DIR}/summary.json",
    log:
        f"{RESULTS}/logs/generate/{CELL_DIR}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate/{CELL_DIR}.tsv"
    # Any cell folder reaches the planner: one the config cannot make (closed-k3, rag-k200, an
    # unknown prompt) is refused by _cell_inputs with its path and why (cqabench.planner.cells).
    wildcard_constraints:
        retriever=CELL_PART,
        llm=CELL_PART,
        prompt=CELL_PART,
        setting=CELL_PART,
        k=CELL_PART,
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        lambda w: GEN_ENVS[PLAN.llms[w.llm]["backend"]]
    threads: lambda w: 1 if PLAN.in_batch(w) else PLAN.threads
    resources:
        # a grid cell of a batch LLM only assembles its answers from the cache: no GPU (the estimate's)
        **job_resources("generate", gpu=True, retries=True),
    params:
        # what the job reads from --config (Plan.generation_settings): a change reruns the cell
        settings=lambda w: as_arg(PLAN.generation_settings(w)),
        files=PLAN.generation_args,
        cache=lambda w: f"{PLAN.llm_cache_dir}/{w.llm}",
        python=lambda w: python_word(w.llm),
        check=vllm_check,  # the job's interpreter checked first (cqabench.generation.vllm_env)
    shell:
        "{params.check} --log {log:q} && CQABENCH_PYTHON={params.python} cqabench generate --dataset {wildcards.dataset:q} --split {wildcards.split:q} "
        "--serialization {wildcards.serialization:q} --retriever {wildcards.retriever:q} "
        "--llm {wildcards.llm:q} --prompt {wildcards.prompt:q} --setting {wildcards.setting:q} --k {wildcards.k} "
        "--queries {input.queries:q} --template {input.template:q} {params.files} "
        "--config {input.config:q} --threads {threads} --cache {params.cache:q} "
        "--out {output.predictions:q} --summary {output.summary:q} > {log:q} 2>&1"


# Two configs with one `name` share a results tree: the plan names both files (a warning, see
# cqabench.planner.tree_source for why not a refusal); a real run records its config file.
from cqabench.planner import tree_source

_SOURCE_WARNING = tree_source.source_warning(RESULTS, workflow.configfiles)
if _SOURCE_WARNING and workflow.is_main_process:
    print(f"cqabench: {_SOURCE_WARNING}", file=sys.stderr)


onstart:
    check_api_keys()
    check_models()
    check_cluster_profile()
    check_vllm_environments()
    tree_source.record_source(RESULTS, workflow.configfiles)
