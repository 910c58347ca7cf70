# Evaluation of generation: one job per generation cell -> metrics.json + per_question.parquet
# (answer metrics of cqabench.scoring, via `cqabench evaluate-generation`).
from cqabench.prompts import file_hash  # noqa: E402  (sys.path set in generation.smk)


def evaluation_targets():
    return [f"{RESULTS}/metrics/{cell_dir(*c)}/metrics.json" for c in generation_cells()]


def _generation_cell(w):
    """The cell as recorded in metrics.json (docs/architecture.md), everything that names it."""
    llm = LLMS[w.llm]
    cell = {
        "stage": "generation",
        "dataset": w.dataset,
        "split": w.split,
        "corpus": corpus_of(w.dataset),
        "serialization": w.serialization,
        "retriever": w.retriever,
        "retriever_settings": _run_settings(w.retriever) if w.retriever != "none" else {},
        "llm": w.llm,
        "backend": llm["backend"],
        "dtype": llm.get("dtype", "auto"),
        "prompt": w.prompt,
        "template_hash": file_hash(template_file(w.dataset, w.prompt)),
        "setting": w.setting,
        "k": int(w.k),
        "max_questions": GENERATION.get("max_questions"),
    }
    return cell


rule evaluate_generation:
    input:
        predictions=f"{RESULTS}/generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/predictions.parquet",
        queries=data_path("{dataset}", "{split}", "queries"),
        answers=data_path("{dataset}", "{split}", "answers"),
    output:
        metrics=f"{RESULTS}/metrics/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/metrics.json",
        per_question=f"{RESULTS}/metrics/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}/per_question.parquet",
    wildcard_constraints:
        retriever=_one_of(["none", *ALL_RUN_NAMES]),
        llm=_names(LLMS),
        prompt=_one_of(STRATEGIES),
        setting=_one_of(SETTINGS),
        k=r"\d+",
    params:
        cell=lambda w: as_arg(_generation_cell(w)),
    log:
        f"{RESULTS}/logs/evaluate_generation/{{dataset}}/{{split}}/{{serialization}}/{{retriever}}/{{llm}}/{{prompt}}/{{setting}}-k{{k}}.log",
    conda:
        "../../envs/evaluation.yaml"
    shell:
        "{CQABENCH} evaluate-generation --dataset {wildcards.dataset:q} --predictions {input.predictions:q} "
        "--queries {input.queries:q} --answers {input.answers:q} --cell {params.cell} "
        "--out-json {output.metrics:q} --out-per-question {output.per_question:q} > {log:q} 2>&1"
