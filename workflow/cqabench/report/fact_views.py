"""The fact table as files a reader can open: CSV, a full HTML table, and a compact HTML view
small enough for `snakemake --report`'s single-file report.

The single-file report embeds every file as a base64 data URI and shows HTML in an iframe
whose `src` is that URI. Chromium refuses URLs longer than 2 MiB, so a file whose data URI is
longer shows as a blank page (the sample's full fact_table.html was 2.1 MB as a URI). The
compact view keeps every row with the columns that say what a number is (lead columns) and is
cut down, saying so on the page, until its data URI fits. The full views (every column) are
written beside it and linked from the report page; Parquet stays the source.

Every view leads with the columns a reader looks for (dataset, setting, metric, value), then
the rest of the cell's switches; path columns (cell_id, source) come last.

Integer columns stay integers in every view (`read_for_views`): pandas reads an int64 Parquet
column that holds a null (`k` of a retrieval row) as float64, and a CSV of it says "1.0", which
DuckDB and polars then type as DOUBLE.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cqabench.common.io import write_text

esc = html.escape

# Chromium's longest URL (url::kMaxURLChars): an iframe src or link beyond it is not loaded.
DATA_URI_LIMIT = 2 * 1024 * 1024
# The order a reader scans a row in; any other column follows in the fact table's own order, and
# these path columns close the row.
LEAD_COLUMNS = (
    "dataset",
    "setting",
    "metric",
    "value",
    "variant",
    "primary",
    "n",
    "split",
    "retriever",
    "k",
    "llm",
    "prompt",
    "serialization",
    "breakdown",
    "breakdown_value",
    "n_failed",
    "reason",
    "unit",
    "stage",
)
PATH_COLUMNS = ("cell_id", "source")
# The compact view: what a number is, not how it was produced (provenance is in the full views).
COMPACT_COLUMNS = (
    "dataset",
    "setting",
    "metric",
    "value",
    "variant",
    "primary",
    "n",
    "split",
    "retriever",
    "k",
    "llm",
    "prompt",
    "serialization",
    "breakdown",
    "breakdown_value",
    "reason",
)
_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1rem}table{border-collapse:collapse;font-size:.8rem}"
    "th,td{border:1px solid #bbb;padding:2px 5px}th{background:#f3f3f3;position:sticky;top:0}"
    "td.n{text-align:right;font-variant-numeric:tabular-nums}p{font-size:.9rem}"
)


def read_for_views(path: str | Path) -> pd.DataFrame:
    """The fact table with its integer columns as pandas' nullable Int64, so a null does not turn
    them into floats (what `pd.read_parquet` does) and every view writes them as integers."""
    return pq.read_table(path).to_pandas(
        types_mapper=lambda dtype: pd.Int64Dtype() if pa.types.is_integer(dtype) else None
    )


def ordered(metrics: pd.DataFrame) -> pd.DataFrame:
    """The fact table's columns in reading order: LEAD_COLUMNS, the others, PATH_COLUMNS."""
    lead = [c for c in LEAD_COLUMNS if c in metrics.columns]
    tail = [c for c in PATH_COLUMNS if c in metrics.columns]
    middle = [c for c in metrics.columns if c not in lead and c not in tail]
    return metrics[lead + middle + tail]


def data_uri_length(size: int, filename: str, mime: str = "text/html") -> int:
    """Length of the data URI Snakemake's report makes of a file of `size` bytes
    (snakemake.report.common.data_uri: data:<mime>;charset=utf8;filename=<name>;base64,<data>)."""
    return len(f"data:{mime};charset=utf8;filename={filename};base64,") + 4 * math.ceil(size / 3)


def fits_data_uri(text: str, filename: str) -> bool:
    """Whether `text` (UTF-8) stays under Chromium's URL limit as Snakemake's data URI."""
    return data_uri_length(len(text.encode("utf-8")), filename) <= DATA_URI_LIMIT


def _cell(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "<td></td>"
    if isinstance(value, bool):
        return f"<td>{'yes' if value else ''}</td>"
    if isinstance(value, float):
        return f'<td class="n">{value:.4f}</td>'
    if isinstance(value, int):  # Int64 columns (read_for_views) give Python ints
        return f'<td class="n">{value}</td>'
    return f"<td>{esc(str(value))}</td>"


def _rows_html(frame: pd.DataFrame) -> str:
    head = "<tr>" + "".join(f"<th>{esc(str(c))}</th>" for c in frame.columns) + "</tr>"
    body = "\n".join(
        "<tr>" + "".join(_cell(v) for v in row) + "</tr>"
        for row in frame.astype(object).itertuples(index=False, name=None)
    )
    return f"<table>{head}\n{body}</table>"


def _document(title: str, intro: str, frame: pd.DataFrame) -> str:
    return (
        f"<!DOCTYPE html><html lang='en'><meta charset='utf-8'><title>{esc(title)}</title><style>{_STYLE}</style>"
        f"<h1>{esc(title)}</h1><p>{intro}</p>\n{_rows_html(frame)}\n</html>\n"
    )


def compact_view(metrics: pd.DataFrame, filename: str = "fact_table_view.html", full: str = "metrics.csv") -> str:
    """The compact HTML view: every row with COMPACT_COLUMNS, or, where its data URI would be over
    DATA_URI_LIMIT, the rows of the primary metrics only, then as many of those as fit; the page
    says which rows it shows and where the rest are."""
    frame = ordered(metrics)[[c for c in COMPACT_COLUMNS if c in metrics.columns]]
    total = len(frame)
    where = (
        f"Every row and every column (provenance: versions, model hashes, sampling, wall time) is in "
        f"<code>{esc(full)}</code>, <code>fact_table.html</code> and <code>metrics.parquet</code> beside the "
        "report page. Values are fractions 0–1; a blank value has its reason."
    )
    title = "Fact table (compact view)"
    text = _document(
        title, f"All {total} rows × {len(frame.columns)} of {len(metrics.columns)} columns. {where}", frame
    )
    if fits_data_uri(text, filename):
        return text
    if "primary" in frame.columns:
        frame = frame[frame["primary"].fillna(False).astype(bool)]
    shown_of = f"of the {total} rows: each cell's primary metric (column <code>primary</code>)"
    text = _document(
        title,
        f"{len(frame)} {shown_of}, the whole table being over the browser's 2 MiB limit for an embedded file. {where}",
        frame,
    )
    keep = len(frame)
    while not fits_data_uri(text, filename) and keep > 0:
        keep = int(keep * 0.9)
        text = _document(
            title,
            f"The first {keep} {shown_of}; more would be over the browser's 2 MiB limit for an embedded file. {where}",
            frame.head(keep),
        )
    return text


def write_fact_table_views(
    metrics: pd.DataFrame, csv_path: str | Path, html_path: str | Path, view_path: str | Path | None = None
) -> None:
    """The fact table as CSV (opens in any spreadsheet), as one full HTML table, and (`view_path`)
    the compact view the Snakemake report bundles; every view in LEAD_COLUMNS order."""
    frame = ordered(metrics)
    write_text(frame.to_csv(index=False), csv_path)
    write_text(
        _document(
            "Fact table: metrics.parquet",
            f"{len(frame)} rows × {len(frame.columns)} columns: one row per (cell, metric). Every value is "
            "a fraction 0–1; a null value has its reason. <code>primary</code> marks each cell's primary "
            "metric and variant.",
            frame,
        ),
        html_path,
    )
    if view_path is not None:
        write_text(compact_view(metrics, Path(view_path).name, Path(csv_path).name), view_path)


def view_to_data_uri(path: str | Path) -> str:
    """The data URI Snakemake would embed for `path` (for tests and the page's own size check)."""
    path = Path(path)
    return f"data:text/html;charset=utf8;filename={path.name};base64," + base64.b64encode(path.read_bytes()).decode(
        "ascii"
    )
