# Retrieval stage: index per (corpus, serialization, retriever) -> search per (dataset, split,
# serialization, retriever) -> evaluate; StrategyQA IR-Q / IR-D; external runs imported as ours.
# Every setting a rule uses is in `params:`, so a changed setting reruns the rule.

RETRIEVER_CONFIGS = config.get("retrievers", {}) or {}
RETRIEVAL = config.get("retrieval", {}) or {}
RETRIEVAL_K = int(RETRIEVAL.get("k", 100))
RETRIEVAL_RETRIEVERS = list(RETRIEVAL.get("retrievers", []))
# Datasets searched by the configured retrievers (default: all; a dataset without a corpus, such
# as the sample's TANQ, is left out here rather than indexed empty).
RETRIEVAL_DATASETS = list(RETRIEVAL.get("datasets") or DATASETS)
DECOMPOSITION = RETRIEVAL.get("decomposition", {}) or {}
EXTERNAL_RUNS = config.get("external_runs", {}) or {}
# IR-Q / IR-D run names are "{retriever}-{suffix}" (cqabench.retrievers.decomposition.RUN_SUFFIX).
DECOMPOSITION_SUFFIX = {"question": "irq", "gold": "ird-gold", "predicted": "ird-pred"}
_SUFFIX_KIND = {v: k for k, v in DECOMPOSITION_SUFFIX.items()}
for _kind in DECOMPOSITION.get("queries", []):
    if _kind not in DECOMPOSITION_SUFFIX:
        raise ValueError(f"retrieval.decomposition.queries: {_kind!r} is not one of {list(DECOMPOSITION_SUFFIX)}")
_NEVER = "(?!x)x"  # a wildcard constraint no name matches (for an empty list of names)


def _check_retrieval_config():
    named = set(RETRIEVAL_RETRIEVERS) | set(DECOMPOSITION.get("retrievers", []))
    unknown = sorted(named - set(RETRIEVER_CONFIGS))
    if unknown:
        raise ValueError(f"retrieval: retrievers {unknown} are not defined under `retrievers:`")
    clash = sorted(set(EXTERNAL_RUNS) & set(RETRIEVER_CONFIGS))
    if clash:
        raise ValueError(f"external_runs: names {clash} are also retriever names; rename them")
    for name, spec in EXTERNAL_RUNS.items():
        if spec["dataset"] not in DATASETS or spec["split"] not in splits(spec["dataset"]):
            raise ValueError(f"external_runs.{name}: {spec['dataset']}/{spec['split']} is not configured")


_check_retrieval_config()


def _names(names):
    return _one_of(names) if names else _NEVER


def is_neural(retriever):
    return RETRIEVER_CONFIGS[retriever]["type"] != "bm25"


def index_dir(corpus, serialization, retriever):
    return f"{RESULTS}/index/{corpus}/{serialization}/{retriever}"


def run_file(dataset, split, serialization, run, ext="parquet"):
    return f"{RESULTS}/runs/{dataset}/{split}/{serialization}/{run}.{ext}"


DECOMPOSITION_RUNS = {
    f"{r}-{DECOMPOSITION_SUFFIX[kind]}": (r, kind)
    for r in DECOMPOSITION.get("retrievers", [])
    for kind in DECOMPOSITION.get("queries", list(DECOMPOSITION_SUFFIX))
}


def decomposition_runs(dataset):
    return list(DECOMPOSITION_RUNS) if dataset in DECOMPOSITION.get("datasets", []) else []


def external_runs_of(dataset, split):
    return [n for n, spec in EXTERNAL_RUNS.items() if spec["dataset"] == dataset and spec["split"] == split]


def run_names(dataset, split):
    """Every run of a (dataset, split): what the evaluation and generation stages iterate over."""
    ours = RETRIEVAL_RETRIEVERS if dataset in RETRIEVAL_DATASETS else []
    return ours + decomposition_runs(dataset) + external_runs_of(dataset, split)


def _run_settings(run):
    """The retriever_settings recorded in a cell: the retriever's config, or what made the run."""
    if run in EXTERNAL_RUNS:
        return {"external": True, **EXTERNAL_RUNS[run]}
    if run in RETRIEVER_CONFIGS:
        return {**RETRIEVER_CONFIGS[run], "k": RETRIEVAL_K}
    retriever, kind = DECOMPOSITION_RUNS[run]
    return {**RETRIEVER_CONFIGS[retriever], "queries": kind, "k": int(DECOMPOSITION.get("k", 10))}


def _resources(retriever, neural_mb, bm25_mb, neural_min, bm25_min):
    neural = is_neural(retriever)
    return {"gpu": 1 if neural else 0, "mem_mb": neural_mb if neural else bm25_mb,
            "runtime": neural_min if neural else bm25_min}  # fmt: skip


ALL_RUN_NAMES = sorted({n for ds in DATASETS for sp in splits(ds) for n in run_names(ds, sp)})


rule index:
    input:
        corpus=lambda w: corpus_path(w.corpus),
    output:
        directory(f"{RESULTS}/index/{{corpus}}/{{serialization}}/{{retriever}}"),
    wildcard_constraints:
        retriever=_names(RETRIEVER_CONFIGS),
    params:
        settings=lambda w: as_arg(RETRIEVER_CONFIGS[w.retriever]),
    resources:
        gpu=lambda w: _resources(w.retriever, 16000, 4000, 240, 60)["gpu"],
        mem_mb=lambda w: _resources(w.retriever, 16000, 4000, 240, 60)["mem_mb"],
        runtime=lambda w: _resources(w.retriever, 16000, 4000, 240, 60)["runtime"],
    log:
        f"{RESULTS}/logs/index/{{corpus}}/{{serialization}}/{{retriever}}.log",
    conda:
        "../../envs/retrieval.yaml"
    shell:
        "{CQABENCH} index --corpus {input.corpus:q} --serialization {wildcards.serialization:q} "
        "--retriever-settings {params.settings} --out {output:q} > {log:q} 2>&1"


rule search:
    input:
        index=lambda w: index_dir(corpus_of(w.dataset), w.serialization, w.retriever),
        queries=data_path("{dataset}", "{split}", "queries"),
    output:
        trec=run_file("{dataset}", "{split}", "{serialization}", "{retriever}", "trec"),
        parquet=run_file("{dataset}", "{split}", "{serialization}", "{retriever}", "parquet"),
    wildcard_constraints:
        retriever=_names(RETRIEVER_CONFIGS),
    params:
        settings=lambda w: as_arg(RETRIEVER_CONFIGS[w.retriever]),
        k=RETRIEVAL_K,
    resources:
        gpu=lambda w: _resources(w.retriever, 16000, 4000, 120, 30)["gpu"],
        mem_mb=lambda w: _resources(w.retriever, 16000, 4000, 120, 30)["mem_mb"],
        runtime=lambda w: _resources(w.retriever, 16000, 4000, 120, 30)["runtime"],
    log:
        f"{RESULTS}/logs/search/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}.log",
    conda:
        "../../envs/retrieval.yaml"
    shell:
        "{CQABENCH} search --index {input.index:q} --queries {input.queries:q} "
        "--retriever-settings {params.settings} --k {params.k} --tag {wildcards.retriever:q} "
        "--out-trec {output.trec:q} --out-parquet {output.parquet:q} > {log:q} 2>&1"


rule decompose_search:
    input:
        index=lambda w: index_dir(corpus_of(w.dataset), w.serialization, w.retriever),
        queries=data_path("{dataset}", "{split}", "queries"),
    output:
        trec=run_file("{dataset}", "{split}", "{serialization}", "{retriever}-{kind}", "trec"),
        parquet=run_file("{dataset}", "{split}", "{serialization}", "{retriever}-{kind}", "parquet"),
        steps=f"{RESULTS}/runs/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}-{{kind}}.steps.json",
    wildcard_constraints:
        retriever=_names(RETRIEVER_CONFIGS),
        kind="irq|ird-gold|ird-pred",
    params:
        settings=lambda w: as_arg(RETRIEVER_CONFIGS[w.retriever]),
        kind=lambda w: _SUFFIX_KIND[w.kind],
        k=int(DECOMPOSITION.get("k", 10)),
    resources:
        gpu=lambda w: _resources(w.retriever, 16000, 4000, 60, 30)["gpu"],
        mem_mb=lambda w: _resources(w.retriever, 16000, 4000, 60, 30)["mem_mb"],
        runtime=lambda w: _resources(w.retriever, 16000, 4000, 60, 30)["runtime"],
    log:
        f"{RESULTS}/logs/decompose_search/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}-{{kind}}.log",
    conda:
        "../../envs/retrieval.yaml"
    shell:
        "{CQABENCH} decompose-search --index {input.index:q} --queries {input.queries:q} "
        "--retriever-settings {params.settings} --kind {params.kind} --k {params.k} "
        "--tag {wildcards.retriever:q}-{wildcards.kind} --out-trec {output.trec:q} "
        "--out-parquet {output.parquet:q} --out-log {output.steps:q} > {log:q} 2>&1"


def _external_input(w):
    spec = EXTERNAL_RUNS[w.name]
    if (spec["dataset"], spec["split"]) != (w.dataset, w.split):
        raise ValueError(f"external run {w.name} belongs to {spec['dataset']}/{spec['split']}, not {w.dataset}/{w.split}")
    return spec["path"]


rule import_run:
    input:
        run=lambda w: _external_input(w),
        queries=data_path("{dataset}", "{split}", "queries"),
    output:
        trec=run_file("{dataset}", "{split}", "{serialization}", "{name}", "trec"),
        parquet=run_file("{dataset}", "{split}", "{serialization}", "{name}", "parquet"),
    wildcard_constraints:
        name=_names(EXTERNAL_RUNS),
    params:
        spec=lambda w: as_arg(EXTERNAL_RUNS[w.name]),
        format=lambda w: EXTERNAL_RUNS[w.name].get("format", "trec"),
    log:
        f"{RESULTS}/logs/import_run/{{dataset}}/{{split}}/{{serialization}}/{{name}}.log",
    conda:
        "../../envs/retrieval.yaml"
    shell:
        "{CQABENCH} import-run --run {input.run:q} --format {params.format} --queries {input.queries:q} "
        "--tag {wildcards.name:q} --out-trec {output.trec:q} --out-parquet {output.parquet:q} > {log:q} 2>&1"


rule eval_retrieval:
    input:
        run=run_file("{dataset}", "{split}", "{serialization}", "{run}", "parquet"),
        qrels=data_path("{dataset}", "{split}", "qrels"),
        queries=data_path("{dataset}", "{split}", "queries"),
    output:
        metrics=f"{RESULTS}/retrieval/{{dataset}}/{{split}}/{{serialization}}/{{run}}/metrics.json",
        per_query=f"{RESULTS}/retrieval/{{dataset}}/{{split}}/{{serialization}}/{{run}}/per_query.parquet",
    wildcard_constraints:
        run=_names(ALL_RUN_NAMES),
    params:
        cell=lambda w: as_arg(
            {"dataset": w.dataset, "split": w.split, "corpus": corpus_of(w.dataset),
             "serialization": w.serialization, "retriever": w.run, "retriever_settings": _run_settings(w.run)}
        ),  # fmt: skip
        drop=str(bool(RETRIEVAL.get("drop_identical_ids", True))).lower(),
        strategyqa=lambda w: "--strategyqa-recall" if w.dataset == "strategyqa" else "",
    log:
        f"{RESULTS}/logs/eval_retrieval/{{dataset}}/{{split}}/{{serialization}}/{{run}}.log",
    conda:
        "../../envs/retrieval.yaml"
    shell:
        "{CQABENCH} eval-retrieval --run {input.run:q} --qrels {input.qrels:q} --queries {input.queries:q} "
        "--cell {params.cell} --drop-identical-ids {params.drop} {params.strategyqa} "
        "--out-json {output.metrics:q} --out-per-query {output.per_query:q} > {log:q} 2>&1"


def retrieval_targets():
    return [
        f"{RESULTS}/retrieval/{ds}/{sp}/{ser}/{run}/metrics.json"
        for ds in DATASETS
        for sp in splits(ds)
        for ser in SERIALIZATIONS
        for run in run_names(ds, sp)
    ]
