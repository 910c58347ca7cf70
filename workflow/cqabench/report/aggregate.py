"""Gather every cell's metrics.json (and per-question scores) into two flat fact tables.

One row per (cell, metric) in metrics.parquet and per (cell, question, metric) in
per_question.parquet, each tagged with the cell's switches; the columns and their types are
`cqabench.report.fact_columns`', the provenance columns `cqabench.report.fact_provenance`'.

Units: every `value` is a fraction in 0..1 (`unit` column: "fraction"). A metric file entry
says its unit (`"unit": "fraction"` or `"percent"`, converted here once); an entry without one
is from before units were recorded: answer metrics (stage generation) were then percentages and
are divided by 100, retrieval metrics were already fractions. A null value (nothing evaluable)
keeps its `reason` column; a value that is present has reason null. TANQ's breakdown rows get
their dimension and bucket as columns (`breakdown`, `breakdown_value`) apart from the metric name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cqabench.common import provenance as prov_mod
from cqabench.common.errors import DataError
from cqabench.common.io import write_parquet
from cqabench.report.fact_columns import (
    ANSWER_COLUMNS,
    FACT_COLUMNS,
    METRIC_COLUMNS,
    PQ_COLUMNS,
    UNIT,
    as_number,
    is_primary,
    plain_value,
    to_table,
)
from cqabench.report.fact_provenance import (
    generation_summary,
    index_settings,
    provenance_columns,
    retriever_columns,
    wall_time_columns,
)

log = logging.getLogger(__name__)

UNIT_FACTORS = {"fraction": 1.0, "percent": 0.01}
SETTINGS_WITHOUT_RETRIEVAL = ("closed", "oracle")
PER_QUESTION_NAMES = ("per_question.parquet", "per_query.parquet")
NO_CONFIG_HASH = "unknown (no config given to aggregate)"


def find_metric_files(results_dir: str | Path) -> list[Path]:
    """Every metrics.json under the retrieval and answer-metric trees, sorted for stable output."""
    root = Path(results_dir)
    found = [p for sub in ("retrieval", "metrics") for p in (root / sub).rglob("metrics.json")]
    return sorted(found)


def cell_id(path: Path, results_dir: str | Path | None = None) -> str:
    """A cell's name: its folder, relative to the results tree (results/<name>/) when it lies below it."""
    folder = path.parent
    if results_dir is not None:
        try:
            return folder.resolve().relative_to(Path(results_dir).resolve()).as_posix()
        except ValueError:
            pass
    parts = folder.parts
    for anchor in ("retrieval", "metrics"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor) :])
    return folder.as_posix()


def read_metric_file(path: str | Path) -> dict[str, Any]:
    """Parse one metrics.json, checking only what the fact table cannot do without."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(path, None, "(file)", f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DataError(path, None, "(file)", "expected a JSON object")
    cell = doc.get("cell") or {}
    metrics = doc.get("metrics")
    prov = doc.get("provenance") or {}
    if not isinstance(cell, dict):
        raise DataError(path, None, "cell", "expected an object")
    if not isinstance(prov, dict):
        raise DataError(path, None, "provenance", "expected an object")
    if not isinstance(metrics, list):
        raise DataError(path, None, "metrics", "expected a list of {metric, variant, value, n}")
    answers = doc.get("answers") or {}
    if not isinstance(answers, dict):
        raise DataError(path, None, "answers", "expected an object (cqabench.evaluation.answer_spread)")
    for i, m in enumerate(metrics):
        if not isinstance(m, dict) or not m.get("metric"):
            raise DataError(path, i, "metrics", "each entry needs a 'metric' name")
    return {"cell": cell, "metrics": metrics, "provenance": prov, "answers": answers}


def to_fraction(value: Any, unit: Any, stage: Any, where: Path, index: int) -> float | None:
    """A metric value in 0..1: `unit` converted once; files without a unit read as they were written."""
    number = as_number(value, float)
    if unit is None or unit == "":
        unit = "percent" if stage == "generation" else "fraction"  # the convention before units were recorded
        if unit == "percent" and index == 0:
            log.warning(
                "%s: no unit recorded (written before units were); answer metrics read as percent and divided by 100",
                where,
            )
    factor = UNIT_FACTORS.get(str(unit))
    if factor is None:
        raise DataError(where, index, "metrics.unit", f"unknown unit {unit!r}; known: {sorted(UNIT_FACTORS)}")
    return None if number is None else number * factor


def _normalize_setting(row: dict[str, Any]) -> None:
    """Closed-book and oracle cells retrieve nothing: retriever "none" and k 0 in every row."""
    if row.get("stage") == "generation" and row.get("setting") in SETTINGS_WITHOUT_RETRIEVAL:
        if row.get("retriever") in (None, ""):
            row["retriever"] = "none"
        if row.get("k") in (None, ""):
            row["k"] = 0


def off_grid_of(path: Path, off_grid: Collection[str | Path] | None) -> bool | None:
    """The `off_grid` column of a metric file's rows: whether it is among the plan's off-grid cells'
    (`Plan.off_grid_metric_files`); None when no plan said which cells are on the grid."""
    return None if off_grid is None else Path(path) in {Path(p) for p in off_grid}


def split_breakdown(name: str) -> tuple[str, str | None, str | None]:
    """A summary entry's name -> (metric, breakdown, breakdown_value).

    TANQ's scorer names breakdown rows "<metric>/<dimension>=<bucket>" (cqabench.evaluation.scoring);
    a query filters on a column far more easily than on a name pattern.
    """
    metric, sep, rest = name.partition("/")
    if not sep or "=" not in rest:
        return name, None, None
    dimension, _, bucket = rest.partition("=")
    return metric, dimension, bucket


def fact_rows(
    path: str | Path,
    results_dir: str | Path | None = None,
    config_hash: str | None = None,
    aggregate_commit: str | None = None,
    off_grid: Collection[str | Path] | None = None,
) -> list[dict[str, Any]]:
    """One row per (cell, metric) of one metric file; values as fractions, nulls with their reason.
    `off_grid`: the metric files of the plan's off-grid cells (None: no plan, the column is null)."""
    path = Path(path)
    doc = read_metric_file(path)
    cell, prov = dict(doc["cell"]), doc["provenance"]
    base: dict[str, Any] = {"cell_id": cell_id(path, results_dir), "source": str(path)}
    for key, value in cell.items():
        if key != "sampling":  # sampling becomes sampling_<key> columns
            base[key] = plain_value(value)
    if not base.get("stage"):  # older files: the tree a cell lives in names its stage
        first = base["cell_id"].split("/", 1)[0]
        base["stage"] = {"retrieval": "retrieval", "metrics": "generation"}.get(first)
    _normalize_setting(base)
    base["off_grid"] = off_grid_of(path, off_grid)
    settings: dict[str, Any] = {}
    if base.get("retriever") not in (None, "", "none"):
        given = cell.get("retriever_settings")
        cell_settings = given if isinstance(given, dict) else {}
        settings = {**index_settings(results_dir, cell), **cell_settings}
        base.update(retriever_columns(settings))
        base["retriever_settings"] = plain_value(settings) if settings else base.get("retriever_settings")
    summary = generation_summary(results_dir, base["cell_id"]) if base["stage"] == "generation" else None
    for key, value in provenance_columns(prov, cell, settings, base["stage"], summary).items():
        name = key if key not in base and key not in METRIC_COLUMNS else f"provenance_{key}"
        base[name] = value
    base.update({key: doc["answers"].get(key) for key in ANSWER_COLUMNS if key in doc["answers"]})
    wall_time_columns(base, results_dir, summary)
    base["config_hash"] = config_hash or NO_CONFIG_HASH
    base["aggregate_git_commit"] = aggregate_commit or prov_mod.git_commit()
    rows = []
    for i, m in enumerate(doc["metrics"]):
        row = dict(base)
        row["metric"], row["breakdown"], row["breakdown_value"] = split_breakdown(str(m["metric"]))
        row["variant"] = None if m.get("variant") is None else str(m.get("variant"))
        row["primary"] = is_primary(
            base.get("stage"), base.get("dataset"), row["metric"], row["variant"], row["breakdown"]
        )
        row["value"] = to_fraction(m.get("value"), m.get("unit"), base.get("stage"), path, i)
        row["unit"] = UNIT
        row["n"] = as_number(m.get("n"), int)
        row["n_failed"] = as_number(m.get("n_failed"), int)
        reason = m.get("reason")
        if row["value"] is None:
            row["reason"] = str(reason) if reason else "no value in the metric file"
        else:
            row["reason"] = None
        rows.append(row)
    return rows


def build_metrics_table(
    files: Sequence[str | Path],
    results_dir: str | Path | None = None,
    config_hash: str | None = None,
    aggregate_commit: str | None = None,
    off_grid: Collection[str | Path] | None = None,
) -> pa.Table:
    """The fact table of metric files; `config_hash` is the run's config (every row gets it)."""
    commit = aggregate_commit or prov_mod.git_commit()  # once, not per file
    rows = [row for f in files for row in fact_rows(f, results_dir, config_hash, commit, off_grid)]
    return to_table(rows, FACT_COLUMNS)


def _question_info(data_dir: Path | None, dataset: Any, split: Any, cache: dict) -> dict[str, dict[str, Any]]:
    """qid -> {question_type, skills JSON, answer_columns, answer_rows} from the prepared split.

    Type and skills come from queries.parquet, the gold table's size from answers.parquet
    (questions whose answer is a table); what a split does not have is simply absent.
    """
    if data_dir is None or not dataset or not split:
        return {}
    key = (dataset, split)
    if key not in cache:
        folder = data_dir / str(dataset) / str(split)
        info: dict[str, dict[str, Any]] = {}
        path = folder / "queries.parquet"
        if path.exists():
            cols = set(pq.read_schema(path).names)
            wanted = [c for c in ("qid", "question_type", "skills") if c in cols]
            for r in pq.read_table(path, columns=wanted).to_pylist():
                skills = r.get("skills")
                info[str(r["qid"])] = {
                    "question_type": r.get("question_type") or None,
                    "skills": json.dumps(list(skills)) if skills else None,
                }
        path = folder / "answers.parquet"
        if path.exists() and {"qid", "table_header", "table_rows"} <= set(pq.read_schema(path).names):
            for r in pq.read_table(path, columns=["qid", "table_header", "table_rows"]).to_pylist():
                if r.get("table_header"):
                    entry = info.setdefault(str(r["qid"]), {})
                    entry["answer_columns"] = len(r["table_header"])
                    entry["answer_rows"] = len(r.get("table_rows") or [])
        cache[key] = info
    return cache[key]


def per_question_rows(
    metric_file: str | Path,
    results_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    _cache: dict | None = None,
    off_grid: Collection[str | Path] | None = None,
) -> list[dict[str, Any]]:
    """The per-question scores beside one metric file, tagged with the cell's switches."""
    metric_file = Path(metric_file)
    pq_path = next((metric_file.parent / n for n in PER_QUESTION_NAMES if (metric_file.parent / n).exists()), None)
    if pq_path is None:
        return []
    cell = read_metric_file(metric_file)["cell"]
    base: dict[str, Any] = {"cell_id": cell_id(metric_file, results_dir), "source": str(pq_path)}
    base.update({k: plain_value(v) for k, v in cell.items()})
    table = pq.read_table(pq_path)
    missing = {"qid", "metric", "value"} - set(table.column_names)
    if missing:
        raise DataError(pq_path, None, ",".join(sorted(missing)), "per-question file lacks these columns")
    info = _question_info(
        Path(data_dir) if data_dir else None,
        cell.get("dataset"),
        cell.get("split"),
        _cache if _cache is not None else {},
    )
    if not base.get("stage"):  # older files: the tree a cell lives in names its stage (as in fact_rows)
        base["stage"] = {"retrieval": "retrieval", "metrics": "generation"}.get(base["cell_id"].split("/", 1)[0])
    _normalize_setting(base)
    base["off_grid"] = off_grid_of(metric_file, off_grid)
    rows = []
    for r in table.to_pylist():
        row = dict(base)
        for key, value in r.items():
            row[key if key not in base else f"pq_{key}"] = plain_value(value)
        row["qid"] = str(r["qid"])
        row["unit"] = UNIT  # per-question scores are 0..1 in every stage
        row["primary"] = is_primary(row.get("stage"), row.get("dataset"), row.get("metric"), row.get("variant"))
        for name, value in info.get(row["qid"], {}).items():
            if row.get(name) is None:
                row[name] = value
        rows.append(row)
    return rows


def build_per_question_table(
    files: Sequence[str | Path],
    results_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    off_grid: Collection[str | Path] | None = None,
) -> pa.Table:
    cache: dict = {}
    rows = [row for f in files for row in per_question_rows(f, results_dir, data_dir, cache, off_grid)]
    return to_table(rows, PQ_COLUMNS)


def aggregate(
    files: Sequence[str | Path],
    out_metrics: str | Path,
    out_per_question: str | Path,
    results_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    config_hash: str | None = None,
    off_grid: Collection[str | Path] | None = None,
) -> tuple[int, int]:
    """Write both fact tables atomically; returns their row counts. `off_grid` as in `fact_rows`."""
    metrics = build_metrics_table(files, results_dir, config_hash, off_grid=off_grid)
    per_question = build_per_question_table(files, results_dir, data_dir, off_grid)
    write_parquet(metrics, out_metrics)
    write_parquet(per_question, out_per_question)
    log.info(
        "aggregate: %d metric files -> %d metric rows, %d per-question rows",
        len(files),
        metrics.num_rows,
        per_question.num_rows,
    )
    return metrics.num_rows, per_question.num_rows
