"""TANQ's table metric: DePlot's relative mapping similarity (RMS) as TANQ's evaluate_tanq.py runs it.

Two readings of the predicted table, scored by the same RMS (two variants in every TANQ cell):
- **official** (`rms_official`, the primary: the report's TANQ Tables 5-9): the prediction text
  read exactly as TANQ's evaluation reads it (`read_table_official`): every line is a row, cells
  split at every "|", lower-cased and stripped, nothing dropped (separator rows, fences, prose
  and outer pipes all become rows or cells); the gold table is read the same way.
- **cqabench_parse** (`rms`): the table `extraction.parse_table` finds (separator rows, outer
  pipes, fences and prose dropped, markdown decoration removed), cells of both tables
  normalized by `normalize_cell`. More lenient: it scores what a reader sees in the output.

RMS, checked against google-deepmind/tanq tanq_utils.py (@5c3c6c1b) and pix2struct's anls_metric:
- the table is lower-cased; the first row is the header; cells are stripped (the official
  reading does only that; the cqabench_parse variant normalizes gold and predicted cells alike
  with `normalize_cell`: the parser's markdown and whitespace clean-up, `extraction.clean_cell`,
  then lower-casing and stripping, so a gold cell "Mel  Brooks" or "**x**" meets the prediction
  as the parser wrote it);
- datapoints: for every data row and every column *after the first*, key
  "<first cell of the row> <column header>" -> cell (the row-header column itself is not a
  datapoint; a table with one column, or no data rows, has none); a repeated key keeps the
  later row (dict assignment);
- key similarity: ANLS = 1 - Levenshtein/max(len) if that is < 0.5 (strictly) else 0; an empty
  target string scores 1 only against an empty prediction;
- value similarity: when the gold value parses as a non-zero number and the prediction as a
  number (a trailing % divides by 100): 1 - min(1, |g-p|/|g|) if that relative error is < 0.1
  (strictly) else 0; otherwise 1 if the strings are equal, else ANLS;
- pairs: minimum-cost assignment of gold to predicted datapoints on cost 1 - key similarity
  (scipy linear_sum_assignment); score = sum of key similarity x value similarity;
- precision = score / predicted datapoints, recall = score / gold datapoints, F1 harmonic; score 0
  gives (0, 0, 0); no predicted datapoints gives (1, 0, 0); no gold ones (1, 1, 1) if neither;
- the prediction is also read transposed (columns as rows, ragged rows padded with ""); the
  reading with the higher F1 is kept (the transposed one on a tie, as in TANQ).
TANQ's optional "title|" first line is read by the official reading (a "title" datapoint) and not
by our parser. Non-finite numbers ("nan", "inf", which Python's float() accepts) are treated as
text here (TANQ's script scores them 0 as numbers; no gold holds one).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import Levenshtein
import numpy as np

from cqabench.generation.extraction import clean_cell

TEXT_THETA = 0.5
NUMBER_THETA = 0.1


@dataclass(frozen=True)
class RmsScore:
    precision: float
    recall: float
    f1: float


def anls(target: str, prediction: str, theta: float = TEXT_THETA) -> float:
    """Pix2Struct's ANLS for one pair: 1 - normalized edit distance, 0 at or above theta."""
    if not target:
        return float(prediction == "")
    distance = Levenshtein.distance(target, prediction) / max(len(target), len(prediction))
    return 1.0 - distance if distance < theta else 0.0


def to_number(text: str) -> float | None:
    """float(text), with trailing %s dropped and the value divided by 100 (TANQ's `_to_float`,
    tanq_utils.py:29-37); None when not a finite number."""
    try:
        value = float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def value_similarity(
    target: str, prediction: str, text_theta: float = TEXT_THETA, number_theta: float = NUMBER_THETA
) -> float:
    gold = to_number(target)
    pred = to_number(prediction)
    if pred is not None and gold:  # a zero gold falls through to string comparison, as in TANQ
        error = min(abs((gold - pred) / gold), 1.0)
        return 1.0 - error if error < number_theta else 0.0
    if target == prediction:
        return 1.0
    return anls(target, prediction, text_theta)


def normalize_cell(cell: object) -> str:
    """The one normalization of gold and predicted cells: the decoration and spacing that
    `parse_table` takes off a predicted cell (`extraction.clean_cell`: markdown, <br>, runs of
    whitespace), then TANQ's lower-casing and stripping."""
    return clean_cell(str(cell)).lower().strip()


def _lower(header: Sequence[str], rows: Sequence[Sequence[str]]) -> tuple[list[str], list[list[str]]]:
    return [normalize_cell(c) for c in header], [[normalize_cell(c) for c in r] for r in rows]


def transpose(header: Sequence[str], rows: Sequence[Sequence[str]]) -> tuple[list[str], list[list[str]]]:
    """Columns become rows (ragged rows padded with ""); the first column becomes the header."""
    grid = [list(header), *[list(r) for r in rows]]
    if not any(grid):
        return [], []
    cols = [list(c) for c in itertools.zip_longest(*grid, fillvalue="")]
    return cols[0], cols[1:]


def _cell_points(head: Sequence[str], body: Sequence[Sequence[str]]) -> dict[str, str]:
    """{"<row header> <column header>": cell} over data rows and non-first columns (TANQ's
    `_get_table_datapoints`, tanq_utils.py:196-206): a repeated key keeps the later row."""
    points: dict[str, str] = {}
    if not body or len(head) <= 1:
        return points
    for row in body:
        if not row:
            continue
        for col, cell in zip(head[1:], row[1:]):
            points[f"{row[0]} {col}"] = cell
    return points


def table_datapoints(header: Sequence[str], rows: Sequence[Sequence[str]]) -> dict[str, str]:
    """The datapoints of a table, its cells normalized (`normalize_cell`)."""
    return _cell_points(*_lower(header, rows))


def datapoints_prf(
    gold: dict[str, str], pred: dict[str, str], text_theta: float = TEXT_THETA, number_theta: float = NUMBER_THETA
) -> RmsScore:
    """Precision/recall/F1 of one predicted datapoint set against the gold set."""
    if not gold and not pred:
        return RmsScore(1.0, 1.0, 1.0)
    if not gold:
        return RmsScore(0.0, 1.0, 0.0)
    if not pred:
        return RmsScore(1.0, 0.0, 0.0)
    gold_items, pred_items = list(gold.items()), list(pred.items())
    key_sim = np.array([[anls(gk, pk, text_theta) for pk, _ in pred_items] for gk, _ in gold_items])
    from scipy.optimize import linear_sum_assignment  # scipy.optimize: ~0.5 s per job start

    rows, cols = linear_sum_assignment(1.0 - key_sim)
    score = 0.0
    for r, c in zip(rows, cols):
        score += float(key_sim[r, c]) * value_similarity(gold_items[r][1], pred_items[c][1], text_theta, number_theta)
    if score == 0:
        return RmsScore(0.0, 0.0, 0.0)
    precision, recall = score / len(pred_items), score / len(gold_items)
    return RmsScore(precision, recall, 2 * precision * recall / (precision + recall))


def rms(
    gold_header: Sequence[str],
    gold_rows: Sequence[Sequence[str]],
    pred_header: Sequence[str],
    pred_rows: Sequence[Sequence[str]],
    text_theta: float = TEXT_THETA,
    number_theta: float = NUMBER_THETA,
) -> RmsScore:
    """RMS of one predicted table; the better of the as-read and transposed readings by F1."""
    gold = table_datapoints(gold_header, gold_rows)
    candidates = [
        datapoints_prf(gold, table_datapoints(*transpose(pred_header, pred_rows)), text_theta, number_theta),
        datapoints_prf(gold, table_datapoints(pred_header, pred_rows), text_theta, number_theta),
    ]
    return max(candidates, key=lambda s: s.f1)  # max keeps the first (transposed) on a tie


# --- the official reading (TANQ's evaluate_tanq.py) -------------------------------------------


@dataclass(frozen=True)
class OfficialTable:
    """A table as TANQ's `_parse_table` builds it: an optional title, the first line as header,
    every other line a row; cells lower-cased and stripped, rows as long as their line makes them."""

    title: str | None = None
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


TITLE_PREFIX = "title |"  # checked after the pipes are spaced: the original line starts "title|"


def read_table_official(text: str, transposed: bool = False) -> OfficialTable:
    """Read table text exactly as google-deepmind/tanq tanq_utils.py (@5c3c6c1b) does.

    1. `_table_as_str` (line 92): every "|" of the text becomes " | ".
    2. `_parse_table` (lines 175-193): the text is lower-cased and split into lines
       (`str.splitlines`); no lines -> an empty table. A first line starting "title |" (an
       original "title|", no space before the pipe) is the title, the rest after the prefix
       stripped. Every remaining line, blank or not, is a row: split at " | ", each cell
       stripped. Nothing is skipped: a markdown separator row is a row of dashes, an outer pipe
       gives an empty first (and last) cell, a code fence or a line of prose a one-cell row, and
       the first line, whatever it is, the header. `transposed`: the rows are transposed
       (`itertools.zip_longest`, ragged rows padded with "") before the header is taken.
    Steps 1-2 are the same as splitting each line at every "|" and stripping the pieces; they
    are kept as the script has them so that the title test stays exact.
    """
    lines = " | ".join(str(text).split("|")).lower().splitlines()
    if not lines:
        return OfficialTable()
    title = None
    if lines[0].startswith(TITLE_PREFIX):
        title, lines = lines[0][len(TITLE_PREFIX) :].strip(), lines[1:]
    if not lines:
        return OfficialTable(title=title)
    grid = [tuple(cell.strip() for cell in line.split(" | ")) for line in lines]
    if transposed:
        grid = [tuple(column) for column in itertools.zip_longest(*grid, fillvalue="")]
    return OfficialTable(title, grid[0], tuple(grid[1:]))


def official_datapoints(table: OfficialTable) -> dict[str, str]:
    """The datapoints of an officially read table: the title (key "title") if any, then the cells;
    cells as read (lower-cased and stripped only), no other normalization."""
    points = {} if table.title is None else {"title": table.title}
    return {**points, **_cell_points(table.header, table.rows)}


def gold_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A gold table as TANQ's `answer_table` string: cells joined by "|", one line per row. Our
    loader (datasets/tanq.py) split answer_table at "|" and stripped the cells, so reading this
    text officially gives the cells the official script reads from answer_table."""
    return "\n".join("|".join(str(c) for c in row) for row in [header, *rows])


def rms_official(
    gold_header: Sequence[str],
    gold_rows: Sequence[Sequence[str]],
    prediction: str,
    text_theta: float = TEXT_THETA,
    number_theta: float = NUMBER_THETA,
) -> RmsScore:
    """RMS of one prediction *text* as TANQ's `table_datapoints_precision_recall_per_point`
    (tanq_utils.py:129-172) scores it: the gold read as is, the prediction read transposed and as
    is (`read_table_official`), the better F1 kept (the transposed reading on a tie). An empty
    text, or one with no datapoints (prose, a one-column list), scores (1, 0, 0): TANQ's
    convention for a prediction without datapoints (lines 246-247)."""
    gold = official_datapoints(read_table_official(gold_text(gold_header, gold_rows)))
    candidates = [
        datapoints_prf(gold, official_datapoints(read_table_official(prediction, transposed)), text_theta, number_theta)
        for transposed in (True, False)
    ]
    return max(candidates, key=lambda s: s.f1)
