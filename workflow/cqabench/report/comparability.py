"""Is a cell of ours comparable with the paper's? The paper's setup as data, and the check.

A paper table prints OK / FAIL beside a published number. That judgment only means something
when our cell was produced on the paper's benchmark: the same dataset split, question
selection, corpus, relevance judgments and metric definition. Otherwise a FAIL reads as a bug
and an OK as a reproduction, while both only say that two different things were measured. So
each expected-results file states, once, what the paper's numbers are on (`paper_setup:`), and
every cell is checked against what the run actually did (the fact-table row, and the run's
config for what rows do not carry). A cell that differs prints "not comparable" with its reason
and is counted apart from OK / FAIL.

Format of `paper_setup` (config/expected/*.yaml):

    paper_setup:
      datasets:                       # per dataset: what the paper's numbers are on
        <dataset>:
          split: dev                  # the evaluated split
          relevance: paper            # datasets.<ds>.relevance (default "paper")
          hops: [2]                   # question selection: datasets.<ds>.hops / answerable_only /
          answerable_only: true       #   limit (absent = none: every question of the split)
          limit: 1200
          corpus: [musique, 2wikimultihopqa]   # the corpus' member datasets (default: the dataset alone)
          corpus_splits: [train, dev]          # splits the corpus is built from (default: [split])
          notes: {split: "..."}       # optional text appended to the reason for one field
      variants: {<table id>: {<metric>: <variant>}}   # the paper's metric definition where the table
                                      # shows several variants (default: the table's own `variant`)
      differences:                    # known differences that no config removes
        - reason: "..."               # printed as "not comparable: <reason>"
          datasets: [strategyqa]      # the datasets it affects
          tables: [<table id>, ...]   # the tables it affects (absent: every table of the file)
          where: {setting: [rag]}     # optional: only rows with these column values

Which check applies to which cell: the split and the question selection to every cell; the
relevance mode and the corpus to retrieval cells and to answer cells that read documents (RAG
reads the corpus; the oracle reads the qrels' documents); a closed-book answer reads neither.
A run whose config says `report.paper_data: false` (the bundled sample or any subset) is not
comparable anywhere. Without a `paper_setup` nothing is judged not comparable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cqabench.common.config_defaults import configured, default
from cqabench.common.errors import ConfigError

SAMPLE = "bundled sample, not the paper's data (report.paper_data: false)"
NO_CONFIG = "the run's config was not given to the report (report-tables --config): its setup cannot be checked"
# A dataset's defaults (datasets.<name>.*, the config schema's), for expected files and configs that leave them out
DEFAULT_RELEVANCE: str = default("datasets", "*", "relevance")
DEFAULT_ANSWERABLE_ONLY: bool = default("datasets", "*", "answerable_only")
# Answer settings that read documents: the corpus and the relevance mode decide what they see.
READS_DOCUMENTS = ("rag", "oracle", "open-book")
_DATASET_KEYS = {"split", "relevance", "hops", "answerable_only", "limit", "corpus", "corpus_splits", "notes"}
_SETUP_KEYS = {"datasets", "variants", "differences"}
_DIFFERENCE_KEYS = {"reason", "datasets", "tables", "where"}


@dataclass(frozen=True)
class DatasetSetup:
    """What the paper's numbers on one dataset are on."""

    split: str
    relevance: str = DEFAULT_RELEVANCE
    hops: tuple[int, ...] | None = None
    answerable_only: bool = DEFAULT_ANSWERABLE_ONLY
    limit: int | None = None
    corpus: tuple[str, ...] | None = None  # member datasets; None: the dataset alone
    corpus_splits: tuple[str, ...] | None = None  # None: the evaluated split
    notes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Difference:
    """A known difference from the paper that no config removes, and where it applies."""

    reason: str
    datasets: tuple[str, ...]
    tables: tuple[str, ...] = ()  # empty: every table of the file
    where: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def applies(self, table_id: str, record: dict[str, Any]) -> bool:
        if str(record.get("dataset")) not in self.datasets:
            return False
        if self.tables and table_id not in self.tables:
            return False
        return all(str(record.get(col)) in wanted for col, wanted in self.where.items())


@dataclass(frozen=True)
class PaperSetup:
    datasets: dict[str, DatasetSetup]
    variants: dict[str, dict[str, str]] = field(default_factory=dict)
    differences: tuple[Difference, ...] = ()


@dataclass(frozen=True)
class RunContext:
    """What the run did, beyond its rows: its config (datasets.<ds>.*, corpora) and paper_data."""

    config: dict[str, Any] | None  # None: not known (then a full-data run cannot be checked)
    paper_data: bool = False

    @classmethod
    def of(cls, config: dict[str, Any] | None, paper_data: bool | None = None) -> RunContext:
        """From a run's config; `paper_data` overrides the config's report.paper_data when given."""
        if paper_data is None:
            paper_data = bool(configured(config, "report", "paper_data"))
        return cls(None if config is None else dict(config), bool(paper_data))

    def dataset(self, name: str) -> dict[str, Any]:
        return dict(((self.config or {}).get("datasets") or {}).get(name) or {})


# ---- parsing ----


def _strings(value: Any, where: str) -> tuple[str, ...]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or any(v in (None, "") for v in values):
        raise ConfigError(f"{where}: expected a name or a non-empty list of names, got {value!r}")
    return tuple(str(v) for v in values)


def _dataset_setup(name: str, raw: Any, where: str) -> DatasetSetup:
    if not isinstance(raw, dict) or not raw.get("split"):
        raise ConfigError(f"{where}.{name}: needs at least 'split' (the split the paper evaluates)")
    unknown = sorted(set(raw) - _DATASET_KEYS)
    if unknown:
        raise ConfigError(f"{where}.{name}: unknown keys {unknown}; allowed: {sorted(_DATASET_KEYS)}")
    hops = raw.get("hops")
    limit = raw.get("limit")
    try:
        return DatasetSetup(
            split=str(raw["split"]),
            relevance=str(raw.get("relevance", DEFAULT_RELEVANCE)),
            hops=None if hops is None else tuple(sorted(int(h) for h in hops)),
            answerable_only=bool(raw.get("answerable_only", DEFAULT_ANSWERABLE_ONLY)),
            limit=None if limit is None else int(limit),
            corpus=None
            if raw.get("corpus") is None
            else tuple(sorted(_strings(raw["corpus"], f"{where}.{name}.corpus"))),
            corpus_splits=None
            if raw.get("corpus_splits") is None
            else tuple(sorted(_strings(raw["corpus_splits"], f"{where}.{name}.corpus_splits"))),
            notes={str(k): str(v) for k, v in (raw.get("notes") or {}).items()},
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}.{name}: hops must be a list of integers and limit an integer ({exc})") from None


def _difference(raw: Any, where: str) -> Difference:
    if not isinstance(raw, dict) or not raw.get("reason") or not raw.get("datasets"):
        raise ConfigError(f"{where}: a difference needs 'reason' and 'datasets'")
    unknown = sorted(set(raw) - _DIFFERENCE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; allowed: {sorted(_DIFFERENCE_KEYS)}")
    where_raw = raw.get("where") or {}
    if not isinstance(where_raw, dict):
        raise ConfigError(f"{where}.where: expected a mapping column -> value(s)")
    return Difference(
        reason=str(raw["reason"]).strip(),
        datasets=_strings(raw["datasets"], f"{where}.datasets"),
        tables=_strings(raw["tables"], f"{where}.tables") if raw.get("tables") else (),
        where={str(k): _strings(v, f"{where}.where.{k}") for k, v in where_raw.items()},
    )


def parse_paper_setup(raw: Any, where: str) -> PaperSetup:
    """`paper_setup:` of one expected-results file (ConfigError naming the key when malformed)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("datasets"), dict) or not raw["datasets"]:
        raise ConfigError(f"{where}: expected a mapping with a non-empty 'datasets' mapping")
    unknown = sorted(set(raw) - _SETUP_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; allowed: {sorted(_SETUP_KEYS)}")
    datasets = {str(n): _dataset_setup(str(n), d, f"{where}.datasets") for n, d in raw["datasets"].items()}
    variants_raw = raw.get("variants") or {}
    if not isinstance(variants_raw, dict) or not all(isinstance(v, dict) for v in variants_raw.values()):
        raise ConfigError(f"{where}.variants: expected {{table id: {{metric: variant}}}}")
    variants = {str(t): {str(m): str(v) for m, v in ms.items()} for t, ms in variants_raw.items()}
    diffs = raw.get("differences") or []
    if not isinstance(diffs, list):
        raise ConfigError(f"{where}.differences: expected a list")
    return PaperSetup(
        datasets, variants, tuple(_difference(d, f"{where}.differences[{i}]") for i, d in enumerate(diffs))
    )


# ---- what the run did ----


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value) or value == ""


def relevance_of(record: dict[str, Any], run: RunContext) -> str:
    """The relevance mode of a cell: its row's `relevance`, else datasets.<ds>.relevance, else paper."""
    value = record.get("relevance")
    if _blank(value):
        value = run.dataset(str(record.get("dataset"))).get("relevance")
    return DEFAULT_RELEVANCE if _blank(value) else str(value)


def corpus_of(run: RunContext, dataset: str, record: dict[str, Any] | None = None) -> str:
    """The corpus a dataset is searched in: the row's `corpus`, else the config's (as the planner's
    Plan.corpus_of: an explicit datasets.<ds>.corpus, else the pooled corpus holding it, else its own)."""
    value = (record or {}).get("corpus")
    if not _blank(value):
        return str(value)
    explicit = run.dataset(dataset).get("corpus")
    if explicit:
        return str(explicit)
    for name, members in ((run.config or {}).get("corpora") or {}).items():
        if dataset in (members or []):
            return str(name)
    return dataset


def corpus_members(run: RunContext, corpus: str) -> tuple[str, ...]:
    """The datasets pooled into a corpus (config `corpora`), or the corpus itself."""
    return tuple(sorted(str(m) for m in ((run.config or {}).get("corpora") or {}).get(corpus) or [corpus]))


def selection_of(run: RunContext, dataset: str) -> tuple[tuple[int, ...] | None, bool, int | None]:
    """(hops, answerable_only, limit) of a dataset in the run's config (None / False: no filter)."""
    spec = run.dataset(dataset)
    hops = spec.get("hops")
    limit = spec.get("limit")
    return (
        None if hops is None else tuple(sorted(int(h) for h in hops)),
        bool(spec.get("answerable_only", DEFAULT_ANSWERABLE_ONLY)),
        None if limit is None else int(limit),
    )


def _selection_text(hops: tuple[int, ...] | None, answerable_only: bool, limit: int | None) -> str:
    parts = [f"hops {list(hops)}"] if hops is not None else []
    if answerable_only:
        parts.append("answerable only")
    if limit is not None:
        parts.append(f"the first {limit} questions")
    return ", ".join(parts) or "every question of the split"


def describe(run: RunContext, dataset: str) -> dict[str, str]:
    """The run's setup of one dataset as text (the report page's "what was run")."""
    spec = run.dataset(dataset)
    corpus = corpus_of(run, dataset)
    members = corpus_members(run, corpus)
    splits = spec.get("corpus_splits") or spec.get("splits") or []
    return {
        "split": ", ".join(str(s) for s in spec.get("splits") or []) or "?",
        "relevance": str(spec.get("relevance") or DEFAULT_RELEVANCE),
        "questions": _selection_text(*selection_of(run, dataset)),
        "corpus": f"{corpus}"
        + (f" (pooled: {' + '.join(members)})" if members != (corpus,) else "")
        + f" from {' + '.join(str(s) for s in splits) or '?'}",
    }


# ---- the check ----


def _reads_documents(record: dict[str, Any]) -> bool:
    """Retrieval cells, and answer cells whose setting shows documents (RAG, oracle, a tool agent)."""
    if str(record.get("stage")) == "retrieval":
        return True
    return str(record.get("setting")) in READS_DOCUMENTS


def _note(paper: DatasetSetup, key: str, text: str) -> str:
    return f"{text} ({paper.notes[key]})" if key in paper.notes else text


def _setup_reasons(paper: DatasetSetup, dataset: str, record: dict[str, Any], run: RunContext) -> list[str]:
    out = []
    split = record.get("split")
    if _blank(split):
        out.append(f"{dataset}: the row does not record its split (the paper's is {paper.split})")
    elif str(split) != paper.split:
        out.append(_note(paper, "split", f"{dataset} split {split}, the paper's is {paper.split}"))
    ours = selection_of(run, dataset)
    theirs = (paper.hops, paper.answerable_only, paper.limit)
    if ours != theirs:
        out.append(
            _note(
                paper,
                "questions",
                f"{dataset} questions: {_selection_text(*ours)}; the paper's: {_selection_text(*theirs)}",
            )
        )
    if not _reads_documents(record):
        return out
    if str(record.get("context_source")) == "facts":
        out.append(
            f"{dataset} oracle context: the annotators' facts (context_source facts), not the paper's gold paragraphs"
        )
    relevance = relevance_of(record, run)
    if relevance != paper.relevance:
        out.append(_note(paper, "relevance", f"{dataset} relevance {relevance}, the paper's is {paper.relevance}"))
    corpus = corpus_of(run, dataset, record)
    members, wanted = corpus_members(run, corpus), paper.corpus or (dataset,)
    if members != tuple(sorted(wanted)):
        out.append(
            _note(
                paper,
                "corpus",
                f"{dataset} corpus {corpus} ({' + '.join(members)}), the paper's pools {' + '.join(sorted(wanted))}",
            )
        )
    spec = run.dataset(dataset)
    built = tuple(sorted(str(s) for s in spec.get("corpus_splits") or spec.get("splits") or []))
    wanted_splits = paper.corpus_splits or (paper.split,)
    if built and built != tuple(sorted(wanted_splits)):
        out.append(
            _note(
                paper,
                "corpus_splits",
                f"{dataset} corpus built from {' + '.join(built)}, the paper's "
                f"from {' + '.join(sorted(wanted_splits))}",
            )
        )
    return out


def paper_variant(setup: PaperSetup, table_id: str, metric: str, table_variant: str | None) -> str | None:
    """The paper's variant of `metric` in a table: `variants` when given, else the table's own."""
    return setup.variants.get(table_id, {}).get(metric, table_variant)


def reasons(
    setup: PaperSetup | None, run: RunContext | None, table_id: str, table_variant: str | None, record: dict[str, Any]
) -> list[str]:
    """Why one of our cells (its fact-table row) is not comparable with the paper's; [] if it is.

    `run` None means nothing is known about the run: nothing is judged (the table compares as
    before). A run not on the paper's data is not comparable anywhere, and that is the only
    reason then given.
    """
    if run is None:
        return []
    if not run.paper_data:
        return [SAMPLE]
    if setup is None:
        return []
    if run.config is None:
        return [NO_CONFIG]
    dataset = str(record.get("dataset"))
    paper = setup.datasets.get(dataset)
    if paper is None:
        return [f"the paper's setup for dataset {dataset} is not recorded (paper_setup.datasets)"]
    out = _setup_reasons(paper, dataset, record, run)
    wanted = paper_variant(setup, table_id, str(record.get("metric")), table_variant)
    variant = record.get("variant")
    if wanted is not None and not _blank(variant) and str(variant) != wanted:
        out.append(f"{record.get('metric')} variant {variant}, the paper's is {wanted}")
    out += [d.reason for d in setup.differences if d.applies(table_id, record)]
    return out


def reason_text(found: list[str]) -> str | None:
    """One cell's reasons as one sentence ("a; b"), None when comparable."""
    return "; ".join(dict.fromkeys(found)) or None
