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
      tolerance: float             # |ours - paper| <= tolerance  ->  OK, else FAIL (in our units)
      paper_scale: float           # multiply the paper's number by this to get our units (default 1)
      digits: int                  # decimals shown (default 3)
      cells: [{<dimension>: value, ..., value: float}, ...]   # published numbers
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cqabench.errors import ConfigError

_TABLE_KEYS = {"id", "title", "source", "metric", "variant", "rows", "columns", "filters", "order",
               "labels", "tolerance", "paper_scale", "digits", "cells", "note"}


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
    paper_scale: float = 1.0
    digits: int = 3
    cells: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    @property
    def dimensions(self) -> list[str]:
        return self.rows + self.columns

    def key_of(self, values: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(row key, column key) of a record, every part as text so YAML ints match Parquet ints."""
        return (tuple(str(values.get(d)) for d in self.rows), tuple(str(values.get(d)) for d in self.columns))

    def published(self) -> dict[tuple[tuple[str, ...], tuple[str, ...]], float]:
        """The paper's numbers in our units, keyed like `key_of`."""
        return {self.key_of(c): float(c["value"]) * self.paper_scale for c in self.cells}


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def parse_table(raw: dict[str, Any], paper: str, where: str) -> TableSpec:
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
        paper_scale=float(raw.get("paper_scale", 1.0)),
        digits=int(raw.get("digits", 3)),
        cells=list(raw.get("cells") or []),
        note=str(raw.get("note", "")),
    )
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
    paper = str(doc.get("paper", ""))
    specs = [parse_table(t, paper, f"{path} tables[{i}]") for i, t in enumerate(doc["tables"])]
    ids = [s.id for s in specs]
    if len(ids) != len(set(ids)):
        raise ConfigError(f"{path}: table ids repeat: {ids}")
    return specs


def table_ids(paths: list[str | Path]) -> list[str]:
    """Ids of every table in these files (what the report rule names its outputs after)."""
    return [spec.id for p in paths for spec in load_expected(p)]
