"""Paper-layout tables: our number beside the paper's, the difference, and OK / FAIL.

Each table carries its own caption (`caption`): what it compares, our n and split per dataset,
the unit, the cell formats that actually occur in it, and, for a run that is not on the paper's
data, that caveat. One shared caption for every table described formats a table did not show.

Modelled on a reproduction matrix: a reader sees at a glance which published cells we match
within the stated tolerance, which we miss, and which we have not run (shown as missing, never
as zero). Every number is a fraction in 0..1 (ours from the fact tables, the paper's converted
from its `paper_unit` on read). A cell we ran but could not evaluate (null value with a reason,
e.g. retrieval on a split without qrels) shows "n/a" with a numbered footnote giving the reason.

Comparable or not (cqabench.report.comparability): given the run (`RunContext`: its config and
whether it is on the paper's data), a cell of ours is judged OK / FAIL only when its dataset,
split, question selection, corpus, relevance mode and metric variant are the paper's and no
known difference applies; otherwise it shows ours beside the paper's as "not comparable" with a
numbered note giving the reason, and the summary counts it apart. A run on the bundled sample is
not comparable anywhere.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from cqabench.common.io import write_json, write_text
from cqabench.evaluation.metrics.tanq_breakdowns import groups as tanq_groups_of
from cqabench.evaluation.metrics.tanq_breakdowns import table_length, tanq_type  # noqa: F401  (re-exported)
from cqabench.report import comparability
from cqabench.report.comparability import RunContext
from cqabench.report.expected import TableSpec

MISSING = "missing"
NA = "n/a"
NOT_COMPARABLE = "not comparable"
UNIT_NOTE = "All numbers are fractions (0–1); the paper's are converted from the unit it prints them in."


@dataclass
class Cell:
    ours: float | None
    paper: float | None
    n_cells: int = 0  # how many of our cells matched (more than one is ambiguous)
    reason: str | None = None  # ours is n/a (ran, nothing evaluable): why
    reference: bool = False  # a row only the paper has (its model, a human baseline): never "missing"
    tolerance: float | None = None  # this cell's (spec.tolerance_for); None: the table's
    not_comparable: str | None = None  # the run's setup differs from the paper's here: why

    @property
    def diff(self) -> float | None:
        return None if self.ours is None or self.paper is None else self.ours - self.paper

    @property
    def not_available(self) -> bool:
        return self.ours is None and self.reason is not None

    def status(self, tolerance: float) -> str:
        if self.paper is None:
            return ""
        if self.not_available:
            return NA
        if self.ours is None:
            return "" if self.reference else MISSING
        if self.not_comparable:
            return NOT_COMPARABLE
        limit = tolerance if self.tolerance is None else self.tolerance
        return "OK" if abs(self.ours - self.paper) <= limit + 1e-12 else "FAIL"


@dataclass
class Grid:
    spec: TableSpec
    row_keys: list[tuple[str, ...]]
    col_keys: list[tuple[str, ...]]
    cells: dict[tuple[tuple[str, ...], tuple[str, ...]], Cell]
    notes: list[str] = field(default_factory=list)  # e.g. a dimension our fact table cannot give
    # (dataset, split) -> (fewest, most) questions behind one of our cells there, for the caption.
    coverage: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    judged: bool = False  # built with a RunContext: comparability was checked
    paper_data: bool = False  # that run's report.paper_data (the caption's default)

    def footnotes(self) -> list[str]:
        """The distinct notes of the table's cells, in table order: "n/a: <reason>" and "not
        comparable: <reason>" (footnote i is footnotes()[i-1])."""
        out: list[str] = []
        for r in self.row_keys:
            for c in self.col_keys:
                note = _note_of(self.cells.get((r, c)), self.spec.tolerance)
                if note is not None and note not in out:
                    out.append(note)
        return out

    def reasons(self) -> list[str]:
        """The distinct n/a reasons, in the order of the table."""
        return [n.removeprefix(NA + ": ") for n in self.footnotes() if n.startswith(NA + ": ")]

    def summary(self) -> dict[str, Any]:
        statuses = [c.status(self.spec.tolerance) for c in self.cells.values()]
        why: dict[str, int] = {}
        for c in self.cells.values():
            if c.status(self.spec.tolerance) == NOT_COMPARABLE and c.not_comparable:
                why[c.not_comparable] = why.get(c.not_comparable, 0) + 1
        return {
            "id": self.spec.id,
            "unit": "fraction",
            "tolerance": self.spec.tolerance,
            "ok": statuses.count("OK"),
            "fail": statuses.count("FAIL"),
            "not_comparable": statuses.count(NOT_COMPARABLE),
            "missing": statuses.count(MISSING),
            "not_available": sum(1 for c in self.cells.values() if c.not_available),
            "ours_only": sum(1 for c in self.cells.values() if c.paper is None and c.ours is not None),
            "ambiguous": sum(1 for c in self.cells.values() if c.n_cells > 1),
            "not_comparable_reasons": why,
        }


def _note_of(cell: Cell | None, tolerance: float) -> str | None:
    """The footnote a cell points to, if any."""
    if cell is None:
        return None
    if cell.not_available:
        return f"{NA}: {cell.reason}"
    if cell.status(tolerance) == NOT_COMPARABLE:
        return f"{NOT_COMPARABLE}: {cell.not_comparable}"
    return None


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


# Per-question dimensions the TANQ tables group by, derived from per_question.parquet columns when
# the column itself is not there: name -> (source column, row -> the values it counts under; a
# question can count under several, e.g. each of its skills, or its type and "all"; [] = none).
# The groups are cqabench.evaluation.metrics.tanq_breakdowns', the same the scorer's breakdown rows use.
def _groups(row: dict[str, Any]) -> dict[str, list[str]]:
    return tanq_groups_of(
        row.get("question_type"), row.get("skills"), row.get("answer_columns"), row.get("answer_rows")
    )


DERIVED: dict[str, tuple[str, Any]] = {
    "tanq_type": ("question_type", lambda r: _groups(r)["tanq_type"]),
    "skill": ("skills", lambda r: _groups(r)["skill"]),
    "n_skills": ("skills", lambda r: _groups(r)["n_skills"]),
    # Relations = the requested attributes = gold columns minus the entity column, in the
    # paper's groups 1 / 3 / 5 / 10 read as upper bounds (tanq_breakdowns.n_relations).
    "n_relations": ("answer_columns", lambda r: _groups(r)["n_relations"]),
    "table_length": ("answer_rows", lambda r: _groups(r)["table_length"]),
}


def _derive(frame: pd.DataFrame, dims: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Add the DERIVED dimensions a table needs (one row per value they take); also returns the
    ones that could not be derived because their source column is absent."""
    absent = []
    for dim in dims:
        if dim not in DERIVED or dim in frame.columns:
            continue
        source, values = DERIVED[dim]
        if source not in frame.columns:
            absent.append(dim)
            frame = frame.iloc[0:0].assign(**{dim: None})
            continue
        frame = frame.assign(**{dim: [values(r) for r in frame.to_dict("records")]}).explode(dim)
        frame = frame[frame[dim].notna()]
    return frame, absent


def select(frame: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """The rows a table is about: its metrics, variant and filters; dimension columns as text."""
    if frame.empty or "metric" not in frame.columns:
        return frame.iloc[0:0]
    mask = frame["metric"].astype("string").isin(spec.metric).fillna(False).astype(bool)
    if spec.variant is not None and "variant" in frame.columns:
        mask &= (frame["variant"].astype("string") == spec.variant).fillna(False).astype(bool)
    if "breakdown" in frame.columns and "breakdown" not in spec.filters:
        mask &= frame["breakdown"].isna()  # a cell's whole-split value, not its TANQ breakdown rows
    mask &= _matches(frame, spec.filters)
    chosen, _ = _derive(frame[mask].copy(), spec.dimensions)
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


def build_grid(
    metrics: pd.DataFrame, per_question: pd.DataFrame | None, spec: TableSpec, run: RunContext | None = None
) -> Grid:
    """Our numbers (means over cells for per-question tables) and the paper's, on one grid.

    With `run`, each cell that has both numbers is checked against the paper's setup
    (`spec.setup`, cqabench.report.comparability) on the row it shows; without, none is.
    """
    published = spec.published()
    ours: dict[tuple, tuple[float, int]] = {}
    shown: dict[tuple, dict[str, Any]] = {}  # the fact-table row behind each of our cells
    na: dict[tuple, str] = {}  # cells we ran whose value is null: the reason
    notes: list[str] = []
    if spec.source == "per_question":
        frame = per_question if per_question is not None else pd.DataFrame()
        missing = [
            d
            for d in spec.dimensions
            if d in DERIVED and d not in frame.columns and DERIVED[d][0] not in frame.columns and not frame.empty
        ]
        if missing:
            notes.append(
                f"Our rows need per-question {', '.join(DERIVED[d][0] for d in missing)} "
                f"(for {', '.join(missing)}), which per_question.parquet does not have: only the paper's are shown."
            )
        chosen = select(frame, spec)
        if not chosen.empty:
            for _, group in chosen.groupby(spec.dimensions + ["cell_id"], dropna=False, sort=False):
                first = group.iloc[0].to_dict()
                key = spec.key_of(first)
                mean = float(pd.to_numeric(group["value"], errors="coerce").mean())
                shown.setdefault(key, first)
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
                reason = record.get("reason")
                if isinstance(reason, str) and reason:
                    na.setdefault(key, reason)
                continue
            shown.setdefault(key, record)
            prev = ours.get(key)
            ours[key] = (float(value), 1) if prev is None else (prev[0], prev[1] + 1)
    keys = set(ours) | set(published) | set(na)
    coverage = _coverage(chosen, spec.source == "per_question")
    rows = _ordered({k[0] for k in keys}, spec.rows, spec)
    cols = _ordered({k[1] for k in keys}, spec.columns, spec)
    cells = {}
    for key in keys:
        value, count = ours.get(key, (None, 0))
        values = dict(zip(spec.rows, key[0])) | dict(zip(spec.columns, key[1]))
        paper = published.get(key)
        why = None
        if value is not None and paper is not None:
            why = comparability.reason_text(comparability.reasons(spec.setup, run, spec.id, spec.variant, shown[key]))
        cells[key] = Cell(
            ours=value,
            paper=paper,
            n_cells=count,
            reason=None if value is not None else na.get(key),
            reference=spec.is_reference(values),
            tolerance=spec.tolerance_for(values),
            not_comparable=why,
        )
    return Grid(
        spec,
        rows,
        cols,
        cells,
        notes,
        coverage,
        judged=run is not None,
        paper_data=bool(run is not None and run.paper_data),
    )


def _coverage(chosen: pd.DataFrame, per_question: bool) -> dict[tuple[str, str], tuple[int, int]]:
    """(dataset, split) -> (min, max) questions per cell among the rows a table shows.

    Metric rows carry `n` (questions evaluated); per-question rows are counted by distinct qid
    per cell. Rows without a dataset or count are skipped: the caption then says n is unknown.
    """
    if chosen.empty or "dataset" not in chosen.columns:
        return {}
    frame = chosen.assign(split=chosen["split"] if "split" in chosen.columns else "?")
    out: dict[tuple[str, str], tuple[int, int]] = {}
    if per_question:
        if "qid" not in frame.columns:
            return {}
        by = ["dataset", "split"] + (["cell_id"] if "cell_id" in frame.columns else [])
        counts = frame.groupby(by, dropna=False)["qid"].nunique()
        pairs = [((str(k[0]), str(k[1])), int(v)) for k, v in counts.items()]
    else:
        if "n" not in frame.columns:
            return {}
        values = frame.assign(n=pd.to_numeric(frame["n"], errors="coerce")).dropna(subset=["n"])
        pairs = [((str(r["dataset"]), str(r["split"])), int(r["n"])) for r in values.to_dict("records")]
    for key, n in pairs:
        low, high = out.get(key, (n, n))
        out[key] = (min(low, n), max(high, n))
    return out


def _label(spec: TableSpec, key: tuple[str, ...], dims: list[str]) -> str:
    return " / ".join(spec.label(dim, part) for dim, part in zip(dims, key))


def format_cell(cell: Cell | None, spec: TableSpec, footnote: int | None = None) -> str:
    """'ours / paper (Δ±d) OK|FAIL', 'ours / paper (not comparable [i])', 'ours', '— / paper
    (missing)', or 'n/a [i]' (/ paper). No Δ beside a cell that is not comparable: it would read
    as a judgment."""
    if cell is None:
        return ""
    d = spec.digits
    if cell.not_available:
        ours = NA + (f" [{footnote}]" if footnote else "")
        return ours if cell.paper is None else f"{ours} / {cell.paper:.{d}f} ({NA})"
    ours = "—" if cell.ours is None else f"{cell.ours:.{d}f}"
    if cell.n_cells > 1:
        ours += f" (×{cell.n_cells})"
    if cell.paper is None:
        return ours
    status = cell.status(spec.tolerance)
    if cell.ours is None:
        return f"paper {cell.paper:.{d}f}" if cell.reference else f"— / {cell.paper:.{d}f} ({MISSING})"
    if status == NOT_COMPARABLE:
        return f"{ours} / {cell.paper:.{d}f} ({NOT_COMPARABLE}" + (f" [{footnote}])" if footnote else ")")
    return f"{ours} / {cell.paper:.{d}f} (Δ{cell.diff:+.{d}f}) {status}"


def _n_text(grid: Grid) -> str:
    if not grid.coverage:
        return "n: none of our cells in this table (only the paper's numbers are shown)."
    parts = []
    for (dataset, split), (low, high) in sorted(grid.coverage.items()):
        count = (f"{low}" if low == high else f"{low}–{high}") + (" (nothing evaluable)" if high == 0 else "")
        parts.append(f"{dataset} {split} n={count}")
    return "Ours (questions per cell, dataset and split): " + ", ".join(parts) + "."


def _formats(grid: Grid) -> list[str]:
    """The cell formats that occur in this table, each explained once (and only those)."""
    spec, cells = grid.spec, list(grid.cells.values())
    out = []
    judged = [c for c in cells if c.status(spec.tolerance) in ("OK", "FAIL")]
    if judged:
        limits = sorted({c.tolerance if c.tolerance is not None else spec.tolerance for c in judged})
        out.append(
            "'ours / paper (Δ = ours − paper) OK|FAIL': OK when |Δ| ≤ "
            + (f"{limits[0]:g}" if len(limits) == 1 else _per_dataset_limits(spec))
        )
    if any(c.status(spec.tolerance) == NOT_COMPARABLE for c in cells):
        out.append(
            f"'ours / paper ({NOT_COMPARABLE} [i])': the run's setup differs from the paper's here "
            "(reason in note i), so the cell is not judged"
        )
    if any(c.ours is not None and c.paper is None for c in cells):
        out.append("a number alone: ours, the paper has no such cell")
    if any(c.status(spec.tolerance) == MISSING for c in cells):
        out.append("'— / paper (missing)': the paper reports it, this run did not produce it")
    if any(c.reference and c.ours is None and c.paper is not None for c in cells):
        out.append("'paper x': a row only the paper has (its models or baselines), for reference")
    if any(c.not_available for c in cells):
        out.append("'n/a [i]': we ran it and nothing was evaluable, reason in note i")
    return out


def _per_dataset_limits(spec: TableSpec) -> str:
    others = ", ".join(f"{spec.label('dataset', d)} {t:g}" for d, t in spec.tolerance_by_dataset.items())
    return f"{spec.tolerance:g} ({others})"


def caption(grid: Grid, run: str | None = None, paper_data: bool | None = None) -> list[str]:
    """This table's caption as sentences: what is compared, n and split, unit, formats, caveat.

    `run` names the configuration the numbers come from; unless `paper_data` (default: the run
    the grid was judged against, else False) says the run is on the paper's full data, the
    caption says that the sample is not the paper's data.
    """
    spec, s = grid.spec, grid.summary()
    if paper_data is None:
        paper_data = grid.paper_data
    metrics = ", ".join(spec.label("metric", m) for m in spec.metric)
    how = "mean over questions of each cell" if spec.source == "per_question" else "one value per cell"
    source = spec.title.split(":")[0].strip() or spec.id  # "DEXTER Table 2", "TANQ Table 5"
    parts = [
        f"{spec.title}. Compares our {metrics} ({how}), by {' / '.join(spec.rows)} (rows) and "
        f"{' / '.join(spec.columns)} (columns), with the paper's published numbers "
        f"({source}: {len(spec.cells)} recorded)."
        if spec.cells
        else f"{spec.title}. Our {metrics} ({how}); no published numbers are recorded for this table.",
        _n_text(grid),
        UNIT_NOTE if spec.paper_unit == "fraction" else UNIT_NOTE[:-1] + f" ({spec.paper_unit}).",
    ]
    formats = _formats(grid)
    if formats:
        parts.append("Cells: " + "; ".join(formats) + ".")
    parts.append(
        f"OK {s['ok']}, FAIL {s['fail']}, not comparable {s['not_comparable']}, missing {s['missing']}, "
        f"n/a {s['not_available']}, ours only {s['ours_only']}."
    )
    if s["ambiguous"]:
        parts.append(
            f"{s['ambiguous']} cells matched several of our runs (×N): narrow the table's filters; "
            "the first by cell_id is shown."
        )
    if not paper_data:
        where = f"config '{run}'" if run else "this run"
        judged = (
            "so no cell is judged: each reads 'not comparable'."
            if grid.judged
            else "OK / FAIL only speaks to fidelity on a full run."
        )
        parts.append(
            f"Caveat: our numbers come from {where}, not from the paper's data (report.paper_data: "
            f"false: the bundled sample or another subset, other questions, far smaller n); {judged}"
        )
    names = _names(grid)
    if names:
        parts.append("Names: " + "; ".join(f"{label} = {ours}" for label, ours in names) + ".")
    return parts + grid.notes


def _legend(grid: Grid, run: str | None = None, paper_data: bool | None = None) -> str:
    return " ".join(caption(grid, run, paper_data))


def caption_rst(grid: Grid, run: str | None = None, paper_data: bool | None = None) -> str:
    """The caption as reStructuredText for `snakemake --report` (one per table, written beside it)."""
    text = "\n\n".join(caption(grid, run, paper_data))
    # Escape the characters reST would read as markup in numbers and names.
    for char in ("\\", "*", "`", "|", "_"):
        text = text.replace(char, "\\" + char)
    return text + "\n"


def _names(grid: Grid) -> list[tuple[str, str]]:
    """(paper label, our name) of every value shown under a label other than its own name."""
    spec, out = grid.spec, []
    for keys, dims in ((grid.row_keys, spec.rows), (grid.col_keys, spec.columns)):
        for key in keys:
            for dim, part in zip(dims, key):
                label = spec.label(dim, part)
                if label != part and (label, part) not in out:
                    out.append((label, part))
    return out


def to_markdown(grid: Grid, run: str | None = None, paper_data: bool | None = None) -> str:
    spec = grid.spec
    corner = " / ".join(spec.rows) + " \\ " + " / ".join(spec.columns)
    header = [corner] + [_label(spec, c, spec.columns) for c in grid.col_keys]
    lines = [f"### {spec.title}", ""]
    if spec.paper:
        lines += [f"Paper: {spec.paper}", ""]
    if spec.note:  # above the table, where it is read: e.g. what data the paper's numbers are on
        lines += [f"> {para}" if para else ">" for para in spec.note.splitlines()] + [""]
    lines += ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |", "|" + "---|" * len(header)]
    notes = grid.footnotes()
    for r in grid.row_keys:
        row = [_label(spec, r, spec.rows)] + [_formatted(grid, r, c, notes) for c in grid.col_keys]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in row) + " |")
    if not grid.row_keys:
        lines.append("| (no cells) |")
    lines += ["", _legend(grid, run, paper_data)]
    lines += [""] + [f"[{i}] {note}" for i, note in enumerate(notes, 1)] if notes else []
    return "\n".join(lines) + "\n"


def _formatted(grid: Grid, r: tuple[str, ...], c: tuple[str, ...], notes: list[str]) -> str:
    cell = grid.cells.get((r, c))
    note = _note_of(cell, grid.spec.tolerance)
    return format_cell(cell, grid.spec, notes.index(note) + 1 if note is not None else None)


_CSS = {
    "OK": "background:#d9f2d9",
    "FAIL": "background:#f8d0d0",
    MISSING: "background:#eeeeee;color:#777",
    NA: "background:#fff4d6",
    NOT_COMPARABLE: "background:#e4ecf7",
}


# Data columns per HTML table: a wider paper table (TANQ Table 6: 7 skills × P/R/F1) wraps into
# several tables under each other, the row labels repeated, so no column is cut off at the page's
# right edge (on the page, in print, or in `snakemake --report`'s frame).
MAX_HTML_COLUMNS = 12


def column_parts(col_keys: list[tuple[str, ...]], limit: int = MAX_HTML_COLUMNS) -> list[list[tuple[str, ...]]]:
    """Column keys cut into runs of at most `limit`, never splitting a first-level group (a skill's
    P / R / F1) unless the group alone is wider than `limit`."""
    groups: list[list[tuple[str, ...]]] = []
    for key in col_keys:
        if groups and groups[-1][0][:1] == key[:1] and len(key) > 1:
            groups[-1].append(key)
        else:
            groups.append([key])
    parts: list[list[tuple[str, ...]]] = []
    for group in groups:
        while len(group) > limit:
            parts.append(group[:limit])
            group = group[limit:]
        if parts and len(parts[-1]) + len(group) <= limit:
            parts[-1].extend(group)
        else:
            parts.append(list(group))
    return parts or [[]]


def to_html(grid: Grid, run: str | None = None, paper_data: bool | None = None) -> str:
    spec = grid.spec
    esc = html.escape
    out = [f"<h3>{esc(spec.title)}</h3>"]
    if spec.paper:
        out.append(f"<p>Paper: {esc(spec.paper)}</p>")
    if spec.note:
        out.append("".join(f"<p><em>{esc(para)}</em></p>" for para in spec.note.split("\n\n") if para.strip()))
    corner = " / ".join(spec.rows) + " \\ " + " / ".join(spec.columns)
    notes = grid.footnotes()
    parts = column_parts(list(grid.col_keys))
    done = 0
    for i, cols in enumerate(parts):
        ident = spec.id if i == 0 else f"{spec.id}-part{i + 1}"
        if len(parts) > 1:
            out.append(
                f'<p class="table-part">Columns {done + 1}–{done + len(cols)} of {len(grid.col_keys)} '
                f"(part {i + 1} of {len(parts)}; the table is wrapped to fit the page)</p>"
            )
        done += len(cols)
        out.append(
            f'<table class="paper-table{" part" if i else ""}" id="{esc(ident)}" border="1" cellspacing="0" '
            'cellpadding="4">'
        )
        out.append(
            "<tr>"
            + f"<th>{esc(corner)}</th>"
            + "".join(f"<th>{esc(_label(spec, c, spec.columns))}</th>" for c in cols)
            + "</tr>"
        )
        for r in grid.row_keys:
            tds = []
            for c in cols:
                cell = grid.cells.get((r, c))
                style = (
                    _CSS.get(NA if cell is not None and cell.not_available else cell.status(spec.tolerance), "")
                    if cell
                    else ""
                )
                note = _note_of(cell, spec.tolerance)
                title = f' title="{esc(note)}"' if note else ""
                tds.append(f'<td style="{style}"{title}>{esc(_formatted(grid, r, c, notes))}</td>')
            out.append(f"<tr><th>{esc(_label(spec, r, spec.rows))}</th>{''.join(tds)}</tr>")
        out.append("</table>")
    out.append(
        '<div class="caption">' + "".join(f"<p>{esc(part)}</p>" for part in caption(grid, run, paper_data)) + "</div>"
    )
    if notes:
        out.append("<ol>" + "".join(f"<li>{esc(note)}</li>" for note in notes) + "</ol>")
    return "\n".join(out) + "\n"


def render_tables(
    metrics: pd.DataFrame,
    per_question: pd.DataFrame | None,
    specs: list[TableSpec],
    out_dir: str | Path,
    run: str | None = None,
    paper_data: bool = False,
    config: dict[str, Any] | None = None,
    summary_name: str = "summary.json",
) -> list[dict[str, Any]]:
    """Write <id>.md, <id>.html and <id>.caption.rst per table plus `summary_name`, the list of
    their summaries (a table's own job, `paper-table`, writes `<id>.summary.json`); returns the summaries.

    The .caption.rst is the table's own caption for `snakemake --report` (report.smk points each
    table's report() caption at it), so the bundled report says what each table shows. Every
    cell is checked for comparability against the run (`config`, `paper_data`): on the sample,
    none is judged OK / FAIL.
    """
    out_dir = Path(out_dir)
    context = RunContext.of(config, paper_data)
    summaries = []
    for spec in specs:
        grid = build_grid(metrics, per_question, spec, context)
        write_text(to_markdown(grid, run, paper_data), out_dir / f"{spec.id}.md")
        write_text(
            "<!DOCTYPE html><meta charset='utf-8'>\n" + to_html(grid, run, paper_data), out_dir / f"{spec.id}.html"
        )
        write_text(caption_rst(grid, run, paper_data), out_dir / f"{spec.id}.caption.rst")
        summaries.append(grid.summary())
    write_json(summaries, out_dir / summary_name)
    return summaries


def read_fact_table(path: str | Path | None) -> pd.DataFrame:
    """A fact table as pandas with nullable columns; an absent path reads as empty."""
    if path is None or not Path(path).exists():
        return pd.DataFrame()
    return pd.read_parquet(path)
