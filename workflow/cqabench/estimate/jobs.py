"""Every job a plan makes, with its rule, wildcards and the jobs it waits for.

The same jobs `snakemake -n --forceall` plans (tests/estimate/test_estimate.py checks the count per rule
against docs/full_reproduction.md, which tests/workflow/test_fidelity_config.py checks against Snakemake),
derived from `cqabench.planner.Plan` alone so the estimate runs in seconds without Snakemake's
DAG. A job's id is its rule and wildcards; `deps` are ids, for the critical path and makespan.
Only what decides cost is modelled: a job that Snakemake would skip because its output exists is
still listed (the estimate is of the whole config, like `--forceall`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from cqabench.planner.pipelines import inputs_of as pipeline_inputs
from cqabench.planner import CELL_FIELDS
from cqabench.retrieval.decomposition import RUN_SUFFIX

# The rules in the order of the workflow's stages (tables list them in this order).
RULES = ("download", "prepare", "pool_corpus", "export_beir", "index", "colbert_codec", "encode_part",
         "gather_index", "search", "decompose_search", "import_run", "fuse_runs", "rerank_run", "eval_retrieval",
         "convert_model",
         "generate_batch", "generate_batch_share", "cell_spec", "generate", "evaluate_generation", "aggregate", "table", "report_tables",
         "report_plots", "estimate", "report_page")
# One `table_<id>` rule per paper table (workflow/rules/report.smk): costed as the family "table".
TABLE_PREFIX = "table_"


def rule_family(rule: str) -> str:
    """The rule a job's cost model and tables file it under: `table_<id>` -> "table"."""
    return "table" if rule.startswith(TABLE_PREFIX) else rule


@dataclass
class Job:
    rule: str
    wildcards: dict[str, str]
    deps: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return job_id(self.rule, self.wildcards)


def job_id(rule: str, wildcards: dict[str, Any]) -> str:
    return rule + "(" + ",".join(f"{k}={wildcards[k]}" for k in sorted(wildcards)) + ")"


def _ids(jobs: list[Job]) -> list[str]:
    return [j.id for j in jobs]


def plan_jobs(plan: Any) -> list[Job]:
    """The jobs of the plan in stage order (see the module docstring)."""
    return list(_jobs(plan))


def _jobs(plan: Any) -> Iterator[Job]:
    root = plan.env.root
    # ---- data ----
    # (the resolved config the jobs read, results/<name>/config.json, is no job: Snakemake's
    # process writes it before planning, cqabench.planner.resolved_config)
    downloads: dict[str, Job] = {}
    prepares: dict[tuple[str, str], Job] = {}
    for ds in plan.datasets:
        for sp in dict.fromkeys(plan.splits(ds) + plan.corpus_splits(ds)):
            deps = []
            for spec in plan.config["datasets"][ds]["files"][sp].values():
                if not (root / plan.raw_dir / spec["path"]).exists():
                    job = downloads.setdefault(spec["path"], Job("download", {"path": spec["path"]}))
                    deps.append(job.id)
            prepares[(ds, sp)] = Job("prepare", {"dataset": ds, "split": sp}, deps)
    yield from downloads.values()
    yield from prepares.values()
    cells = plan.generation_cells()
    open_book = any(c[6] == "open-book" for c in cells)
    corpora = list(plan.corpora) + ([c for c in plan.tool_corpora if c not in plan.corpora] if open_book else [])
    pools = {c: Job("pool_corpus", {"corpus": c}, [prepares[(ds, sp)].id for ds in plan.corpus_members(c)
                                                   for sp in plan.corpus_splits(ds)]) for c in corpora}
    yield from pools.values()
    exports = []
    if plan.config.get("export_beir", True):
        exports = [Job("export_beir", {"dataset": ds, "serialization": ser, "split": sp},
                       [pools[plan.corpus_of(ds)].id, prepares[(ds, sp)].id])
                   for ds in plan.datasets for sp in plan.splits(ds) for ser in plan.serializations]
    yield from exports
    # ---- indexes ----
    wanted: dict[tuple[str, str, str], None] = {}
    for ds in plan.datasets:
        retrievers = list(plan.retrieval_retrievers) if ds in plan.retrieval_datasets else []
        retrievers += [r for r, _ in (plan.decomposition_runs[n] for n in plan.decomposition_runs_of(ds))]
        for r in retrievers:
            for ser in plan.serializations:
                wanted[(plan.corpus_of(ds), ser, r)] = None
    if open_book:
        for c in plan.tool_corpora:
            for r in plan.tool_retrievers:
                for ser in plan.serializations:
                    wanted[(c, ser, r)] = None
    index_of: dict[tuple[str, str, str], str] = {}
    for corpus, ser, r in wanted:
        base = {"corpus": corpus, "serialization": ser, "retriever": r}
        n = plan.encode_jobs(r)
        if n <= 1:
            job = Job("index", base, [pools[corpus].id])
            index_of[(corpus, ser, r)] = job.id
            yield job
            continue
        deps = [pools[corpus].id]
        if r in plan.codec_retrievers():
            codec = Job("colbert_codec", base, [pools[corpus].id])
            yield codec
            deps.append(codec.id)
        parts = [Job("encode_part", {**base, "part": str(i), "parts": str(n)}, list(deps)) for i in range(n)]
        yield from parts
        gather = Job("gather_index", base, deps + _ids(parts))
        index_of[(corpus, ser, r)] = gather.id
        yield gather
    # ---- runs ----
    run_of: dict[tuple[str, str, str, str], str] = {}
    for ds in plan.datasets:
        for sp in plan.splits(ds):
            for ser in plan.serializations:
                index = lambda r: index_of[(plan.corpus_of(ds), ser, r)]  # noqa: E731
                if ds in plan.retrieval_datasets:
                    for r in plan.retrieval_retrievers:
                        job = Job("search", {"dataset": ds, "split": sp, "serialization": ser, "retriever": r},
                                  [index(r), prepares[(ds, sp)].id])
                        run_of[(ds, sp, ser, r)] = job.id
                        yield job
                for name in plan.decomposition_runs_of(ds):
                    r, kind = plan.decomposition_runs[name]
                    job = Job("decompose_search", {"dataset": ds, "split": sp, "serialization": ser, "retriever": r,
                                                   "kind": RUN_SUFFIX[kind]}, [index(r), prepares[(ds, sp)].id])
                    run_of[(ds, sp, ser, name)] = job.id
                    yield job
                for name in plan.external_runs_of(ds, sp):
                    job = Job("import_run", {"dataset": ds, "split": sp, "serialization": ser, "name": name},
                              [prepares[(ds, sp)].id])
                    run_of[(ds, sp, ser, name)] = job.id
                    yield job
                for name in plan.pipelines_of(ds, sp):  # after the runs they read (Plan.pipeline_order)
                    spec = plan.pipelines[name]
                    deps = [run_of[(ds, sp, ser, r)] for r in pipeline_inputs(spec)] + [prepares[(ds, sp)].id]
                    if spec["type"] == "rerank":
                        deps.append(pools[plan.corpus_of(ds)].id)
                    rule = "fuse_runs" if spec["type"] == "fusion" else "rerank_run"
                    job = Job(rule, {"dataset": ds, "split": sp, "serialization": ser, "name": name}, deps)
                    run_of[(ds, sp, ser, name)] = job.id
                    yield job
    evals = [Job("eval_retrieval", {"dataset": ds, "split": sp, "serialization": ser, "run": run},
                 [run_of[(ds, sp, ser, run)], prepares[(ds, sp)].id])
             for ds in plan.datasets for sp in plan.splits(ds) for ser in plan.serializations
             for run in plan.run_names(ds, sp)]
    yield from evals
    # ---- generation ----
    llms = list(dict.fromkeys(c[4] for c in cells))
    converts = {llm: Job("convert_model", {"llm": llm}) for llm in llms if plan.is_gguf(llm)}
    yield from converts.values()

    def cell_deps(c: tuple) -> list[str]:
        ds, sp, ser, retriever, llm, _, setting, _ = c
        deps = [prepares[(ds, sp)].id]
        if llm in converts:
            deps.append(converts[llm].id)
        if setting in ("rag", "oracle"):
            deps.append(pools[plan.corpus_of(ds)].id)
        if setting == "rag":
            deps.append(run_of[(ds, sp, ser, retriever)])
        if setting == "open-book":
            tool = plan.open_book["corpus"]["name"]
            deps += [pools[tool].id, index_of[(tool, ser, retriever)]]
        return deps

    batches: dict[str, list[Job]] = {}  # a batch LLM's job, or one per share (generation.batch_jobs)
    for llm in plan.gen_batch_llms:
        mine = [c for c in cells if c[4] == llm]
        if mine:
            deps = sorted({d for c in mine for d in cell_deps(c)})
            shares = plan.batch_shares(llm)
            batches[llm] = ([Job("generate_batch_share", {"llm": llm, "share": s}, deps) for s in shares]
                            or [Job("generate_batch", {"llm": llm}, deps)])
    yield from (j for jobs in batches.values() for j in jobs)
    gens, specs = [], []
    for c in cells:
        w = dict(zip(CELL_FIELDS, (*c[:7], str(c[7]))))
        deps = cell_deps(c)
        if c[4] in batches and plan.in_batch(SimpleNamespace(**w)):
            # a batched cell's own job reads its spec.json (rule cell_spec) and the batch manifest
            specs.append(Job("cell_spec", w, list(deps)))
            deps = deps + [specs[-1].id, *(b.id for b in batches[c[4]])]
        gens.append(Job("generate", w, deps))
    yield from specs
    yield from gens
    answer_evals = [Job("evaluate_generation", g.wildcards, [g.id, prepares[(g.wildcards["dataset"], g.wildcards["split"])].id])
                    for g in gens]
    yield from answer_evals
    # ---- report ----
    aggregate = Job("aggregate", {}, _ids(evals) + _ids(answer_evals)
                    + [prepares[(ds, sp)].id for ds in plan.datasets for sp in plan.splits(ds)])
    yield aggregate
    # one job per paper table: the metric files of its cells (Plan.table_inputs), and for a
    # per-question table the prepared splits
    eval_of = {tuple(e.wildcards[k] for k in ("dataset", "split", "serialization", "run")): e.id for e in evals}
    answer_of = {tuple(str(e.wildcards[f]) for f in CELL_FIELDS): e.id for e in answer_evals}
    table_jobs = []
    for table in plan.expected_table_ids():
        cells = plan.table_cells(table)
        deps = [eval_of[tuple(map(str, c))] for c in cells["retrieval"] if tuple(map(str, c)) in eval_of]
        deps += [answer_of[tuple(map(str, c))] for c in cells["generation"] if tuple(map(str, c)) in answer_of]
        table_jobs.append(Job(TABLE_PREFIX + table, {}, deps))
    yield from table_jobs
    tables = Job("report_tables", {}, [aggregate.id])
    plots = Job("report_plots", {}, [aggregate.id])
    estimate = Job("estimate", {}, [])
    yield from (tables, plots, estimate)
    yield Job("report_page", {}, [tables.id, plots.id, estimate.id, *_ids(table_jobs), *_ids(exports),
                                  *(p.id for p in pools.values()), *(p.id for p in prepares.values())])
