"""Which cells one paper table needs: the inputs of its own target rule, `table_<id>`.

A paper table (config/expected/*.yaml) shows the rows of the fact table that its `metric`,
`variant` and `filters` select (cqabench.report.tables.select). Built from the whole fact table
it needs every cell of the config, 2,610 jobs for DEXTER's Table 2, 528 of them LLM generation.
Its own rule takes only the metric files of the cells that can have such a row, decided at
planning from what each cell is (its stage, dataset, setting, ...) and which (metric, variant)
rows its metric file will hold (`written_metrics`, from the code that writes them). The choice
is conservative: a filter on a column planning cannot know (a TANQ breakdown, a provenance
column) keeps the cell, so the table built from its own inputs is the table the whole fact
table gives (tests/planner/test_table_targets.py checks both ways on the same files).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cqabench.report.expected import TableSpec

# Cell columns of the fact table (cqabench.report.aggregate.CELL_COLUMNS) a planned cell can be
# missing: a filter on one of them never matches such a cell's rows (their value is null).
CELL_COLUMNS = (
    "stage",
    "dataset",
    "split",
    "corpus",
    "relevance",
    "serialization",
    "retriever",
    "llm",
    "backend",
    "prompt",
    "setting",
    "k",
)
# Filter keys that select metric rows, not cells: checked against `written_metrics`.
ROW_KEYS = ("metric", "variant")


def written_metrics(stage: str, dataset: str) -> set[tuple[str, str]] | None:
    """The (metric, variant) rows a cell's metrics.json holds (None: not known, keep the cell).

    Retrieval: every trec_eval measure, and StrategyQA's Recall@10 on strategyqa (the rule passes
    --strategyqa-recall there); answers: cqabench.evaluation.scoring.METRICS of the dataset and parse_ok.
    """
    if stage == "retrieval":
        from cqabench.evaluation.metrics.retrieval import STRATEGYQA_VARIANT, TREC_VARIANT, measure_names

        rows = {(m, TREC_VARIANT) for m in measure_names()}
        return rows | ({("recall_10", STRATEGYQA_VARIANT)} if dataset == "strategyqa" else set())
    if stage == "generation":
        from cqabench.evaluation.scoring import METRICS, PARSE_METRIC

        return set(METRICS[dataset]) | {PARSE_METRIC} if dataset in METRICS else None
    return None


def _wanted(value: Any) -> set[str]:
    return {str(v) for v in (value if isinstance(value, list) else [value])}


def has_rows(spec: TableSpec, stage: str, dataset: str) -> bool:
    """Whether a cell of this stage and dataset writes a row of the table's metrics and variant."""
    rows = written_metrics(stage, dataset)
    if rows is None:
        return True
    variants = _wanted(spec.filters["variant"]) if "variant" in spec.filters else None
    metrics = set(spec.metric) & (_wanted(spec.filters["metric"]) if "metric" in spec.filters else set(spec.metric))
    return any(
        m in metrics and (spec.variant is None or v == spec.variant) and (variants is None or v in variants)
        for m, v in rows
    )


def needed_by(spec: TableSpec, cell: Mapping[str, Any]) -> bool:
    """Whether a planned cell (its fact-table cell columns) can put a row into the table.

    A filter on a cell column the cell has must match its value, as text (the fact table's
    comparison); one on a cell column it lacks never matches; any other key keeps it.
    """
    for key, wanted in spec.filters.items():
        if key in ROW_KEYS:
            continue
        if key in cell:
            if str(cell[key]) not in _wanted(wanted):
                return False
        elif key in CELL_COLUMNS:
            return False
    return has_rows(spec, str(cell.get("stage")), str(cell.get("dataset")))


def cells_of(spec: TableSpec, cells: Iterable[tuple[Any, Mapping[str, Any]]]) -> list[Any]:
    """The keys of the (key, cell columns) pairs whose cell the table needs, in the given order."""
    return [key for key, cell in cells if needed_by(spec, cell)]
