"""Paper-layout tables: our number beside the paper's, the difference, and OK / FAIL.

Modelled on a reproduction matrix: a reader sees at a glance which published cells we match
within the stated tolerance, which we miss, and which we have not run (shown as missing, never
as zero).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from cqabench.io import write_json, write_text
from cqabench.report.expected import TableSpec

MISSING = "missing"


@dataclass
class Cell:
    ours: float | None
    paper: float | None
    n_cells: int = 0  # how many of our cells matched (more than one is ambiguous)

    @property
    def diff(self) -> float | None:
        return None if self.ours is None or self.paper is None else self.ours - self.paper

    def status(self, tolerance: float) -> str:
        if self.paper is None:
            return ""
        if self.ours is None:
            return MISSING
        return "OK" if abs(self.diff) <= tolerance + 1e-12 else "FAIL"


@dataclass
class Grid:
    spec: TableSpec
    row_keys: list[tuple[str, ...]]
    col_keys: list[tuple[str, ...]]
    cells: dict[tuple[tuple[str, ...], tuple[str, ...]], Cell]

    def summary(self) -> dict[str, Any]:
        statuses = [c.status(self.spec.tolerance) for c in self.cells.values()]
        return {
            "id": self.spec.id,
            "tolerance": self.spec.tolerance,
            "ok": statuses.count("OK"),
            "fail": statuses.count("FAIL"),
            "missing": statuses.count(MISSING),
            "ours_only": sum(1 for c in self.cells.values() if c.paper is None and c.ours is not None),
            "ambiguous": sum(1 for c in self.cells.values() if c.n_cells > 1),
        }


def _matches(frame: pd.DataFrame, filters: dict[str, Any]) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for column, wanted in filters.items():
        if column not in frame.columns:
            return pd.Series(False, index=frame.index)
        values = {str(v) for v in (wanted if isinstance(wanted, list) else [wanted])}
        mask &= frame[column].astype("string").isin(values).fillna(False).astype(bool)
    return mask


def _dimension_text(value: Any) -> str:
    """A dimension value as text; integer columns read back as floats when some rows are null."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "None"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def select(frame: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """The rows a table is about: its metrics, variant and filters; dimension columns as text."""
    if frame.empty or "metric" not in frame.columns:
        return frame.iloc[0:0]
    mask = frame["metric"].astype("string").isin(spec.metric).fillna(False).astype(bool)
    if spec.variant is not None and "variant" in frame.columns:
        mask &= (frame["variant"].astype("string") == spec.variant).fillna(False).astype(bool)
    mask &= _matches(frame, spec.filters)
    chosen = frame[mask].copy()
    for dim in spec.dimensions:
        if dim not in chosen.columns:
            chosen[dim] = None
        chosen[dim] = chosen[dim].map(_dimension_text)
    return chosen


def _ordered(keys: set[tuple[str, ...]], dims: list[str], spec: TableSpec) -> list[tuple[str, ...]]:
    def rank(key: tuple[str, ...]) -> tuple:
        out = []
        for dim, part in zip(dims, key):
            order = [str(v) for v in spec.order.get(dim, [])]
            out.append((order.index(part), "") if part in order else (len(order), part))
        return tuple(out)

    return sorted(keys, key=rank)


def build_grid(metrics: pd.DataFrame, per_question: pd.DataFrame | None, spec: TableSpec) -> Grid:
    """Our numbers (means over cells for per-question tables) and the paper's, on one grid."""
    published = spec.published()
    ours: dict[tuple, tuple[float, int]] = {}
    if spec.source == "per_question":
        chosen = select(per_question if per_question is not None else pd.DataFrame(), spec)
        if not chosen.empty:
            for _, group in chosen.groupby(spec.dimensions + ["cell_id"], dropna=False, sort=False):
                first = group.iloc[0].to_dict()
                key = spec.key_of(first)
                mean = float(pd.to_numeric(group["value"], errors="coerce").mean())
                prev = ours.get(key)
                ours[key] = (mean, 1) if prev is None else (prev[0], prev[1] + 1)
    else:
        chosen = select(metrics, spec)
        if "cell_id" in chosen.columns:
            chosen = chosen.sort_values("cell_id")
        for record in chosen.to_dict("records"):
            key = spec.key_of(record)
            value = record.get("value")
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            prev = ours.get(key)
            ours[key] = (float(value), 1) if prev is None else (prev[0], prev[1] + 1)
    keys = set(ours) | set(published)
    rows = _ordered({k[0] for k in keys}, spec.rows, spec)
    cols = _ordered({k[1] for k in keys}, spec.columns, spec)
    cells = {}
    for key in keys:
        value, count = ours.get(key, (None, 0))
        cells[key] = Cell(ours=value, paper=published.get(key), n_cells=count)
    return Grid(spec, rows, cols, cells)


def _label(spec: TableSpec, key: tuple[str, ...]) -> str:
    return " / ".join(spec.labels.get(part, part) for part in key)


def format_cell(cell: Cell | None, spec: TableSpec) -> str:
    """'ours / paper (Δ±d) OK|FAIL', 'ours', or '— / paper (missing)'."""
    if cell is None:
        return ""
    d = spec.digits
    ours = "—" if cell.ours is None else f"{cell.ours:.{d}f}"
    if cell.n_cells > 1:
        ours += f" (×{cell.n_cells})"
    if cell.paper is None:
        return ours
    status = cell.status(spec.tolerance)
    if cell.ours is None:
        return f"— / {cell.paper:.{d}f} ({MISSING})"
    return f"{ours} / {cell.paper:.{d}f} (Δ{cell.diff:+.{d}f}) {status}"


def _legend(grid: Grid) -> str:
    s = grid.summary()
    spec = grid.spec
    parts = [
        f"Cells: ours / paper (Δ = ours − paper) OK when |Δ| ≤ {spec.tolerance:g}.",
        f"OK {s['ok']}, FAIL {s['fail']}, missing {s['missing']} (paper has it, we did not run it), "
        f"ours only {s['ours_only']}.",
    ]
    if s["ambiguous"]:
        parts.append(f"{s['ambiguous']} cells matched several of our runs (×N): narrow the table's filters; "
                     "the first by cell_id is shown.")
    if not spec.cells:
        parts.append("No published numbers are recorded for this table (see the YAML comments).")
    return " ".join(parts)


def to_markdown(grid: Grid) -> str:
    spec = grid.spec
    corner = " / ".join(spec.rows) + " \\ " + " / ".join(spec.columns)
    header = [corner] + [_label(spec, c) for c in grid.col_keys]
    lines = [f"### {spec.title}", ""]
    if spec.paper:
        lines += [f"Paper: {spec.paper}", ""]
    lines += ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |",
              "|" + "---|" * len(header)]
    for r in grid.row_keys:
        row = [_label(spec, r)] + [format_cell(grid.cells.get((r, c)), spec) for c in grid.col_keys]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in row) + " |")
    if not grid.row_keys:
        lines.append("| (no cells) |")
    lines += ["", _legend(grid)]
    if spec.note:
        lines += ["", spec.note]
    return "\n".join(lines) + "\n"


_CSS = {"OK": "background:#d9f2d9", "FAIL": "background:#f8d0d0", MISSING: "background:#eeeeee;color:#777"}


def to_html(grid: Grid) -> str:
    spec = grid.spec
    esc = html.escape
    out = [f"<h3>{esc(spec.title)}</h3>"]
    if spec.paper:
        out.append(f"<p>Paper: {esc(spec.paper)}</p>")
    out.append('<table border="1" cellspacing="0" cellpadding="4">')
    corner = " / ".join(spec.rows) + " \\ " + " / ".join(spec.columns)
    out.append("<tr>" + f"<th>{esc(corner)}</th>" + "".join(f"<th>{esc(_label(spec, c))}</th>" for c in grid.col_keys) + "</tr>")
    for r in grid.row_keys:
        tds = []
        for c in grid.col_keys:
            cell = grid.cells.get((r, c))
            style = _CSS.get(cell.status(spec.tolerance), "") if cell else ""
            tds.append(f'<td style="{style}">{esc(format_cell(cell, spec))}</td>')
        out.append(f"<tr><th>{esc(_label(spec, r))}</th>{''.join(tds)}</tr>")
    out.append("</table>")
    out.append(f"<p>{esc(_legend(grid))}</p>")
    if spec.note:
        out.append(f"<p>{esc(spec.note)}</p>")
    return "\n".join(out) + "\n"


def render_tables(
    metrics: pd.DataFrame, per_question: pd.DataFrame | None, specs: list[TableSpec], out_dir: str | Path
) -> list[dict[str, Any]]:
    """Write <id>.md and <id>.html per table plus summary.json; returns the summaries."""
    out_dir = Path(out_dir)
    summaries = []
    for spec in specs:
        grid = build_grid(metrics, per_question, spec)
        write_text(to_markdown(grid), out_dir / f"{spec.id}.md")
        write_text("<!DOCTYPE html><meta charset='utf-8'>\n" + to_html(grid), out_dir / f"{spec.id}.html")
        summaries.append(grid.summary())
    write_json(summaries, out_dir / "summary.json")
    return summaries


def read_fact_table(path: str | Path | None) -> pd.DataFrame:
    """A fact table as pandas with nullable columns; an absent path reads as empty."""
    if path is None or not Path(path).exists():
        return pd.DataFrame()
    return pd.read_parquet(path)


def dumps_summary(summaries: list[dict[str, Any]]) -> str:
    return json.dumps(summaries, indent=2)
