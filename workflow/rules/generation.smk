# Generation stage: GGUF models converted once -> one job per cell -> predictions.parquet + summary.json.
# A cell is (dataset, split, serialization, retriever|none, llm, prompt, setting, k). Finished items
# live in the item cache (generation.cache_dir, outside every declared output), so a failed or
# killed job that is started again only generates what is missing.
import os

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from cqabench.prompts import FAMILIES, SETTINGS, STRATEGIES, family_of  # noqa: E402

GENERATION = config.get("generation", {}) or {}
LLMS = config.get("llms", {}) or {}
GEN_LLMS = list(GENERATION.get("llms", []))
GEN_PROMPTS = list(GENERATION.get("prompts", []))
GEN_SETTINGS = list(GENERATION.get("settings", []))
GEN_RAG_RUNS = list(GENERATION.get("rag_retrievers", []))
GEN_K = [int(k) for k in GENERATION.get("k", [5])]
PROMPTS_DIR = GENERATION.get("prompts_dir", "resources/prompts")
LLM_CACHE_DIR = GENERATION.get("cache_dir", f"{RESULTS}/cache/llm")
MODELS_DIR = f"{RESULTS}/models"
GEN_ENVS = {"vllm": "../../envs/vllm.yaml", "hf": "../../envs/generation.yaml", "openai": "../../envs/generation.yaml"}


def _is_gguf(llm):
    return str(LLMS[llm]["source"]).startswith(("gguf-package:", "gguf:"))


GGUF_LLMS = [n for n in LLMS if _is_gguf(n)]


def _dry_run():
    return any(a in ("--dry-run", "--dryrun") or (a.startswith("-") and not a.startswith("--") and "n" in a[1:]) for a in sys.argv[1:])


def _check_generation_config():
    unknown = sorted(set(GEN_LLMS) - set(LLMS))
    if unknown:
        raise ValueError(f"generation.llms: {unknown} are not defined under `llms:`")
    bad = sorted(set(GEN_PROMPTS) - set(STRATEGIES))
    if bad:
        raise ValueError(f"generation.prompts: unknown {bad}; valid: {list(STRATEGIES)}")
    bad = sorted(set(GEN_SETTINGS) - set(SETTINGS))
    if bad:
        raise ValueError(f"generation.settings: unknown {bad}; valid: {list(SETTINGS)}")
    if "rag" in GEN_SETTINGS and not (GEN_RAG_RUNS and GEN_K):
        raise ValueError("generation.settings has rag: set generation.rag_retrievers and generation.k")
    for ds in DATASETS:
        family_of(ds, GENERATION.get("families"))  # every dataset must map to a template family
    # A missing API key fails here, before any job starts; the key itself is never read into logs.
    # Dry runs skip the check, so a paper-config DAG can be inspected without credentials
    # (Snakemake decides dry-run only after parsing, hence the look at the command line).
    if not _dry_run():
        for name in GEN_LLMS:
            if LLMS[name]["backend"] == "openai":
                env = LLMS[name].get("api_key_env") or "OPENAI_API_KEY"
                if not os.environ.get(env):
                    raise ValueError(f"llms.{name}: backend openai reads its API key from ${env}, which is not set")


_check_generation_config()


def generation_cells():
    """(dataset, split, serialization, retriever, llm, prompt, setting, k) of every configured cell.

    closed and oracle take retriever "none" and k 0 (oracle = every gold document); rag takes
    each configured run that exists for the (dataset, split), with each k.
    """
    cells = []
    for ds in DATASETS:
        for sp in splits(ds):
            runs = [r for r in GEN_RAG_RUNS if r in run_names(ds, sp)]
            for ser in SERIALIZATIONS:
                for llm in GEN_LLMS:
                    for prompt in GEN_PROMPTS:
                        for setting in GEN_SETTINGS:
                            if setting == "rag":
                                cells += [(ds, sp, ser, r, llm, prompt, "rag", k) for r in runs for k in GEN_K]
                            else:
                                cells.append((ds, sp, ser, "none", llm, prompt, setting, 0))
    return cells


def cell_dir(ds, sp, ser, retriever, llm, prompt, setting, k):
    return f"{ds}/{sp}/{ser}/{retriever}/{llm}/{prompt}/{setting}-k{k}"


def generation_targets():
    return [f"{RESULTS}/generation/{cell_dir(*c)}/predictions.parquet" for c in generation_cells()]


def template_file(dataset, prompt):
    return f"{PROMPTS_DIR}/{prompt}/{family_of(dataset, GENERATION.get('families'))}.txt"


def _generation_inputs(w):
    inputs = {
        "queries": data_path(w.dataset, w.split, "queries"),
        "template": template_file(w.dataset, w.prompt),
    }
    if _is_gguf(w.llm):
        inputs["model"] = f"{MODELS_DIR}/{w.llm}"
    if w.setting in ("rag", "oracle"):
        inputs["corpus"] = corpus_path(corpus_of(w.dataset))
    if w.setting == "oracle":
        inputs["qrels"] = data_path(w.dataset, w.split, "qrels")
    if w.setting == "rag":
        inputs["run"] = run_file(w.dataset, w.split, w.serialization, w.retriever, "parquet")
    return inputs


def _generation_args(w, input):
    flags = {"corpus": "--corpus", "qrels": "--qrels", "run": "--run"}
    return " ".join(f"{flag} {shlex.quote(str(input[name]))}" for name, flag in flags.items() if name in input.keys())


def _generation_settings(w):
    """Everything besides the cell that decides the answers; a change reruns the job (params)."""
    return {
        "llm": LLMS[w.llm],
        "sampling": GENERATION.get("sampling", {}),
        "max_questions": GENERATION.get("max_questions"),
        "max_doc_chars": GENERATION.get("max_doc_chars"),
        "models_dir": MODELS_DIR,
    }


def _uses_gpu(llm):
    backend = LLMS[llm]["backend"]
    return backend == "vllm" or (backend == "hf" and LLMS[llm].get("device", "cpu") != "cpu")


rule convert_model:
    output:
        directory(f"{MODELS_DIR}/{{llm}}"),
    wildcard_constraints:
        llm=_names(GGUF_LLMS),
    params:
        source=lambda w: LLMS[w.llm]["source"],
        dtype=lambda w: LLMS[w.llm].get("dtype", "float32"),
    resources:
        mem_mb=lambda w: int(LLMS[w.llm].get("convert_mem_mb", 4000)),
    log:
        f"{RESULTS}/logs/convert_model/{{llm}}.log",
    conda:
        "../../envs/generation.yaml"
    shell:
        "{CQABENCH} convert-model --source {params.source:q} --dtype {params.dtype:q} --out {output:q} > {log:q} 2>&1"


rule generate:
    input:
        unpack(_generation_inputs),
    output:
        predictions=f"{RESULTS}/generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/predictions.parquet",
        summary=f"{RESULTS}/generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/summary.json",
    wildcard_constraints:
        retriever=_one_of(["none", *ALL_RUN_NAMES]),
        llm=_names(LLMS),
        prompt=_one_of(STRATEGIES),
        setting=_one_of(SETTINGS),
        k=r"\d+",
    params:
        settings=lambda w: as_arg(_generation_settings(w)),
        files=_generation_args,
        cache=lambda w: f"{LLM_CACHE_DIR}/{w.llm}.sqlite",
    threads: int(GENERATION.get("threads", 2))
    resources:
        gpu=lambda w: 1 if _uses_gpu(w.llm) else 0,
        mem_mb=lambda w: int(LLMS[w.llm].get("mem_mb", 4000)),
        runtime=lambda w: int(LLMS[w.llm].get("runtime_min", 60)),
    log:
        f"{RESULTS}/logs/generate/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}.log",
    conda:
        lambda w: GEN_ENVS[LLMS[w.llm]["backend"]]
    shell:
        "{CQABENCH} generate --dataset {wildcards.dataset:q} --split {wildcards.split:q} "
        "--serialization {wildcards.serialization:q} --retriever {wildcards.retriever:q} "
        "--llm {wildcards.llm:q} --prompt {wildcards.prompt:q} --setting {wildcards.setting:q} --k {wildcards.k} "
        "--queries {input.queries:q} --template {input.template:q} {params.files} "
        "--settings {params.settings} --threads {threads} --cache {params.cache:q} "
        "--out {output.predictions:q} --summary {output.summary:q} > {log:q} 2>&1"
