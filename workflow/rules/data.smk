# Data stage: download (only what resources/raw lacks) → prepare → pooled corpora → BEIR export.
# prepare, pool_corpus and export_beir stream their data (docs/data.md, "Memory and disk at scale"):
# their estimate (job_resources, cqabench.estimate) is flat in the corpus size, their time linear in it;
# an out-of-memory kill still retries with twice the memory.
from cqabench.common.io import write_text
from cqabench.common.job_memory import MEMORY_RETRIES


rule download:
    output:
        f"{RESULTS}/raw/{{path}}",
    log:
        f"{RESULTS}/logs/download/{{path}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/download/{{path}}.tsv"
    conda:
        "../../envs/data.yaml"
    resources:
        **job_resources("download"),
    params:
        spec=lambda w: as_arg(PLAN.raw_specs_by_path().get(w.path, {})),
        raw_dir=PLAN.raw_dir,
    shell:
        "cqabench download --name {wildcards.path:q} --spec {params.spec} "
        "--raw-dir {params.raw_dir:q} --out {output:q} 2> {log:q}"


rule prepare:
    input:
        unpack(PLAN.prepare_inputs),
    output:
        **{
            t: f"{RESULTS}/data/{{dataset}}/{{split}}/{t}.parquet"
            for t in ("queries", "corpus", "qrels", "answers")
        },
    log:
        f"{RESULTS}/logs/prepare/{{dataset}}/{{split}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare/{{dataset}}/{{split}}.tsv"
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/data.yaml"
    resources:
        **job_resources("prepare", retries=True),
    params:
        files=lambda w, input: PLAN.prepare_file_args(w, input),
        limit=lambda w: PLAN.question_selection_args(w.dataset, w.split),
        relevance=lambda w: PLAN.relevance_arg(w.dataset),  # datasets.<name>.relevance: a change re-runs prepare
        out_dir=lambda w: f"{RESULTS}/data/{w.dataset}/{w.split}",
    shell:
        "cqabench prepare --dataset {wildcards.dataset:q} --split {wildcards.split:q} "
        "{params.files} {params.limit} {params.relevance} --out-dir {params.out_dir:q} 2> {log:q}"


# One member file: the output is a hard link to it (stored once, prepare's row order); several:
# an external merge sort in bounded memory, sorted by docid (cqabench/data/corpora.py).
rule pool_corpus:
    input:
        lambda w: [
            PLAN.data_path(ds, split, "corpus")
            for ds in PLAN.corpus_members(w.corpus)
            for split in PLAN.corpus_splits(ds)
        ],
    output:
        PLAN.corpus_path("{corpus}"),
    log:
        f"{RESULTS}/logs/pool_corpus/{{corpus}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/pool_corpus/{{corpus}}.tsv"
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/data.yaml"
    resources:
        **job_resources("pool_corpus", retries=True),
    params:
        corpora=lambda w, input: " ".join(f"--corpus {shlex.quote(p)}" for p in input),
    shell:
        "cqabench pool-corpus {params.corpora} --out {output:q} 2> {log:q}"


rule export_beir:
    input:
        corpus=lambda w: PLAN.corpus_path(PLAN.corpus_of(w.dataset)),
        queries=PLAN.data_path("{dataset}", "{split}", "queries"),
        qrels=PLAN.data_path("{dataset}", "{split}", "qrels"),
    # One folder: BEIR (corpus.jsonl, queries.jsonl, qrels/{split}.tsv), TREC qrels
    # (qrels/{split}.trec), the Pyserini JsonCollection (pyserini/) and export.json. Which files
    # it holds depends on the data (a split with an empty corpus or no relevant qrel gets only
    # export.json saying why), so the folder is the declared output; see cqabench/data/beir.py.
    output:
        directory(PLAN.beir_dir("{dataset}", "{serialization}", "{split}")),
    log:
        f"{RESULTS}/logs/export_beir/{{dataset}}/{{serialization}}/{{split}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/export_beir/{{dataset}}/{{serialization}}/{{split}}.tsv"
    retries: MEMORY_RETRIES  # out of memory: again with twice the memory (cqabench/common/job_memory.py)
    conda:
        "../../envs/data.yaml"
    resources:
        **job_resources("export_beir", retries=True),
    shell:
        "cqabench export-beir --corpus {input.corpus:q} --queries {input.queries:q} --qrels {input.qrels:q} "
        "--split {wildcards.split:q} --serialization {wildcards.serialization:q} "
        "--out-dir {output:q} 2> {log:q}"
