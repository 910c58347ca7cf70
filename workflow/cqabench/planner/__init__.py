"""The workflow's plan: matrix expansion, cross-references and every path a rule reads or writes.

`workflow/rules/common.smk` only builds a `Plan` from Snakemake's `config` and binds its
methods to the names the rules use; everything that decides *which* jobs exist and *what* they
are given lives here, where it is unit-tested without Snakemake (tests/planner/test_planner.py).

A `Plan` checks the whole config when it is built and raises one `ConfigError` that lists every
problem, each prefixed with the config key it concerns (``datasets.tatqa.corpus: ...``). The
checks cover what the JSON schema cannot: references between sections (datasets, corpora,
retrievers, runs, LLMs, prompts, settings) and configs that could only fail at run time (a raw
file with neither a local copy nor a URL, a missing prompt template, an API backend given a
GGUF file). Planning reads no data beyond what `has_gold_evidence` peeks at and which files
exist, so `snakemake -n` stays fast.
"""

from __future__ import annotations

import glob
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cqabench.data.datasets import DATASETS as DATASET_NAMES, has_gold_evidence, relevance_modes
from cqabench.common.errors import ConfigError
from cqabench.common.layout import LLM_CACHE_DIR, RESULTS_ROOT, name_problem, results_dir
from cqabench.generation.prompts import SETTINGS, STRATEGIES, family_of, file_hash
from cqabench.planner.environment import Environment
from cqabench.planner.cells import CELL_FIELDS, Cell
from cqabench.planner.evaluation import EvaluationPlan
from cqabench.planner.generation import GEN_ENVS, GGUF_PREFIXES, OPEN_BOOK_LIMITS, PER_CELL_SETTINGS
from cqabench.planner.retrieval import SUFFIX_KIND
from cqabench.planner.rule_text import NEVER, as_arg, names_pattern, one_of
from cqabench.retrieval.decomposition import RUN_SUFFIX

def _stop(problems: list[str]) -> None:
    """Raise one ConfigError listing every problem, if there is one."""
    if problems:
        raise ConfigError("the config cannot be planned:\n  " + "\n  ".join(problems))


@dataclass
class Plan(EvaluationPlan):
    """Every job the config asks for, checked; see the module docstring."""

    config: Mapping[str, Any]
    env: Environment = field(default_factory=Environment)

    def __post_init__(self) -> None:
        c = self.config
        self._read_data_config()
        self._read_retrieval_config()
        # report
        self.report: dict[str, Any] = dict(c.get("report") or {})
        self.report_dir = f"{self.results}/report"
        self.paper_data = bool(self.report.get("paper_data", False))
        self.significance = {"correction": "holm", "alpha": 0.05, "baseline": "bm25", **self.report.get("significance", {})}
        self._read_generation_config()

        self.check()  # before anything below indexes the config by a name it references
        self._expand_data()
        self._expand_retrieval()
        self.expected_files = list(self.report.get("expected") or sorted(
            str(Path(p).relative_to(self.env.root)) for p in glob.glob(str(self.env.root / "config/expected/*.yaml"))
        ))  # fmt: skip
        self._expand_generation()
        self._table_specs: dict[str, tuple[str, Any]] | None = None
        self._check_after_expansion()

    # ---- checks ----

    def check(self) -> None:
        """Raise one ConfigError naming every broken reference (each line starts with its key)."""
        _stop(self.problems())

    def problems(self) -> list[str]:
        """Every cross-reference and run-time-only failure the schema cannot see."""
        out: list[str] = [p for p in [name_problem(self.config.get("name"))] if p]
        out += self._data_problems()
        out += self._retrieval_problems()
        out += self._generation_problems()
        out += self._cache_dir_problems()
        out += self._report_problems()
        out += self._run_time_only_problems()
        from cqabench.planner import models as models_stage  # hub models need a revision (the fetch pins it)

        out += models_stage.problems(self)
        return out

    def _run_time_only_problems(self) -> list[str]:
        """Settings that would pass planning and fail (or silently plan nothing) at run time."""
        from cqabench.planner import checks as plan_checks
        from cqabench.data.prepare import HOP_DATASETS

        return (plan_checks.open_book_dataset_problems(self.gen_settings, self.open_book)
                + plan_checks.pooled_corpus_problems(self.pooled)
                + plan_checks.selection_problems(self.config["datasets"], HOP_DATASETS)
                + plan_checks.device_problems(self.llms))

    def _report_problems(self) -> list[str]:
        out = []
        for path in self.report.get("expected") or []:
            if not (self.env.root / path).is_file():
                out.append(f"report.expected: {path!r} is not a file")
        return out

    def _check_after_expansion(self) -> None:
        """Checks that need the expanded run names and cells."""
        _stop(self._rag_run_problems() + self._baseline_problems() + self._template_problems())

    def _baseline_problems(self) -> list[str]:
        """report.significance.baseline, when set, names a run (where there are runs)."""
        baseline = (self.report.get("significance") or {}).get("baseline")
        if baseline is not None and self.all_run_names and baseline not in self.all_run_names:
            # a typo would turn every row of retrieval_vs_baseline into "no ... run to compare with"
            return [f"report.significance.baseline: {baseline!r} names no run; runs: {self.all_run_names}"]
        return []

    # ---- data stage ----

    # ---- retrieval stage ----

    # ---- generation stage ----

    # ---- cells named by a path (cqabench.planner.cells) ----

    # ---- evaluation stage ----

    # ---- report stage ----

    def expected_table_ids(self) -> list[str]:
        import yaml

        ids: list[str] = []
        for path in self.expected_files:
            with open(self.env.root / path, encoding="utf-8") as fh:
                ids += [str(t["id"]) for t in (yaml.safe_load(fh) or {}).get("tables", [])]
        return ids

    def metric_files(self) -> list[str]:
        """The metrics.json of every retrieval cell and every answer cell, the grid's and the off-grid
        ones that exist (`all_cells`); per-question files sit beside them."""
        return sorted(set(self.retrieval_targets()) | {self.answer_metrics_file(c) for c in self.all_cells()})

    # ---- one paper table, one target (cqabench.planner.table_targets) ----

    def table_specs(self) -> dict[str, tuple[str, Any]]:
        """table id -> (its expected file, its TableSpec), in the order of expected_files."""
        if self._table_specs is None:
            from cqabench.report.expected import load_expected

            self._table_specs = {s.id: (path, s) for path in self.expected_files
                                 for s in load_expected(self.env.root / path)}  # fmt: skip
        return self._table_specs

    def table_file(self, table_id: str, ext: str = "md") -> str:
        """One file of a paper table under the report's tables folder (`md`, `html`, `caption.rst`, `summary.json`)."""
        return f"{self.report_dir}/tables/{table_id}.{ext}"

    def table_cells(self, table_id: str) -> dict[str, list[Any]]:
        """The cells a table needs: {"retrieval": [(ds, sp, ser, run)], "generation": [Cell]}."""
        from cqabench.planner.table_targets import cells_of

        spec = self.table_specs()[table_id][1]
        retrieval = [(c, {"stage": "retrieval", "dataset": c[0], "split": c[1], "serialization": c[2],
                          "retriever": c[3], "corpus": self.corpus_of(c[0]), "relevance": self.relevance_of(c[0])})
                     for c in self.retrieval_cells()]  # fmt: skip
        generation = [(c, {"stage": "generation", **dict(zip(CELL_FIELDS, c)), "backend": self.llms[c[4]]["backend"],
                           "corpus": self._generation_corpus(c), "relevance": self.relevance_of(c[0])})
                      for c in self.all_cells()]  # fmt: skip
        return {"retrieval": cells_of(spec, retrieval), "generation": cells_of(spec, generation)}

    def _generation_corpus(self, cell: Sequence[Any]) -> str:
        return self.open_book["corpus"]["name"] if cell[6] == "open-book" else self.corpus_of(cell[0])

    def table_inputs(self, table_id: str) -> dict[str, list[str]]:
        """A table rule's inputs: its expected file and its cells' metric files; for a per-question
        table also their per-question files and the prepared splits (question type, skills, the
        gold table's size), the same files `aggregate` reads for those cells."""
        path, spec = self.table_specs()[table_id]
        cells = self.table_cells(table_id)
        metrics = sorted([self.retrieval_metrics_file(*c) for c in cells["retrieval"]]
                         + [self.answer_metrics_file(c) for c in cells["generation"]])  # fmt: skip
        inputs: dict[str, list[str]] = {"expected": [path], "metrics": metrics}
        if spec.source == "per_question":
            per_query = [self.retrieval_metrics_file(*c, "per_query.parquet") for c in cells["retrieval"]]
            per_question = [self.answer_metrics_file(c, "per_question.parquet") for c in cells["generation"]]
            inputs["per_question"] = sorted(per_query + per_question)
            splits = sorted({(c[0], c[1]) for c in cells["retrieval"] + cells["generation"]})
            inputs["data"] = [self.data_path(ds, sp, t) for ds, sp in splits for t in ("queries", "answers")]
        return inputs
