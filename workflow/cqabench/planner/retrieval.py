"""The retrieval stage of a plan: which indexes and runs exist for which dataset split, and where.

Retrieval reads the data stage's corpora and queries, and generation reads its runs; keeping its
planning here, on top of the data stage's (`DataPlan`), lets both be read and tested on their
own. Runs come from configured retrievers, StrategyQA's IR-Q / IR-D decomposition, external
files and pipelines (`cqabench.planner.pipelines`); each retrieval cell is scored by its own
`evaluate_retrieval` job (workflow/rules/retrieval.smk).
"""

from __future__ import annotations

import functools
import shlex
from typing import Any

import cqabench.planner.pipelines as pipelines
from cqabench.common.config_defaults import configured
from cqabench.common.errors import ConfigError
from cqabench.planner.data import DataPlan
from cqabench.retrieval.decomposition import RUN_SUFFIX

# IR-Q / IR-D run names are "{retriever}-{suffix}"
SUFFIX_KIND = {v: k for k, v in RUN_SUFFIX.items()}
# The retriever wildcard of a cell without retrieval (GenerationPlan: closed book, oracle, open
# book): no run may take it, or its RAG rows would be read as such cells and lose their settings.
NO_RETRIEVER = "none"


class RetrievalPlan(DataPlan):
    """Retrievers, their indexes and every run of a dataset split: read, checked, given paths."""

    def _read_retrieval_config(self) -> None:
        c = self.config
        self.tool_retrievers: list[str] = [self.open_book["retriever"]] if self.open_book.get("retriever") else []
        self.retriever_configs: dict[str, dict[str, Any]] = dict(c.get("retrievers") or {})
        self.retrieval: dict[str, Any] = dict(c.get("retrieval") or {})
        self.retrieval_k = int(configured(c, "retrieval", "k"))
        # BEIR's policy for a document whose id is the query's (evaluate_retrieval's --drop-identical-ids)
        self.drop_identical_ids = bool(configured(c, "retrieval", "drop_identical_ids"))
        self.retrieval_retrievers: list[str] = list(self.retrieval.get("retrievers", []))
        # Datasets searched by the configured retrievers (default: all; a dataset without a
        # corpus, such as the sample's TANQ, is left out there rather than indexed empty).
        self.retrieval_datasets: list[str] = list(self.retrieval.get("datasets") or self.datasets)
        self.decomposition: dict[str, Any] = dict(self.retrieval.get("decomposition") or {})
        self.decomposition_k = int(configured(c, "retrieval", "decomposition", "k"))
        self.external_runs: dict[str, dict[str, Any]] = dict(c.get("external_runs") or {})
        # fused and reranked runs, made from other runs (cqabench.planner.pipelines)
        self.pipelines: dict[str, dict[str, Any]] = dict(self.retrieval.get("pipelines") or {})
        # (before check(): the pipeline checks ask run_depth about IR-Q / IR-D runs; a bad kind is
        # left out here and named by check())
        self.decomposition_runs: dict[str, tuple[str, str]] = {
            f"{r}-{RUN_SUFFIX[kind]}": (r, kind)
            for r in self.decomposition.get("retrievers", [])
            for kind in self.decomposition.get("queries", list(RUN_SUFFIX))
            if kind in RUN_SUFFIX
        }

    def _expand_retrieval(self) -> None:
        """Every run of the checked config: pipelines in the order they read each other, and where they exist."""
        self.pipeline_order: list[str] = pipelines.order(self.pipelines)
        self.pipeline_splits: dict[str, set[tuple[str, str]]] = {
            n: s for n, s in pipelines.run_splits(self).items() if n in self.pipelines
        }
        self.all_run_names = sorted(
            {n for ds in self.datasets for sp in self.splits(ds) for n in self.run_names(ds, sp)}
        )

    def _retrieval_problems(self) -> list[str]:
        from cqabench.retrieval import resolve as resolve_retriever
        from cqabench.retrieval.parts import is_sharded

        out = []
        # Each retriever family validates its own settings (unknown keys, enums, sizes) at
        # planning time, so a typo stops the workflow before any job starts.
        for name, settings in self.retriever_configs.items():
            try:
                resolve_retriever(settings)
                is_sharded(settings)
            except ConfigError as exc:
                out.append(f"retrievers.{name}: {exc}")
        unknown = sorted(set(self.retrieval_retrievers) - set(self.retriever_configs))
        if unknown:
            out.append(f"retrieval.retrievers: {unknown} are not defined under `retrievers:`")
        unknown = sorted(set(self.decomposition.get("retrievers", [])) - set(self.retriever_configs))
        if unknown:
            out.append(f"retrieval.decomposition.retrievers: {unknown} are not defined under `retrievers:`")
        for key, names in (("retrieval.datasets", self.retrieval.get("datasets") or []),
                           ("retrieval.decomposition.datasets", self.decomposition.get("datasets") or [])):  # fmt: skip
            bad = sorted(set(names) - set(self.datasets))
            if bad:
                out.append(f"{key}: datasets {bad} are not configured; configured: {self.datasets}")
        for kind in self.decomposition.get("queries", []):
            if kind not in RUN_SUFFIX:
                out.append(f"retrieval.decomposition.queries: {kind!r} is not one of {list(RUN_SUFFIX)}")
        for key, names in (("retrievers", self.retriever_configs), ("external_runs", self.external_runs),
                           ("retrieval.pipelines", self.pipelines)):  # fmt: skip
            if NO_RETRIEVER in names:
                out.append(f"{key}.{NO_RETRIEVER}: the name {NO_RETRIEVER!r} is reserved: it is the retriever of every cell "
                           "without retrieval (closed book, oracle, open book), whose rows carry no retriever "
                           "settings; pick another name")  # fmt: skip
        clash = sorted(set(self.external_runs) & set(self.retriever_configs))
        if clash:
            out.append(f"external_runs: names {clash} are also retriever names; rename them")
        for name, spec in self.external_runs.items():
            ds, sp = spec["dataset"], spec["split"]
            if ds not in self.datasets or sp not in self.config["datasets"][ds]["splits"]:
                out.append(f"external_runs.{name}: {ds}/{sp} is not configured")
            if not (self.env.root / spec["path"]).is_file():
                out.append(f"external_runs.{name}.path: {spec['path']!r} is not a file")
        return out + pipelines.problems(self)

    def run_depth(self, run: str) -> tuple[str, int] | None:
        """(config key, depth) of the ranking a run holds per question; None for an external run,
        whose depth is its file's (generate checks the file: `cqabench.generation.generate.retrieved_docids`)."""
        if run in self.external_runs:
            return None
        if run in self.decomposition_runs:
            return "retrieval.decomposition.k", self.decomposition_k
        if run in self.pipelines:  # what it keeps: its depth (a rerank no deeper than its input, checked)
            return f"retrieval.pipelines.{run}.depth", int(self.pipeline_settings(run)["depth"])
        return "retrieval.k", self.retrieval_k

    def is_neural(self, retriever: str) -> bool:
        return self.retriever_configs[retriever]["type"] != "bm25"

    def index_dir(self, corpus: str, serialization: str, retriever: str) -> str:
        return f"{self.results}/index/{corpus}/{serialization}/{retriever}"

    @functools.cached_property
    def corpus_sizes(self) -> Any:
        """Documents per corpus, as the plan knows them (cqabench.planner.sizes: counted from the
        raw files on disk, else the sizes of the released files in config/sizes.yaml)."""
        from cqabench.planner.sizes import Sizes

        return Sizes(self, {})

    def encode_parts(self, corpus: str, retriever: str) -> int:
        """Part jobs encoding `corpus` for this retriever (dense, SPLADE, ColBERT; 1: the single
        `index` job): ceil(documents / passages_per_part), or `encode_jobs`, never more than the
        corpus' chunks, so no part is empty (cqabench.retrieval.parts.part_count)."""
        from cqabench.retrieval.parts import part_count

        spec = self.retriever_configs[retriever]
        if retriever not in self.sharded_retrievers():
            return 1
        try:
            docs: int | None = self.corpus_sizes.corpus_documents(corpus)
        except ConfigError as exc:
            if spec.get("passages_per_part") is not None:
                raise ConfigError(
                    f"retrievers.{retriever}.passages_per_part: the size of corpus {corpus} is unknown: {exc}"
                ) from None
            docs = None  # encode_jobs: N parts as asked (a part may be empty)
        return part_count(spec, docs)

    def sharded_retrievers(self) -> list[str]:
        """Retrievers whose index is gathered from encode parts (the `gather_index` rule's):
        those with `passages_per_part`, or `encode_jobs` above 1."""
        from cqabench.retrieval.parts import is_sharded

        return [r for r in self.retriever_configs if is_sharded(self.retriever_configs[r])]

    def unsharded_retrievers(self) -> list[str]:
        """Retrievers whose index one `index` job builds: all but the `sharded_retrievers`."""
        sharded = set(self.sharded_retrievers())
        return [r for r in self.retriever_configs if r not in sharded]

    def part_dir(self, corpus: str, serialization: str, retriever: str, part: int, of: int) -> str:
        return f"{self.results}/index_parts/{corpus}/{serialization}/{retriever}/{part}-of-{of}"

    def codec_retrievers(self) -> list[str]:
        """Sharded retrievers whose parts share a codec trained first (ColBERT: the `colbert_codec` rule)."""
        from cqabench.retrieval.parts import needs_codec

        return [r for r in self.sharded_retrievers() if needs_codec(self.retriever_configs[r])]

    def codec_dir(self, corpus: str, serialization: str, retriever: str) -> str:
        return f"{self.results}/index_parts/{corpus}/{serialization}/{retriever}/codec"

    def part_codec(self, corpus: str, serialization: str, retriever: str) -> list[str]:
        """The codec folder the parts of this index are encoded with and gathered by ([] if none)."""
        return [self.codec_dir(corpus, serialization, retriever)] if retriever in self.codec_retrievers() else []

    def codec_arg(self, corpus: str, serialization: str, retriever: str) -> str:
        return " ".join(f"--codec {shlex.quote(p)}" for p in self.part_codec(corpus, serialization, retriever))

    def index_parts(self, corpus: str, serialization: str, retriever: str) -> list[str]:
        """The part folders the index of (corpus, serialization, retriever) is gathered from, in order."""
        if retriever not in self.sharded_retrievers():
            return []
        n = self.encode_parts(corpus, retriever)
        return [self.part_dir(corpus, serialization, retriever, i, n) for i in range(n)]

    def run_file(self, dataset: str, split: str, serialization: str, run: str, ext: str = "parquet") -> str:
        return f"{self.results}/runs/{dataset}/{split}/{serialization}/{run}.{ext}"

    def decomposition_runs_of(self, dataset: str) -> list[str]:
        return list(self.decomposition_runs) if dataset in self.decomposition.get("datasets", []) else []

    def external_runs_of(self, dataset: str, split: str) -> list[str]:
        return [n for n, s in self.external_runs.items() if s["dataset"] == dataset and s["split"] == split]

    def run_names(self, dataset: str, split: str) -> list[str]:
        """Every run of a (dataset, split): what the evaluation and generation stages iterate over."""
        ours = self.retrieval_retrievers if dataset in self.retrieval_datasets else []
        return (
            ours
            + self.decomposition_runs_of(dataset)
            + self.external_runs_of(dataset, split)
            + self.pipelines_of(dataset, split)
        )

    def pipelines_of(self, dataset: str, split: str) -> list[str]:
        """The fused and reranked runs of a (dataset, split): those all of whose inputs exist there,
        each after the pipelines it reads (cqabench.planner.pipelines)."""
        return [n for n in self.pipeline_order if (dataset, split) in self.pipeline_splits[n]]

    def pipelines_of_type(self, kind: str) -> list[str]:
        """The pipelines of one `type` (`fusion`: the fuse_runs rule's; `rerank`: rerank_run's), in
        config order."""
        return [n for n, s in self.pipelines.items() if s["type"] == kind]

    def pipeline_settings(self, name: str) -> dict[str, Any]:
        """A pipeline's own settings, defaults filled in (its rule's params: a change reruns it)."""
        spec = self.pipelines[name]
        held = pipelines.held_by_inputs(spec, self.run_depth)
        return pipelines.resolve(spec, self.retrieval_k, held[1] if held else None)

    def pipeline_inputs(self, w: Any) -> dict[str, Any]:
        """The fuse / rerank rule's inputs: the input runs' Parquet files (in the order the settings
        name them), the queries, and for a rerank the corpus whose text it reads."""
        spec = self.pipelines[w.name]
        if (w.dataset, w.split) not in self.pipeline_splits[w.name]:
            raise ConfigError(f"retrieval.pipelines.{w.name}: no run of {w.dataset}/{w.split} "
                              f"(its inputs exist for {sorted(self.pipeline_splits[w.name])})")  # fmt: skip
        runs = [self.run_file(w.dataset, w.split, w.serialization, r, "parquet") for r in pipelines.inputs_of(spec)]
        inputs: dict[str, Any] = {"runs": runs, "queries": self.data_path(w.dataset, w.split, "queries")}
        if spec["type"] == "rerank":
            inputs["corpus"] = self.corpus_path(self.corpus_of(w.dataset))
        return inputs

    def pipeline_uses_gpu(self, name: str) -> bool:
        """Whether a pipeline's job runs a model on a GPU (a rerank with device cuda)."""
        spec = self.pipelines.get(name) or {}
        return spec.get("type") == "rerank" and str(spec.get("device", "cpu")) != "cpu"

    def run_settings(self, run: str) -> dict[str, Any]:
        """The retriever_settings recorded in a cell: the retriever's config, or what made the run."""
        if run in self.external_runs:
            return {"external": True, **self.external_runs[run]}
        if run in self.retriever_configs:
            return {**self.retriever_configs[run], **self._recorded(run), "k": self.retrieval_k}
        if run in self.pipelines:  # its settings, and those of every run it reads (recursively)
            inputs = pipelines.inputs_of(self.pipelines[run])
            return {**self.pipeline_settings(run), "inputs": {r: self.run_settings(r) for r in inputs}}
        retriever, kind = self.decomposition_runs[run]
        return {
            **self.retriever_configs[retriever],
            **self._recorded(retriever),
            "queries": kind,
            "k": self.decomposition_k,
        }

    def _recorded(self, retriever: str) -> dict[str, Any]:
        """Resolved settings a row records beyond the retriever's config (its model's dtype)."""
        from cqabench.retrieval import recorded

        return recorded(self.retriever_configs[retriever])

    def external_input(self, w: Any) -> str:
        spec = self.external_runs[w.name]
        if (spec["dataset"], spec["split"]) != (w.dataset, w.split):
            raise ConfigError(
                f"external run {w.name} belongs to {spec['dataset']}/{spec['split']}, not {w.dataset}/{w.split}"
            )
        return spec["path"]

    def retrieval_cell(self, dataset: str, split: str, serialization: str, run: str) -> dict[str, Any]:
        """A retrieval cell as recorded in its metrics.json (the evaluate_retrieval job's `--cell`)."""
        return {"dataset": dataset, "split": split, "corpus": self.corpus_of(dataset),
                "relevance": self.relevance_of(dataset), "serialization": serialization, "retriever": run,
                "retriever_settings": self.run_settings(run)}  # fmt: skip

    def retrieval_cells(self) -> list[tuple[str, str, str, str]]:
        """(dataset, split, serialization, run) of every retrieval cell (its evaluate_retrieval job)."""
        return [(ds, sp, ser, run) for ds in self.datasets for sp in self.splits(ds) for ser in self.serializations
                for run in self.run_names(ds, sp)]  # fmt: skip

    def retrieval_metrics_file(self, ds: str, sp: str, ser: str, run: str, name: str = "metrics.json") -> str:
        """A retrieval cell's metrics.json, or its per_query.parquet beside it."""
        return f"{self.results}/retrieval/{ds}/{sp}/{ser}/{run}/{name}"

    def unplanned_run(self, dataset: str, split: str, run: str) -> str | None:
        """Why `run` is no run of (dataset, split), or None when it is one (`run_names`)."""
        names = self.run_names(dataset, split)
        if run in names:
            return None
        if run in self.retriever_configs and run not in self.retrieval_retrievers:
            return (
                f"retriever {run!r} is defined under retrievers: but not listed in retrieval.retrievers, so the "
                "config plans no run of it: add it to retrieval.retrievers (config/README.md)"
            )
        return f"{run!r} is no run of {dataset}/{split}; its runs: {', '.join(names) or 'none'}"

    def retrieval_inputs(self, w: Any) -> dict[str, str]:
        """The evaluate_retrieval rule's inputs; a run the config does not plan for the split is refused
        with the file asked for and the reason (not Snakemake's bare MissingRuleException)."""
        why = self.unplanned_run(w.dataset, w.split, w.run)
        if why is not None:
            raise ConfigError(f"{self.retrieval_metrics_file(w.dataset, w.split, w.serialization, w.run)}: {why}")
        return {"run": self.run_file(w.dataset, w.split, w.serialization, w.run),
                "qrels": self.data_path(w.dataset, w.split, "qrels"),
                "queries": self.data_path(w.dataset, w.split, "queries")}  # fmt: skip

    def retrieval_targets(self) -> list[str]:
        return [self.retrieval_metrics_file(*c) for c in self.retrieval_cells()]
