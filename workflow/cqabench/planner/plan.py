"""The workflow's plan: one object per config, built stage by stage and checked as a whole.

`workflow/rules/common.smk` only builds a `Plan` from Snakemake's `config`, which the rules read
as `PLAN` (`PLAN.corpus_path(...)`, `PLAN.llms`); everything that decides *which* jobs exist and *what* they
are given lives in the stage modules it is made of (`data`, `retrieval`, `generation`,
`evaluation`, `report`, each building on the ones before it), where it is unit-tested without
Snakemake (tests/planner/). This module fixes the order in which they read the config, check it
and expand it.

A `Plan` checks the whole config when it is built and raises one `ConfigError` that lists every
problem, each prefixed with the config key it concerns (``datasets.tatqa.corpus: ...``). The
checks cover what the JSON schema cannot: references between sections (datasets, corpora,
retrievers, runs, LLMs, prompts, settings) and configs that could only fail at run time (a raw
file with neither a local copy nor a URL, a missing prompt template, an API backend given a
GGUF file). Planning reads no data beyond what `has_gold_evidence` peeks at and which files
exist, so `snakemake -n` stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.common.layout import name_problem
from cqabench.planner.environment import Environment
from cqabench.planner.report import ReportPlan


def _stop(problems: list[str]) -> None:
    """Raise one ConfigError listing every problem, if there is one."""
    if problems:
        raise ConfigError("the config cannot be planned:\n  " + "\n  ".join(problems))


@dataclass
class Plan(ReportPlan):
    """Every job the config asks for, checked; see the module docstring."""

    config: Mapping[str, Any]
    env: Environment = field(default_factory=Environment)

    def __post_init__(self) -> None:
        self._read_data_config()
        self._read_retrieval_config()
        self._read_report_config()
        self._read_generation_config()
        self.check()  # before anything below indexes the config by a name it references
        self._expand_data()
        self._expand_retrieval()
        self._expand_generation()
        self._expand_report()
        self._check_after_expansion()

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
        import cqabench.planner.needed_models as needed_models  # hub models need a revision (the fetch pins it)

        out += needed_models.problems(self)
        return out

    def _run_time_only_problems(self) -> list[str]:
        """Settings that would pass planning and fail (or silently plan nothing) at run time."""
        import cqabench.planner.checks as plan_checks
        from cqabench.data.prepare import HOP_DATASETS

        return (
            plan_checks.open_book_dataset_problems(self.gen_settings, self.open_book)
            + plan_checks.pooled_corpus_problems(self.pooled)
            + plan_checks.selection_problems(self.config["datasets"], HOP_DATASETS)
            + plan_checks.device_problems(self.llms)
            + plan_checks.base_url_problems(self.llms)
        )

    def _check_after_expansion(self) -> None:
        """Checks that need the expanded run names and cells."""
        _stop(self._rag_run_problems() + self._baseline_problems() + self._template_problems())
