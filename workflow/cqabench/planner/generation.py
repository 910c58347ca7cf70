"""The generation stage of a plan: which answer cells exist, and what each generate job is given.

Generation is the stage whose matrix grows fastest (datasets x splits x serializations x LLMs x
prompts x settings x runs x k) and whose jobs cost the most, so its expansion, its checks and
its jobs' inputs and settings (rerun triggers) are planned here together, on top of the data
and retrieval stages' paths (`RetrievalPlan`). A cell asked for by its path is checked by
`cqabench.planner.cells`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from cqabench.common.config_defaults import configured, default
from cqabench.common.errors import ConfigError
from cqabench.common.layout import RESULTS_ROOT
from cqabench.generation.cell import Cell
from cqabench.generation.prompts import SETTINGS, STRATEGIES, family_of, file_hash
from cqabench.generation.shares import share_name
from cqabench.planner.cells import problems as cell_problems
from cqabench.planner.retrieval import RetrievalPlan
from cqabench.planner.rule_text import as_arg

GEN_ENVS = {"vllm": "../../envs/vllm.yaml", "hf": "../../envs/generation.yaml", "openai": "../../envs/generation.yaml"}
PER_CELL_SETTINGS = ("max_questions", "oracle_distractors", "oracle_context", "open_book")
# The open-book loop's limits (cqabench.generation.agent.loop.Limits, defaults the schema's; max_new_tokens
# absent: generation.sampling's); each is a result column.
OPEN_BOOK_LIMITS = ("max_steps", "max_tool_chars", "max_total_tokens", "max_new_tokens")
# generation.cache_dir's default (one folder per LLM below it), named in the messages about a cache elsewhere
LLM_CACHE_DIR: str = default("generation", "cache_dir")
GGUF_PREFIXES = ("gguf-package:", "gguf:")


class GenerationPlan(RetrievalPlan):
    """LLMs, prompts and settings: the cell grid, its checks, and every generation job's inputs."""

    _cells: list[Cell] | None = None  # generation_cells, once expanded
    _grid: set[Cell] | None = None

    def _read_generation_config(self) -> None:
        c = self.config
        g = self.generation = dict(c.get("generation") or {})
        self.llms: dict[str, dict[str, Any]] = dict(c.get("llms") or {})
        self.gen_llms: list[str] = list(g.get("llms", []))
        self.gen_prompts: list[str] = list(g.get("prompts", []))
        self.gen_settings: list[str] = list(g.get("settings", []))
        self.gen_rag_runs: list[str] = list(g.get("rag_retrievers", []))
        self.gen_k: list[int] = [int(k) for k in g.get("k", [5])]
        self.prompts_dir: str = configured(c, "generation", "prompts_dir")
        self.llm_cache_dir: str = configured(c, "generation", "cache_dir")  # shared by every config
        self.models_dir = f"{self.results}/models"
        self.gen_batch_llms: list[str] = list(g.get("batch_llms", []))
        self.gen_batch_jobs: Any = g.get("batch_jobs", 1)  # an int, or {llm: int} (batch_jobs_of)
        self.oracle_distractors: dict[str, int] = dict(g.get("oracle_distractors") or {})
        self.oracle_context: dict[str, str] = dict(g.get("oracle_context") or {})
        self.gen_seed = int(configured(c, "generation", "seed"))
        self.threads = int(configured(c, "generation", "threads"))  # a generate job's (a batched cell's: 1)

    def _expand_generation(self) -> None:
        """The LLMs whose GGUF file a `convert_model` job turns into a model folder first."""
        self.gguf_llms = [n for n in self.llms if self.is_gguf(n)]

    def _generation_problems(self) -> list[str]:
        out = []
        g = self.generation
        for key, names in (("generation.llms", self.gen_llms), ("generation.batch_llms", self.gen_batch_llms)):
            bad = sorted(set(names) - set(self.llms))
            if bad:
                out.append(f"{key}: {bad} are not defined under `llms:`; defined: {sorted(self.llms)}")
        out += self._batch_jobs_problems()
        bad = sorted(set(self.gen_prompts) - set(STRATEGIES))
        if bad:
            out.append(f"generation.prompts: unknown {bad}; valid: {list(STRATEGIES)}")
        bad = sorted(set(self.gen_settings) - set(SETTINGS))
        if bad:
            out.append(f"generation.settings: unknown {bad}; valid: {list(SETTINGS)}")
        if "rag" in self.gen_settings and not (self.gen_rag_runs and self.gen_k):
            out.append("generation.settings has rag: set generation.rag_retrievers and generation.k")
        if "open-book" in self.gen_settings:
            out += self._open_book_problems()
        for ds in self.datasets:
            try:
                family_of(ds, g.get("families"))  # every dataset must map to a template family
            except ConfigError as exc:
                out.append(f"generation.families: {exc}")
        for key in ("families", "oracle_distractors", "oracle_context", "max_questions_by_dataset"):
            bad = sorted(set(g.get(key) or {}) - set(self.datasets))
            if bad:
                out.append(f"generation.{key}: datasets {bad} are not configured; configured: {self.datasets}")
        out += self._oracle_context_problems()
        for name, llm in self.llms.items():
            if llm["backend"] == "openai" and str(llm["source"]).startswith(GGUF_PREFIXES):
                out.append(
                    f"llms.{name}.source: backend openai sends `source` to an API as the model name; "
                    f"{llm['source']!r} is a local GGUF file (use backend hf or vllm for it)"
                )
        return out

    def _batch_jobs_problems(self) -> list[str]:
        """generation.batch_jobs: a positive integer, or one per LLM of generation.batch_llms."""
        raw = self.gen_batch_jobs
        counts = raw if isinstance(raw, dict) else {"": raw}
        out = []
        for llm, n in counts.items():
            key = f"generation.batch_jobs.{llm}" if llm else "generation.batch_jobs"
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                out.append(f"{key}: expected a positive integer (jobs per batch LLM), got {n!r}")
        bad = sorted(set(counts) - {""} - set(self.gen_batch_llms)) if isinstance(raw, dict) else []
        if bad:
            out.append(f"generation.batch_jobs: {bad} are not in generation.batch_llms {self.gen_batch_llms}")
        return out

    def _oracle_context_problems(self) -> list[str]:
        """`facts` exists only where the queries carry annotators' facts, and has no distractors
        to draw (they are other questions' gold documents)."""
        from cqabench.generation.oracle import CONTEXT_SOURCES, FACTS_DATASETS

        out = []
        for ds, source in self.oracle_context.items():
            if source not in CONTEXT_SOURCES:
                out.append(f"generation.oracle_context.{ds}: {source!r} is not one of {list(CONTEXT_SOURCES)}")
            elif source == "facts" and ds not in FACTS_DATASETS:
                out.append(
                    f"generation.oracle_context.{ds}: facts exist only for {list(FACTS_DATASETS)} "
                    "(the annotators' facts in queries.parquet); use gold"
                )
            elif source == "facts" and int(self.oracle_distractors.get(ds, 0)):
                out.append(
                    f"generation.oracle_context.{ds}: facts cannot take generation.oracle_distractors "
                    "(distractors are other questions' gold documents); set one of them"
                )
        return out

    def _open_book_problems(self) -> list[str]:
        where = "generation.open_book"
        ob = self.open_book
        if not ob or not ob.get("corpus") or not ob.get("retriever"):
            return ["generation.settings has open-book: set generation.open_book (datasets, corpus, retriever)"]
        out = []
        for key, named in (
            ("datasets", ob.get("datasets") or []),
            ("corpus.datasets", ob["corpus"].get("datasets") or []),
        ):
            bad = sorted(set(named) - set(self.datasets))
            if bad:
                out.append(f"{where}.{key}: datasets {bad} are not configured; configured: {self.datasets}")
        name = ob["corpus"].get("name")
        if name in set(self.datasets) | set(self.pooled):
            out.append(f"{where}.corpus.name: {name!r} is already a dataset or pooled corpus; pick another name")
        retriever = ob["retriever"]
        if self.retriever_configs.get(retriever, {}).get("type") != "bm25":
            out.append(f"{where}.retriever: {retriever!r} must name a bm25 retriever under `retrievers:`")
        return out

    def _cache_dir_problems(self) -> list[str]:
        """generation.cache_dir must not lie inside a folder a rule outputs whole (Snakemake deletes it
        on a rebuild), nor under results/, which `make clean` removes: the cache holds paid answers."""
        key = "generation.cache_dir" if "cache_dir" in self.generation else "generation.cache_dir (default)"
        cache = (self.env.root / self.llm_cache_dir).resolve()
        for what, folder in (
            ("index", f"{self.results}/index"),
            ("index part", f"{self.results}/index_parts"),
            ("BEIR export", f"{self.results}/beir"),
            ("converted model", self.models_dir),
        ):
            if cache.is_relative_to((self.env.root / folder).resolve()):
                return [
                    f"{key}: {self.llm_cache_dir!r} lies inside {folder!r}, whose {what} folders are deleted "
                    f"and rebuilt whole, the item cache with them; put it outside, e.g. {LLM_CACHE_DIR}"
                ]
        if cache.is_relative_to((self.env.root / RESULTS_ROOT).resolve()):
            return [
                f"{key}: {self.llm_cache_dir!r} lies inside {RESULTS_ROOT}/, which `make clean` removes, the "
                f"item cache with it; put it outside, e.g. {LLM_CACHE_DIR} (a cache there now keeps its items "
                f"when moved: mv {self.llm_cache_dir} {LLM_CACHE_DIR})"
            ]
        return []

    def legacy_cache_problem(self) -> str:
        """An item cache left at the default of before one results tree per config ("" if none).

        Its answers (paid API calls too) would silently be asked again from the new default, so
        the workflow stops on it (common.smk); not part of `problems`, since it is a state of the
        checkout, not of the config.
        """
        legacy = f"{RESULTS_ROOT}/cache/llm"
        if not (self.env.root / legacy).is_dir():
            return ""
        key = "generation.cache_dir" if "cache_dir" in self.generation else "generation.cache_dir (default)"
        return (
            f"{key}: the item cache moved from {legacy} to {LLM_CACHE_DIR} (shared by every config, kept by "
            f"`make clean`); move the old one so its items are used: mv {legacy} {self.llm_cache_dir} "
            f"(if {self.llm_cache_dir} exists, move the model folders inside it one by one)"
        )

    def _rag_run_problems(self) -> list[str]:
        """Each generation.rag_retrievers name is a run, deep enough for every k."""
        # A name that is no run anywhere is a typo: it would silently plan no RAG cell for it.
        bad = sorted(set(self.gen_rag_runs) - set(self.all_run_names))
        out = [f"generation.rag_retrievers: {bad} name no run; runs: {self.all_run_names}"] if bad else []
        return out + self._rag_depth_problems()

    def _rag_depth_problems(self) -> list[str]:
        """A RAG k deeper than its run would give fewer documents than every row says it had."""
        if "rag" not in self.gen_settings:
            return []
        out = []
        for run in [r for r in self.gen_rag_runs if r in self.all_run_names]:
            depth = self.run_depth(run)
            if depth is None:
                continue
            for k in sorted({k for k in self.gen_k if k > depth[1]}):
                out.append(
                    f"generation.k: {k} exceeds {depth[0]}: {depth[1]} for rag_retrievers {run} "
                    f"(the run holds at most {depth[1]} documents per question)"
                )
        return out

    def _template_problems(self) -> list[str]:
        """Every (prompt, template family) of the planned cells has its template, open-book its own."""
        if not (self.gen_llms and self.gen_prompts):
            return []
        out = []
        needed = sorted({(self.template_family(ds), p) for ds in self.datasets for p in self.gen_prompts})
        for family, prompt in needed:
            path = f"{self.prompts_dir}/{prompt}/{family}.txt"
            if not (self.env.root / path).is_file():
                out.append(f"generation.prompts_dir: template {path!r} (prompt {prompt}, family {family}) is missing")
        if "open-book" in self.gen_settings:
            for ds in self.open_book.get("datasets") or []:
                for prompt in self.gen_prompts:
                    path = self.template_file(ds, prompt, "open-book")
                    if not (self.env.root / path).is_file():
                        out.append(f"generation.prompts_dir: open-book template {path!r} (prompt {prompt}) is missing")
        return out

    def is_gguf(self, llm: str) -> bool:
        return str(self.llms[llm]["source"]).startswith(GGUF_PREFIXES)

    def python_role(self, llm: str) -> str:
        """Which interpreter runs an LLM's generation jobs, by a name that is the same in every
        checkout (the rules' params carry it, never the path): `vllm_gpu` (vLLM's CUDA build, a
        model on a GPU), `vllm` (its CPU build), `conda` (envs/vllm.yaml's under conda), else
        `project` (the one running Snakemake)."""
        if self.llms[llm]["backend"] == "vllm":
            if self.env.conda:
                return "conda"
            return "vllm_gpu" if self.uses_gpu(llm) else "vllm"
        return "project"

    def python_for(self, llm: str) -> str:
        """The interpreter of an LLM's generation jobs (`python_role`), as a shell word."""
        return {
            "conda": "python",
            "vllm_gpu": self.env.vllm_gpu_python,
            "vllm": self.env.vllm_python,
            "project": self.env.python,
        }[self.python_role(llm)]

    def uses_gpu(self, llm: str) -> bool:
        backend, device = self.llms[llm]["backend"], str(self.llms[llm].get("device", ""))
        if backend == "vllm":
            return device != "cpu"  # vLLM's own default is the GPU build
        return backend == "hf" and (device or "cpu") != "cpu"

    def not_planned_cells(self) -> list[dict[str, str]]:
        """Configured cells left out of the plan, with the reason the report prints."""
        out = []
        for ds in self.datasets:
            for sp in self.splits(ds):
                has, reason = self.gold_evidence[(ds, sp)]
                if "oracle" in self.gen_settings and not has and self.oracle_context_of(ds) == "gold":
                    out.append({"dataset": ds, "split": sp, "setting": "oracle", "reason": reason})
                if "rag" in self.gen_settings and not [r for r in self.gen_rag_runs if r in self.run_names(ds, sp)]:
                    out.append({"dataset": ds, "split": sp, "setting": "rag",
                                "reason": "no run of generation.rag_retrievers exists for it (not in retrieval.datasets)"})  # fmt: skip
        return out

    def missing_api_keys(self, environ: Mapping[str, str], llms: Sequence[str] | None = None) -> list[tuple[str, str]]:
        """(llm, variable) of every openai LLM of `llms` (default: generation.llms) whose API key
        variable is not set. The workflow passes the LLMs of the jobs it is about to run, so a run
        that calls no API (data, retrieval, a retrieval table) needs no key."""
        wanted = [
            (name, self.llms[name].get("api_key_env") or "OPENAI_API_KEY")
            for name in (self.gen_llms if llms is None else sorted(set(llms)))
            if name in self.llms and self.llms[name]["backend"] == "openai"
        ]
        return [(name, env) for name, env in wanted if not environ.get(env)]

    def generation_cells(self) -> list[Cell]:
        """Every configured cell, in the grid's order (dataset, split, serialization, LLM, prompt, setting).

        rag takes each configured run that exists for the (dataset, split), with each k; oracle
        is planned only where the split has gold documents; every other setting (closed, and
        any setting cqabench.generation.prompts.SETTINGS adds) takes retriever "none" and k 0.
        """
        if self._cells is not None:
            return self._cells
        cells: list[Cell] = []
        for ds in self.datasets:
            for sp in self.splits(ds):
                runs = [r for r in self.gen_rag_runs if r in self.run_names(ds, sp)]
                for ser in self.serializations:
                    for llm in self.gen_llms:
                        for prompt in self.gen_prompts:
                            for setting in self.gen_settings:
                                if setting == "rag":
                                    cells += [
                                        Cell(ds, sp, ser, r, llm, prompt, "rag", k) for r in runs for k in self.gen_k
                                    ]
                                elif setting == "open-book":  # the tool retriever; k 1: WikiSearch shows one article
                                    if ds in self.open_book.get("datasets", []):
                                        cells.append(
                                            Cell(ds, sp, ser, self.open_book["retriever"], llm, prompt, "open-book", 1)
                                        )
                                elif (
                                    setting == "oracle"
                                    and not self.gold_evidence[(ds, sp)][0]
                                    and self.oracle_context_of(ds) == "gold"
                                ):
                                    continue  # no gold documents: an "oracle" cell would be closed-book
                                else:
                                    cells.append(Cell(ds, sp, ser, "none", llm, prompt, setting, 0))
        self._cells = cells
        return cells

    def generation_dir(self) -> str:
        """The folder holding one folder per generation cell (`Cell.PATTERN`): predictions, summary."""
        return f"{self.results}/generation"

    def generation_file(self, cell: Any, name: str = "predictions.parquet") -> str:
        """A generation cell's predictions.parquet (or its summary.json, `name`); `cell` is a Cell
        or the wildcards of one, whose text it keeps (`Cell.label_of`)."""
        return f"{self.generation_dir()}/{Cell.label_of(cell)}/{name}"

    def generation_targets(self) -> list[str]:
        return [self.generation_file(c) for c in self.generation_cells()]

    def checked_cell(self, w: Any, path: str) -> Cell:
        """The cell that wildcards (or a Cell) name, once the config can make it; else refused,
        naming `path` (the file asked for) and every reason."""
        why = cell_problems(self, Cell.texts_of(w))
        if why:
            raise ConfigError(f"{path}: the config cannot make this cell: " + "; ".join(why))
        return Cell.from_wildcards(w)

    def in_batch(self, w: Any) -> bool:
        """Whether the cell (or the wildcards of one) has its answers from its model's engine batch
        (a grid cell of a batch LLM)."""
        cell = Cell.from_wildcards(w)
        return cell.llm in self.gen_batch_llms and cell.llm in self.gen_llms and cell in self._grid_set()

    def _grid_set(self) -> set[Cell]:
        if self._grid is None:
            self._grid = set(self.generation_cells())
        return self._grid

    def template_family(self, dataset: str) -> str:
        return family_of(dataset, self.generation.get("families"))

    def template_file(self, dataset: str, prompt: str, setting: str | None = None) -> str:
        """The cell's template; open-book cells have their own (`<family>.open-book.txt`: the tool format)."""
        suffix = ".open-book" if setting == "open-book" else ""
        return f"{self.prompts_dir}/{prompt}/{self.template_family(dataset)}{suffix}.txt"

    def max_questions_of(self, dataset: str) -> int | None:
        """The explicit question cap of a dataset: its own entry, else the general one (None = all)."""
        by_dataset = self.generation.get("max_questions_by_dataset") or {}
        return by_dataset[dataset] if dataset in by_dataset else self.generation.get("max_questions")

    def distractors_of(self, dataset: str, setting: str) -> int:
        return int(self.oracle_distractors.get(dataset, 0)) if setting == "oracle" else 0

    def oracle_context_of(self, dataset: str) -> str:
        """What the dataset's oracle prompts show: `gold` (default) or `facts` (cqabench.generation.oracle)."""
        return str(self.oracle_context.get(dataset) or "gold")

    def context_source(self, dataset: str, setting: str) -> str:
        """What a cell's prompts show besides the question (the `context_source` result column):
        none (closed-book), retrieved (RAG), gold or facts (oracle), tools (open-book)."""
        if setting == "oracle":
            return self.oracle_context_of(dataset)
        return {"closed": "none", "rag": "retrieved", "open-book": "tools"}.get(setting, setting)

    def generation_inputs(self, w: Any) -> dict[str, str]:
        inputs = {
            "queries": self.data_path(w.dataset, w.split, "queries"),
            "template": self.template_file(w.dataset, w.prompt, w.setting),
        }
        if self.is_gguf(w.llm):
            inputs["model"] = f"{self.models_dir}/{w.llm}"
        facts = w.setting == "oracle" and self.oracle_context_of(w.dataset) == "facts"  # from queries.parquet
        if w.setting in ("rag", "oracle") and not facts:
            inputs["corpus"] = self.corpus_path(self.corpus_of(w.dataset))
        if w.setting == "oracle" and not facts:
            inputs["qrels"] = self.data_path(w.dataset, w.split, "qrels")
        if w.setting == "rag":
            inputs["run"] = self.run_file(w.dataset, w.split, w.serialization, w.retriever, "parquet")
        if w.setting == "open-book":
            tool_corpus = self.open_book["corpus"]["name"]
            inputs["tool_corpus"] = self.corpus_path(tool_corpus)
            inputs["tool_index"] = self.index_dir(tool_corpus, w.serialization, w.retriever)
        return inputs

    def cell_inputs(self, w: Any) -> dict[str, str]:
        """The generate rule's inputs; a cell the config cannot make stops planning here, by path.

        A batched cell also waits for its model's batch, but its rerun triggers are its own
        `cell_spec` file's: common.smk marks the batch manifest ancient, so a batch rerun for
        another cell's sake leaves this one alone. An off-grid cell is no member of the batch:
        it runs its model itself, and its own inputs and params are its triggers."""
        self.checked_cell(w, self.generation_file(w))
        inputs = self.generation_inputs(w)
        if self.in_batch(w):
            inputs["spec"] = self.cell_spec_file(w)
            manifests = self.batch_manifests(w.llm)  # a split batch: every share holds some of its items
            inputs["batch"] = manifests[0] if len(manifests) == 1 else manifests  # type: ignore[assignment]
        return inputs

    def cell_spec_file(self, w: Any) -> str:
        """`cell_spec`'s output: the record of what one batched cell's prompts are made from."""
        return self.generation_file(w, "spec.json")

    def cell_spec(self, w: Any) -> dict[str, Any]:
        """What decides a cell's prompts (its items' cache keys): the files they are built from,
        the template's hash and the cell's settings, the `cell_spec` rule's params and output.

        Why a job of its own: Snakemake skips the own rerun checks of every job downstream of
        one that must rerun (it expects them to rerun too), and the batch is upstream of every
        cell of its model. Checked on the cell job, an edited template or setting would be
        missed whenever the batch reruns; checked here, upstream of the batch, a change reruns
        this spec and so the cell (tests/workflow/test_rebuild.py counts the jobs)."""
        inputs = self.generation_inputs(w)
        return {
            "cell": Cell.label_of(w),
            "inputs": dict(sorted(inputs.items())),
            "template_hash": file_hash(self.env.root / inputs["template"]),
            "settings": self.generation_settings(w),
        }

    def generation_settings(self, w: Any) -> dict[str, Any]:
        """Everything besides the cell that decides the answers; a change reruns the job (params)."""
        return {
            "llm": self.llms[w.llm],
            "sampling": self.generation.get("sampling", {}),
            "max_questions": self.max_questions_of(w.dataset),
            "max_doc_chars": self.generation.get("max_doc_chars"),
            "models_dir": self.models_dir,
            "oracle_distractors": self.distractors_of(w.dataset, w.setting),
            "oracle_seed": self.gen_seed,
            # only for a facts oracle: other cells' params (rerun triggers) stay as they were
            **({"oracle_context": "facts"} if self.context_source(w.dataset, w.setting) == "facts" else {}),
            **({"open_book": self.open_book_settings(w)} if w.setting == "open-book" else {}),
            # only when set: the default adds no key, so existing jobs' params (rerun triggers) stay as they were
            **({"allow_failed": True} if self.generation.get("allow_failed_items") else {}),
        }

    def open_book_settings(self, w: Any) -> dict[str, Any]:
        """The loop's limits (defaults filled in) and the WikiSearch retriever's settings."""
        from cqabench.generation.agent.loop import Limits

        limits = {
            **Limits.from_config(self.open_book).to_dict(),
            "max_new_tokens": self.open_book.get("max_new_tokens"),
        }
        return {**limits, "retriever_settings": self.retriever_configs[w.retriever]}

    @staticmethod
    def generation_args(w: Any, input: Any) -> str:
        # Snakemake's InputFiles is a list: `in input` would test the paths, not the names.
        flags = {
            "corpus": "--corpus",
            "qrels": "--qrels",
            "run": "--run",
            "tool_corpus": "--tool-corpus",
            "tool_index": "--tool-index",
        }
        return " ".join(
            f"{flag} {shlex.quote(str(input[name]))}" for name, flag in flags.items() if name in input.keys()
        )  # noqa: SIM118

    def batch_manifest(self, llm: str) -> str:
        """The manifest of a batch run as one job (generation.batch_jobs 1, the default)."""
        return f"{self.results}/generation/_batches/{llm}.json"

    def batch_jobs_of(self, llm: str) -> int:
        """How many jobs (engine sessions) share the LLM's batch: generation.batch_jobs, an integer
        for every batch LLM or a mapping per LLM (default 1)."""
        raw = self.gen_batch_jobs
        return int(raw.get(llm, 1) if isinstance(raw, dict) else raw)

    def batch_share_file(self, llm: str, share: str) -> str:
        """The manifest of one share (`2-of-8`) of a batch split over several jobs."""
        return f"{self.results}/generation/_batches/{llm}/share-{share}.json"

    def batch_shares(self, llm: str) -> list[str]:
        """The share names of the LLM's batch jobs ([] when it runs as one job)."""
        n = self.batch_jobs_of(llm) if llm in self.gen_batch_llms else 1
        return [share_name(i, n) for i in range(1, n + 1)] if n > 1 else []

    def batch_manifests(self, llm: str) -> list[str]:
        """Every manifest of the LLM's batch: one per job."""
        shares = self.batch_shares(llm)
        return [self.batch_share_file(llm, s) for s in shares] if shares else [self.batch_manifest(llm)]

    def all_batch_shares(self) -> list[str]:
        """Every share name of every split batch (the generate_batch_share rule's wildcard values)."""
        return sorted({s for llm in self.gen_batch_llms for s in self.batch_shares(llm)})

    @staticmethod
    def batch_share_arg(w: Any) -> str:
        """`--share <i>-of-<n>` for a share job of a split batch; "" for a batch run as one job."""
        share = getattr(w, "share", None)
        return f"--share {shlex.quote(share)}" if share else ""

    def batch_cells(self, llm: str) -> list[Cell]:
        """The model's grid cells: the members of its batch."""
        return [c for c in self.generation_cells() if c.llm == llm]

    def batch_inputs(self, w: Any) -> list[str]:
        """Every file any cell of the batch reads, and every cell's spec (cell_spec)."""
        cells = self.batch_cells(w.llm)
        return sorted(
            {str(p) for c in cells for p in self.generation_inputs(c).values()}
            | {self.cell_spec_file(c) for c in cells}
        )

    def batch_members(self, w: Any) -> str:
        """`batch_member_docs` as the generate_batch rule's rerun trigger (params)."""
        return as_arg(self.batch_member_docs(w.llm))

    def batch_member_docs(self, llm: str) -> list[dict[str, Any]]:
        """What `cqabench generate-batch` runs per member cell: its label, files and own settings."""
        members = []
        for c in self.batch_cells(llm):
            settings = self.generation_settings(c)
            members.append({
                "cell": c.label,
                "inputs": {k: str(v) for k, v in self.generation_inputs(c).items() if k != "model"},
                "settings": {k: settings[k] for k in PER_CELL_SETTINGS if k in settings},
            })  # fmt: skip
        return members

    def batch_settings(self, w: Any) -> str:
        """`batch_shared_settings` as the generate_batch rule's rerun trigger (params)."""
        return as_arg(self.batch_shared_settings(w.llm))

    def batch_shared_settings(self, llm: str) -> dict[str, Any]:
        """What every cell of a batch shares (the model, sampling, document cut)."""
        cells = self.batch_cells(llm)
        if not cells:
            raise ConfigError(f"generation.batch_llms: {llm} has no planned cell (is it in generation.llms?)")
        settings = self.generation_settings(cells[0])
        return {k: v for k, v in settings.items() if k not in PER_CELL_SETTINGS}
