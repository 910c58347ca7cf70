"""Paper-table layouts and published numbers, kept as data in config/expected/*.yaml.

Keeping the numbers out of code means a reader can check each one against the paper, and a
number we could not find is simply absent (shown as "not published/not found"), never guessed.

File layout:
  paper: str                       # citation shown above every table of the file
  tables:
    - id: str                      # file stem of the rendered table
      title: str
      source: metrics | per_question   (default metrics)
      metric: str | [str, ...]     # metric name(s); a list makes `metric` usable as a dimension
      variant: str                 # optional: only rows with this variant
      rows: [dimension, ...]       # fact-table columns (or `metric`) forming the row label
      columns: [dimension, ...]    # ... forming the column label
      filters: {column: value | [values]}   # which cells the table is about
      order: {dimension: [value, ...]}      # display order (others follow, sorted)
      labels: {value: shown label}          # optional renaming for display
      tolerance: float             # |ours - paper| <= tolerance  ->  OK, else FAIL, as a fraction (0..1)
      tolerance_by_dataset: {dataset: float}   # optional: a dataset whose n makes its own tolerance
      paper_unit: percent | fraction   # how the paper prints `cells` values; required when cells are given
      digits: int                  # decimals shown (default 3)
      reference: {dimension: [value, ...]}  # rows only the paper has (its models, a human or
                                   # supervised baseline): printed as "paper x", never "missing"
      cells: [{<dimension>: value, ..., value: float}, ...]   # published numbers, as printed
  label_set: dexter | tanq | strategyqa   # optional: which set of PAPER_LABELS names the cells
  paper_setup: {...}               # optional: what the paper's numbers are on, per dataset, and the
                                   # known differences; a cell of ours that differs prints "not
                                   # comparable: <reason>" (format: cqabench.report.comparability)

Names: cells use our names (config names, metric ids, wildcard values); the paper's labels
(WQA = 2wikimultihopqa, RAG-Oracle = oracle, ...) live in one place, `PAPER_LABELS` below,
chosen per file by `label_set` (default: the file's stem when it names a set). A table's own
`labels` override them for display only.

Our numbers are fractions in 0..1 (the fact tables' unit). Published numbers are converted once,
when the file is read (`paper_unit: percent` divides by 100), so every comparison, difference
and printed number is a fraction. The old key `paper_scale` is still read: 0.01 means percent,
1 fraction; any other value, or both keys, is a ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cqabench.common.errors import ConfigError

_TABLE_KEYS = {
    "id",
    "title",
    "source",
    "metric",
    "variant",
    "rows",
    "columns",
    "filters",
    "order",
    "labels",
    "tolerance",
    "tolerance_by_dataset",
    "paper_unit",
    "paper_scale",
    "digits",
    "cells",
    "note",
    "reference",
}
_FILE_KEYS = {"paper", "tables", "label_set", "note", "paper_setup"}
UNIT = "fraction"  # ours, and the paper's after conversion
PAPER_UNITS = {"fraction": 1.0, "percent": 0.01}
_LEGACY_SCALES = {1.0: "fraction", 0.01: "percent"}

# Our names -> the labels the papers print, per paper (`label_set`) and per table dimension: the
# one place where our names meet the papers'. The report prints these labels; the test that
# checks config/expected against the papers' transcribed tables (shared/paper/*.yaml) reads the
# papers' labels back to our names with `our_name` (case-insensitive, plus PAPER_ALIASES for the
# spellings that differ between a paper's tables). Values not listed print as they are.
_DEXTER_DATASETS = {
    "2wikimultihopqa": "WQA",
    "musique": "MQA",
    "ambigqa": "AmbigQA",
    "strategyqa": "StrategyQA",
    "tatqa": "Tat-QA",
    "finqa": "FinQA",
    "ottqa": "OTT-QA",
    "tanq": "TANQ",
}
PAPER_LABELS: dict[str, dict[str, dict[str, str]]] = {
    "dexter": {
        "dataset": _DEXTER_DATASETS,
        "retriever": {
            "bm25": "BM25",
            "splade": "SPLADEv2",
            "dpr": "DPR",
            "ance": "ANCE",
            "tasb": "tas-b",
            "mpnet": "MPNet",
            "contriever": "Contriever",
            "colbertv2": "ColBERTv2",
            "none": "-",
        },
        "setting": {"closed": "closed-book", "rag": "RAG", "oracle": "RAG-Oracle", "supervised": "supervised"},
        "prompt": {
            "few-shot": "few-shot",
            "few-shot-cot": "few-shot-CoT",
            "zero-shot-cot": "zero-shot-CoT",
            "self-ask": "self-ask",
            "none": "-",
        },
        "llm": {
            "gpt-3.5-turbo": "gpt-3.5-turbo",
            "mistral-7b": "Mistral-7b",
            "llama2-7b": "Llama2-7b",
            "supervised-baseline": "supervised baseline",
        },
        "metric": {
            "cover_em": "c-EM",
            "f1_ans": "F1_Ans",
            "em_tol": "EM-Tol",
            "accuracy": "Acc",
            "ndcg_cut_10": "nDCG@10",
            "recall_100": "Recall@100",
        },
    },
    "tanq": {
        "setting": {"oracle": "oracle", "closed": "closed book", "open-book": "open book"},
        "llm": {"palm-2": "PaLM-2", "gemini": "Gemini", "gpt4": "GPT4", "human": "Human", "tool-lm": "Tool LM"},
        "prompt": {"few-shot": "few-shot", "tools": "tools", "none": "-"},
        "tanq_type": {"simple": "simple", "composition": "composition", "intersection": "intersection", "all": "all"},
        "skill": {
            "filter_num": "filter num",
            "filter_time": "filter time",
            "filter_entity": "filter entity",
            "date2year": "date2year",
            "quantity_conv": "quantity conv",
            "time_calc": "time calc",
            "approx": "approx",
        },
        "n_skills": {"1": "one skill", "2": "two skills", "3": "three skills"},
        "n_relations": {"1": "one relation", "3": "three relations", "5": "five relations", "10": "ten relations"},
        "table_length": {"short": "short", "medium": "medium", "long": "long"},
        "metric": {
            "rms_precision": "P",
            "rms_recall": "R",
            "rms_f1": "F1",
            # Table 10's rows (cqabench.evaluation.metrics.tanq_failures.CATEGORIES)
            "failure_relation_missing": "relation missing",
            "failure_no_header": "no header",
            "failure_filter_issues": "filter issues",
            "failure_hallucinated_relations": "hallucinated relations",
            "failure_hallucination_other": "hallucination other",
            "failure_missing_entity": "missing entity",
            "failure_non_table": "non-table",
            "failure_partial_answer": "partial answers",
            "failure_wrong_answer": "wrong answer",
        },
    },
    "strategyqa": {
        "dataset": {"strategyqa": "StrategyQA"},
        "retriever": {
            "bm25-irq": "IR-Q (question as query)",
            "bm25-ird-pred": "IR-D (predicted decomposition, BART)",
            "bm25-ird-gold": "IR-D (gold decomposition)",
            "human-with-decomposition": "human experts, with decomposition (100 questions)",
            "human-without-decomposition": "human experts, without decomposition (100 questions)",
        },
        "metric": {"recall_10": "Recall@10"},
    },
}
# Other spellings of the same thing in the papers' own tables (label, lower-cased -> our name).
PAPER_ALIASES: dict[str, dict[str, dict[str, str]]] = {
    "dexter": {
        "retriever": {"spladev2": "splade", "splade": "splade"},
        "setting": {"closed-book": "closed", "rag-oracle": "oracle", "rag": "rag"},
        "llm": {"mistral-7b": "mistral-7b", "llama2-7b": "llama2-7b"},
    },
    "tanq": {
        "setting": {"closed": "closed", "open-book": "open-book"},
    },
    "strategyqa": {
        "retriever": {
            "with decomposition": "human-with-decomposition",
            "without decomposition": "human-without-decomposition",
        },
    },
}


def paper_label(label_set: str, dimension: str, value: Any) -> str:
    """How the paper of `label_set` prints our `value` of `dimension` (the value itself if unlisted)."""
    return PAPER_LABELS.get(label_set, {}).get(dimension, {}).get(str(value), str(value))


def our_name(label_set: str, dimension: str, label: str) -> str:
    """Our name for a label the paper prints (ConfigError if the label is not known)."""
    wanted = str(label).strip().lower()
    aliases = PAPER_ALIASES.get(label_set, {}).get(dimension, {})
    if wanted in aliases:
        return aliases[wanted]
    for ours, shown in PAPER_LABELS.get(label_set, {}).get(dimension, {}).items():
        if shown.lower() == wanted or ours.lower() == wanted:
            return ours
    raise ConfigError(f"{label_set}: no name of ours for the {dimension} label {label!r} (add it to PAPER_LABELS)")


@dataclass
class TableSpec:
    id: str
    title: str
    metric: list[str]
    rows: list[str]
    columns: list[str]
    tolerance: float
    paper: str = ""
    source: str = "metrics"
    variant: str | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    order: dict[str, list[Any]] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    paper_unit: str = "fraction"
    digits: int = 3
    cells: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    reference: dict[str, list[str]] = field(default_factory=dict)
    label_set: str = ""
    # Per-dataset tolerances where n (hence the sampling error) differs a lot between datasets.
    tolerance_by_dataset: dict[str, float] = field(default_factory=dict)
    # The file's `paper_setup` (cqabench.report.comparability.PaperSetup): what the paper's numbers
    # are on; None: nothing is judged not comparable.
    setup: Any = None

    def tolerance_for(self, values: dict[str, Any]) -> float:
        """The tolerance of one cell (dimension -> value): its dataset's, else the table's."""
        return self.tolerance_by_dataset.get(str(values.get("dataset")), self.tolerance)

    def label(self, dimension: str, value: Any) -> str:
        """The printed label of one dimension value: the table's own `labels`, else the paper's."""
        return self.labels.get(str(value), paper_label(self.label_set, dimension, value))

    def is_reference(self, values: dict[str, Any]) -> bool:
        """Whether a cell (dimension -> value) is one of the rows only the paper has."""
        return any(str(values.get(d)) in wanted for d, wanted in self.reference.items())

    @property
    def dimensions(self) -> list[str]:
        return self.rows + self.columns

    def key_of(self, values: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(row key, column key) of a record, every part as text so YAML ints match Parquet ints."""
        return (tuple(str(values.get(d)) for d in self.rows), tuple(str(values.get(d)) for d in self.columns))

    @property
    def paper_factor(self) -> float:
        return PAPER_UNITS[self.paper_unit]

    def published(self) -> dict[tuple[tuple[str, ...], tuple[str, ...]], float]:
        """The paper's numbers as fractions (converted from `paper_unit`), keyed like `key_of`."""
        return {self.key_of(c): float(c["value"]) * self.paper_factor for c in self.cells}


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _paper_unit(raw: dict[str, Any], where: str) -> str:
    """`paper_unit`, or the unit an old `paper_scale` meant; unclear combinations fail."""
    unit, scale = raw.get("paper_unit"), raw.get("paper_scale")
    if unit is not None and scale is not None:
        raise ConfigError(f"{where}: give paper_unit only (paper_scale is the old name of the same thing)")
    if scale is not None:
        try:
            unit = _LEGACY_SCALES[float(scale)]
        except (KeyError, TypeError, ValueError):
            raise ConfigError(
                f"{where}: paper_scale {scale!r} is not a unit; write paper_unit: percent "
                "(the paper prints 41.2 for 0.412) or paper_unit: fraction"
            ) from None
    if unit is None:
        if raw.get("cells"):
            raise ConfigError(f"{where}: cells need paper_unit: percent | fraction (how the paper prints them)")
        return "fraction"
    if str(unit) not in PAPER_UNITS:
        raise ConfigError(f"{where}: paper_unit must be one of {sorted(PAPER_UNITS)}, not {unit!r}")
    return str(unit)


def _tolerances(raw: Any, where: str) -> dict[str, float]:
    if raw is None:
        return {}
    try:
        return {str(k): float(v) for k, v in dict(raw).items()}
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: tolerance_by_dataset must map dataset -> number, not {raw!r}") from None


def parse_table(raw: dict[str, Any], paper: str, where: str, label_set: str = "") -> TableSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: each table must be a mapping")
    unknown = set(raw) - _TABLE_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(_TABLE_KEYS)}")
    for key in ("id", "metric", "rows", "columns", "tolerance"):
        if raw.get(key) in (None, "", []):
            raise ConfigError(f"{where}: table needs '{key}'")
    spec = TableSpec(
        id=str(raw["id"]),
        title=str(raw.get("title", raw["id"])),
        metric=[str(m) for m in _as_list(raw["metric"])],
        rows=[str(d) for d in _as_list(raw["rows"])],
        columns=[str(d) for d in _as_list(raw["columns"])],
        tolerance=float(raw["tolerance"]),
        paper=paper,
        source=str(raw.get("source", "metrics")),
        variant=None if raw.get("variant") is None else str(raw["variant"]),
        filters=dict(raw.get("filters") or {}),
        order={str(k): list(v) for k, v in (raw.get("order") or {}).items()},
        labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
        paper_unit=_paper_unit(raw, where),
        digits=int(raw.get("digits", 3)),
        cells=list(raw.get("cells") or []),
        note=str(raw.get("note", "")),
        reference={str(k): [str(v) for v in _as_list(vals)] for k, vals in (raw.get("reference") or {}).items()},
        label_set=label_set,
        tolerance_by_dataset=_tolerances(raw.get("tolerance_by_dataset"), where),
    )
    bad = sorted(set(spec.reference) - set(spec.dimensions))
    if bad:
        raise ConfigError(f"{where} ({spec.id}): reference names {bad}, which are not rows or columns")
    if spec.source not in ("metrics", "per_question"):
        raise ConfigError(f"{where} ({spec.id}): source must be 'metrics' or 'per_question'")
    if len(spec.metric) > 1 and "metric" not in spec.dimensions:
        raise ConfigError(f"{where} ({spec.id}): several metrics need 'metric' among rows or columns")
    for i, cell in enumerate(spec.cells):
        if not isinstance(cell, dict) or "value" not in cell:
            raise ConfigError(f"{where} ({spec.id}): cells[{i}] needs a 'value'")
        missing = [d for d in spec.dimensions if d not in cell and not (d == "metric" and len(spec.metric) == 1)]
        if missing:
            raise ConfigError(f"{where} ({spec.id}): cells[{i}] lacks {missing}")
        if "metric" in spec.dimensions and "metric" not in cell:
            cell["metric"] = spec.metric[0]
        try:
            float(cell["value"])
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where} ({spec.id}): cells[{i}].value is not a number") from exc
    return spec


def load_expected(path: str | Path) -> list[TableSpec]:
    """All table specs of one expected-results file."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("tables"), list):
        raise ConfigError(f"{path}: expected a mapping with a 'tables' list")
    unknown = sorted(set(doc) - _FILE_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {unknown}; allowed: {sorted(_FILE_KEYS)}")
    paper = str(doc.get("paper", ""))
    label_set = str(doc.get("label_set") or (path.stem if path.stem in PAPER_LABELS else ""))
    if label_set and label_set not in PAPER_LABELS:
        raise ConfigError(f"{path}: label_set {label_set!r} is not one of {sorted(PAPER_LABELS)}")
    note = str(doc.get("note") or "")
    specs = [parse_table(t, paper, f"{path} tables[{i}]", label_set) for i, t in enumerate(doc["tables"])]
    if doc.get("paper_setup") is not None:
        from cqabench.report.comparability import parse_paper_setup

        setup = parse_paper_setup(doc["paper_setup"], f"{path} paper_setup")
        for spec in specs:
            spec.setup = setup
    if note:  # a file-wide note (e.g. what data the published numbers are on) ends every table's note
        for spec in specs:
            spec.note = f"{spec.note}\n\n{note}".strip() if spec.note else note
    ids = [s.id for s in specs]
    if len(ids) != len(set(ids)):
        raise ConfigError(f"{path}: table ids repeat: {ids}")
    return specs


def table_ids(paths: list[str | Path]) -> list[str]:
    """Ids of every table in these files (what the report rule names its outputs after)."""
    return [spec.id for p in paths for spec in load_expected(p)]
