"""The fact tables' columns: their names and types, which row is a cell's primary metric, and
rows -> a typed Arrow table.

The fact tables are what people load into pandas, polars or DuckDB to slice the matrix any way
they like, so they hold plain columns only: strings, int64, float64, bool. Nested settings
become JSON strings (`plain_value`). A metric file that lacks a key yields a null, and a switch
we did not know about when this was written becomes one more column (`to_table` types it from
its values), so a new stage or switch never breaks the report. docs/report.md lists the
columns; `cqabench.report.aggregate` fills them, `cqabench.report.fact_provenance` the
provenance ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from cqabench.common import provenance as prov_mod

# The switches every cell may carry, in the order the fact table shows them, with their types.
CELL_COLUMNS: dict[str, pa.DataType] = {
    "stage": pa.string(),
    "dataset": pa.string(),
    "split": pa.string(),
    "corpus": pa.string(),
    "relevance": pa.string(),  # the dataset's relevance mode (datasets.<name>.relevance); null: a run before it existed
    "serialization": pa.string(),
    "retriever": pa.string(),
    "retriever_settings": pa.string(),  # JSON
    "llm": pa.string(),
    "backend": pa.string(),
    "dtype": pa.string(),
    "prompt": pa.string(),
    "template_hash": pa.string(),
    "setting": pa.string(),
    # what the prompts showed: none | retrieved | gold | facts (StrategyQA's annotators' facts) | tools
    "context_source": pa.string(),
    "k": pa.int64(),
    "identical_id_policy": pa.string(),
    # a cell outside the configured grid, counted because it exists on disk (asked for by its path:
    # cqabench.planner.cells); null when the table was built without the config's plan (no grid known)
    "off_grid": pa.bool_(),
}
METRIC_COLUMNS: dict[str, pa.DataType] = {
    "metric": pa.string(),
    "breakdown": pa.string(),  # TANQ: the dimension of a breakdown row (null: the whole cell)
    "breakdown_value": pa.string(),  # its bucket
    "variant": pa.string(),
    # the dataset's primary metric and variant (one row per cell and dataset; primary_metric())
    "primary": pa.bool_(),
    "value": pa.float64(),
    "unit": pa.string(),
    "n": pa.int64(),
    "reason": pa.string(),
    # answer metrics: questions whose generation failed, left out of the mean (n + n_failed were asked);
    # null on retrieval rows and in metric files written before failed items were counted
    "n_failed": pa.int64(),
}
# How an answer cell's predictions spread (cqabench.evaluation.answer_spread, metrics.json `answers`): the most
# frequent answer and its share, and the flags the report shows; null on retrieval rows.
ANSWER_COLUMNS: dict[str, pa.DataType] = {
    "n_answers": pa.int64(),
    "top_answer": pa.string(),
    "top_answer_count": pa.int64(),
    "top_answer_share": pa.float64(),
    "constant_answer": pa.bool_(),
    "low_parse_rate": pa.bool_(),
}
UNIT = "fraction"
PROVENANCE_COLUMNS: dict[str, pa.DataType] = {
    "config_hash": pa.string(),
    "git_commit": pa.string(),
    "generation_git_commit": pa.string(),
    "aggregate_git_commit": pa.string(),
    "python": pa.string(),
    **{f"pkg_{key}": pa.string() for key in prov_mod.KEY_PACKAGES},
    "package_versions": pa.string(),  # JSON {distribution: version}: the complete record
    "model_source": pa.string(),
    "model_hash": pa.string(),
    "model_revision": pa.string(),
    # generation rows: the generate job (summary.json); retrieval rows: the job that scored the run
    "wall_time_s": pa.float64(),
    "wall_time_note": pa.string(),  # what wall_time_s covers (items from the cache), or why it is missing
    "prompt_tokens": pa.int64(),
    "output_tokens": pa.int64(),
    # documents the prompts gave per question (cqabench.evaluation.evaluate.docs_given): RAG@k may give fewer than k
    "docs_given_min": pa.int64(),
    "docs_given_mean": pa.float64(),
    "docs_given_max": pa.int64(),
}
# Generation settings that decide the output; null on retrieval rows (nothing is sampled).
SAMPLING_COLUMNS: dict[str, pa.DataType] = {
    "sampling_temperature": pa.float64(),
    "sampling_top_p": pa.float64(),
    "sampling_max_new_tokens": pa.int64(),
    "sampling_seed": pa.int64(),
    "sampling_frequency_penalty": pa.float64(),
    "sampling_presence_penalty": pa.float64(),
    "sampling_stop": pa.string(),  # JSON list of stop strings (a list has no plain column type)
}
# Common retriever settings; any other key becomes `retriever_<key>` too (nested keys joined by
# "_"). The search depth `k` is `retriever_depth`, so it is not read as the RAG `k`.
# Null on closed-book and oracle rows (nothing was retrieved).
RETRIEVER_COLUMNS: dict[str, pa.DataType] = {
    "retriever_type": pa.string(),
    "retriever_model": pa.string(),
    "retriever_depth": pa.int64(),
    "retriever_k1": pa.float64(),
    "retriever_b": pa.float64(),
    "retriever_stemmer": pa.string(),
    "retriever_language": pa.string(),
    "retriever_similarity": pa.string(),
    "retriever_backend": pa.string(),
    "retriever_max_length": pa.int64(),
}
# Provenance every row must have (a value or a string saying why it is unknown).
REQUIRED_PROVENANCE = (
    "config_hash",
    "git_commit",
    "aggregate_git_commit",
    "python",
    *(f"pkg_{key}" for key in prov_mod.KEY_PACKAGES),
    "model_source",
    "model_hash",
    "model_revision",
)
ID_COLUMNS: dict[str, pa.DataType] = {"cell_id": pa.string(), "source": pa.string()}
PER_QUESTION_COLUMNS: dict[str, pa.DataType] = {
    "qid": pa.string(),
    "metric": pa.string(),
    "variant": pa.string(),
    "primary": pa.bool_(),  # as in metrics.parquet: the cell's primary metric and variant
    "value": pa.float64(),
    "unit": pa.string(),
}
# Joined from the prepared queries so reports can break scores down by type or skill.
# The gold answer table's size (TANQ: Table 8 groups by relations = columns - 1, Table 9 by rows).
QUESTION_COLUMNS: dict[str, pa.DataType] = {
    "question_type": pa.string(),
    "skills": pa.string(),
    "answer_columns": pa.int64(),
    "answer_rows": pa.int64(),
}

FACT_COLUMNS = {
    **ID_COLUMNS,
    **CELL_COLUMNS,
    **RETRIEVER_COLUMNS,
    **METRIC_COLUMNS,
    **ANSWER_COLUMNS,
    **PROVENANCE_COLUMNS,
    **SAMPLING_COLUMNS,
}
PQ_COLUMNS = {**ID_COLUMNS, **CELL_COLUMNS, **PER_QUESTION_COLUMNS, **QUESTION_COLUMNS}

# A retrieval cell's primary metric: nDCG@10 as trec_eval computes it (DEXTER Table 2, the
# heatmap, the retrieval significance tests). Answer cells take their dataset's first entry of
# cqabench.evaluation.scoring.PRIMARY (the k-effect plot's metric).
PRIMARY_RETRIEVAL = ("ndcg_cut_10", "trec_eval")


def primary_metric(stage: Any, dataset: Any) -> tuple[str, str] | None:
    """(metric, variant) that is a cell's one headline number, or None for a dataset without one.

    AmbigQA, FinQA and the text datasets carry several variants of their main metric (official or
    ours / the toolkit's `dexter`; FinQA also `exe_ans`), StrategyQA two metrics; a pivot that does not pick one takes whichever comes first. `primary` in the
    fact table marks the pick, so `WHERE "primary"` gives one value per (cell, dataset).
    """
    if stage == "retrieval":
        return PRIMARY_RETRIEVAL
    if stage == "generation":
        from cqabench.evaluation.scoring import PRIMARY

        first = PRIMARY.get(str(dataset))
        return first[0] if first else None
    return None


def is_primary(stage: Any, dataset: Any, metric: Any, variant: Any, breakdown: Any = None) -> bool:
    """Whether a fact row is its cell's primary metric (a breakdown row never is)."""
    return breakdown is None and primary_metric(stage, dataset) == (metric, variant)


def plain_value(value: Any) -> Any:
    """A value a Parquet column can hold without extension types: nested -> JSON text."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def as_number(value: Any, kind: type) -> Any:
    """`value` as an int or float (`kind`); None when blank, not a number or NaN."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(number):
        return None
    return int(number) if kind is int else number


def _infer_type(values: Iterable[Any]) -> pa.DataType:
    """Type of an unknown column: the one Python type its values share, else string."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return pa.string()
    if kinds == {bool}:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64()
    if kinds <= {int, float}:
        return pa.float64()
    return pa.string()


def _coerce(value: Any, dtype: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_string(dtype):
        return value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)
    if pa.types.is_int64(dtype):
        return as_number(value, int)
    if pa.types.is_float64(dtype):
        return as_number(value, float)
    if pa.types.is_boolean(dtype):
        return bool(value)
    return value


def to_table(rows: Sequence[dict[str, Any]], known: dict[str, pa.DataType]) -> pa.Table:
    """Rows -> Arrow table: known columns first with fixed types, unknown ones after, sorted."""
    extra = sorted({k for r in rows for k in r} - set(known))
    types = dict(known)
    for name in extra:
        types[name] = _infer_type(r.get(name) for r in rows)
    columns = {name: pa.array([_coerce(r.get(name), dtype) for r in rows], type=dtype) for name, dtype in types.items()}
    return pa.table(columns)
