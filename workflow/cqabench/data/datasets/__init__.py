"""Registry of dataset loaders: one module per dataset, raw files → canonical records.

Each module defines `RAW_FILES` (role → required?), `RELEVANCE` (relevance mode → one-line
description, the first key `paper`: how DEXTER §3.1 and its toolkit built the corpus and qrels;
config `datasets.<name>.relevance`),
`records(files: Mapping[str, Path], split: str, limit: int | None = None, relevance: str =
"paper") -> Iterator[Record]` (the `Document`s, `Query`s, `Qrel`s and `Answer`s as the raw
files are read, so that `prepare` can write a corpus of any size without holding it; an unknown
mode is a ConfigError naming the config key), `load(...) -> CanonicalData` (the same records
gathered, `common.collect`) and `gold_evidence(files: Mapping[str, Path], relevance: str =
"paper") -> tuple[bool, str]` (see `has_gold_evidence`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

LOADERS: dict[str, str] = {
    "musique": "musique",
    "2wikimultihopqa": "twowiki",
    "strategyqa": "strategyqa",
    "ambigqa": "ambigqa",
    "ottqa": "ottqa",
    "tatqa": "tatqa",
    "finqa": "finqa",
    "tanq": "tanq",
}
DATASETS = tuple(LOADERS)


def loader(dataset: str) -> ModuleType:
    from cqabench.common.errors import ConfigError

    if dataset not in LOADERS:
        raise ConfigError(f"unknown dataset {dataset!r}; valid: {', '.join(DATASETS)}")
    return importlib.import_module(f"cqabench.data.datasets.{LOADERS[dataset]}")


def relevance_modes(dataset: str) -> dict[str, str]:
    """The dataset's relevance modes (mode -> description), `paper` first; unknown dataset: ConfigError."""
    return dict(loader(dataset).RELEVANCE)


def has_gold_evidence(
    dataset: str, files: Mapping[str, Path | str | None], relevance: str = "paper"
) -> tuple[bool, str]:
    """Whether a (dataset, split) with these raw files (role -> path; an unconfigured role
    absent or None) will have gold evidence (qrels), and why not: (True, "") or (False, reason).

    Cheap enough for every `snakemake` planning run: nothing is loaded; at most the question
    file is streamed until its first record with evidence. A raw file that does not exist yet
    counts as evidence, since the download provides the full release; `prepare` (and
    `oracle.questions_without_evidence` at generation) still check the real thing.
    - tanq: some record has a non-empty answer_list with proofs (the 10-question sample has none);
    - strategyqa: the `paragraphs` role is configured (without it there are no qrels);
    - ambigqa: the `passages` role is configured and some question has viewed_doc_titles;
    - musique, 2wikimultihopqa, ottqa, tatqa, finqa: gold comes from the question file: True.
    `relevance` (the dataset's mode) changes which documents are gold, never whether a split
    has any at planning time. Unknown dataset or mode: ConfigError.
    """
    from cqabench.data.datasets.common import check_relevance

    module = loader(dataset)
    check_relevance(dataset, module.RELEVANCE, relevance)
    clean = {role: Path(p) for role, p in files.items() if p}
    return module.gold_evidence(clean, relevance=relevance)
