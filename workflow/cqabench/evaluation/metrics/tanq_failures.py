"""TANQ's failure taxonomy (paper Table 10), decided per prediction from the predicted and gold tables.

The paper's authors labelled samples of model outputs by hand. Seven of its nine categories
can be decided from the two tables alone; this module decides them with documented rules so
that every cell of the workflow gets its share of predictions per category (a fraction 0..1).
The other two need a reader's judgement and are reported as not computed (`NOT_COMPUTED`):
- filter issues: entities the question's condition should have kept or dropped (the question
  text, not the table, says what the filter is);
- other hallucinations: invented content that is neither a column nor a cell value of ours
  (e.g. a made-up entity versus one the filter should have removed: again judgement).
No LLM judge is wired in: those two are n/a with that reason in every cell.

Alignment (what every rule below builds on); cells are normalized as RMS normalizes them
(`metrics.tables.normalize_cell`):
1. Entity column: the first column of both tables (RMS's row keys), whatever its header says.
2. Relation columns: the gold columns after the first. A predicted header cell matches a gold
   one when the labels are equal, or ANLS >= 0.5 (RMS's key threshold), or every content word
   of the shorter label has a counterpart in the longer (same word, or the same first
   `PREFIX` letters: "Country" ~ "country of origin", "Distributor" ~ "distributed by").
   Matches are one-to-one (`linear_sum_assignment`). A label that is not equal to the gold one
   is dropped when one column holds only numbers or dates and the other only text (so
   "Director" over a column of years is not "director of photography"); apart from that the
   match is lexical ("Director" over names does match "director of photography").
3. Header: the first predicted row is the header unless it reads as data: none of its cells
   after the first matches a gold relation label, and its first cell matches a gold entity, or
   a later cell matches a gold value or is a bare number or date, or every cell is empty. A
   table without header has all its rows as data; its columns are aligned to gold columns by
   content (the pairing that matches most cells of the aligned rows), the rest by position.
4. Rows: gold and predicted rows are paired one-to-one by entity: the entity cells match as
   values (rule 6) after a trailing parenthesis is dropped ("Spartacus (film)" ~ "Spartacus"),
   graded so that an equal entity wins over a near one (`entity_score`). A predicted row that
   pairs with no gold row is not labelled (an extra entity: a filter issue or another
   hallucination, both not computed).
5. Orientation: the transposed reading (as RMS also tries it) is used only when it aligns more
   gold columns and rows than the table as read.
6. Value match: equal; or both numbers (`metrics.tables.to_number`, thousands commas dropped)
   and equal when both are integers (years, counts), else within 1 % relative error; or a bare
   year against a date of that year ("1975" ~ "1975-06-04", "1956" ~ "December 1956"); or,
   with the same digit groups in both (a wrong year or day is never close: "1998-01-20" !=
   "1998-01-21"), a typo (Levenshtein distance at most `TYPO` = 0.2 of the longer length), or a
   shorter form of the gold: dotted initials spelled out ("U.S." -> "united states"), then
   every content word of the prediction is a word of the gold and they are at least half of
   the gold's ("United States" ~ "United States of America", "United Artists" ~ "United
   Artists Corporation"; "Tony Scott" is not "Ridley Scott"). This is stricter than RMS's
   ANLS >= 0.5, which would let "Tony Scott" stand for "Ridley Scott".

Categories (a prediction can have several; each is decided independently):
- non_table: no table was scored: no table in the output, or extraction failed (e.g. the
  prompt's final-answer marker is missing), i.e. RMS scored an empty table. A non-table
  prediction gets no other label (there is nothing to align).
- no_header: the first row reads as data (rule 3).
- relation_missing: a gold relation column has no predicted column (rule 2, or for a table
  without header, rule 3's alignment).
- hallucinated_relations: a predicted column after the first, with a label or a value, that
  matches no gold column.
- missing_entity: a gold row has no predicted row (rule 4).
- wrong_answer: in an aligned row and column, a predicted cell that is not empty (nor "-",
  "n/a", "unknown", "none", "?"), does not match the gold cell, and is not a partial answer.
  A multi-valued cell (values separated by ", " or ";") matches when its values match the gold
  values one-to-one in any order; a predicted value that matches no gold value makes it wrong.
- partial_answer: in an aligned row and column, a cell whose values all match values of a
  multi-valued gold cell (two or more values) but not all of them (a strict subset).
An empty predicted cell in an aligned position is an omission, neither wrong nor partial.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import Levenshtein
import numpy as np

from cqabench.evaluation.metrics.tables import anls, normalize_cell, to_number, transpose
from cqabench.generation.extraction import ParsedTable

VARIANT = "tanq"
PREFIX = 5  # letters two words must share to count as the same word in a header label
NUMBER_TOLERANCE = 0.01  # relative, for non-integer numbers
TYPO = 0.2  # Levenshtein distance / length up to which two texts are one value with a typo
TEXT_MATCH = 0.5  # header similarity at or above which labels match (RMS's ANLS threshold)
_STOP_WORDS = frozenset(["a", "an", "the", "of", "in", "on", "at", "by", "for", "to", "and", "or", "name", "names"])
_EMPTY_CELLS = frozenset({"", "-", "--", "n/a", "na", "unknown", "none", "?", "null"})
_VALUE_SPLIT = re.compile(r"\s*;\s*|\s*,\s+")
_PAREN_TAIL = re.compile(r"\s*\([^()]*\)\s*$")
_DATE_LIKE = re.compile(r"^\d{1,4}([-/.]\d{1,2}([-/.]\d{1,4})?)?$")
_YEAR = re.compile(r"^\d{4}$")
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_MONTH_YEAR = re.compile(rf"^(\d{{1,2}} )?({_MONTHS})( \d{{1,2}},?)? \d{{4}}$")  # "december 1956", "4 june 1975"

# (metric name, the paper's Table 10 row label, whether it is decided here)
CATEGORIES: tuple[tuple[str, str, bool], ...] = (
    ("failure_relation_missing", "relation missing", True),
    ("failure_no_header", "no header", True),
    ("failure_filter_issues", "filter issues", False),
    ("failure_hallucinated_relations", "hallucinated relations", True),
    ("failure_hallucination_other", "hallucination other", False),
    ("failure_missing_entity", "missing entity", True),
    ("failure_non_table", "non-table", True),
    ("failure_partial_answer", "partial answers", True),
    ("failure_wrong_answer", "wrong answer", True),
)
COMPUTED = tuple(m for m, _, computed in CATEGORIES if computed)
NOT_COMPUTED: dict[str, str] = {
    "failure_filter_issues": "not computed: whether an entity fails the question's filter needs judgement "
    "(manual in the paper; no LLM judge is configured)",
    "failure_hallucination_other": "not computed: telling other hallucinations from filter issues needs judgement "
    "(manual in the paper; no LLM judge is configured)",
}


@dataclass(frozen=True)
class Failures:
    """The categories of one prediction, with what triggered each (for reading a label)."""

    non_table: bool = False
    no_header: bool = False
    transposed: bool = False
    missing_relations: tuple[str, ...] = ()  # gold labels
    extra_relations: tuple[str, ...] = ()  # predicted labels (or "#<column>" without header)
    missing_entities: tuple[str, ...] = ()
    wrong_cells: tuple[tuple[str, str], ...] = ()  # (gold entity, gold relation)
    partial_cells: tuple[tuple[str, str], ...] = ()

    @property
    def labels(self) -> dict[str, bool]:
        """metric name -> whether the prediction is in that category (computed categories only)."""
        return {
            "failure_relation_missing": bool(self.missing_relations),
            "failure_no_header": self.no_header,
            "failure_hallucinated_relations": bool(self.extra_relations),
            "failure_missing_entity": bool(self.missing_entities),
            "failure_non_table": self.non_table,
            "failure_partial_answer": bool(self.partial_cells),
            "failure_wrong_answer": bool(self.wrong_cells),
        }

    def names(self) -> set[str]:
        """The categories this prediction is in, as short names ("missing_entity", ...)."""
        return {m.removeprefix("failure_") for m, on in self.labels.items() if on}


@dataclass
class _Alignment:
    header: bool
    columns: dict[int, int] = field(default_factory=dict)  # gold column -> predicted column (both >= 1)
    rows: dict[int, int] = field(default_factory=dict)  # gold row -> predicted data row
    width: int = 0
    labels: list[str] = field(default_factory=list)  # predicted header (or [] without)
    data: list[list[str]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.columns) + len(self.rows)


# --- matching ---------------------------------------------------------------------------------


def _words(label: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", label) if w not in _STOP_WORDS]


def _same_word(a: str, b: str) -> bool:
    return a == b or (len(a) >= PREFIX and len(b) >= PREFIX and a[:PREFIX] == b[:PREFIX])


def header_similarity(gold: str, pred: str) -> float:
    """How well a predicted column label names a gold relation (0 = no match); labels normalized.

    1 for equal labels or a word-wise containment (rule 2 of the module docstring), else ANLS.
    """
    if not gold or not pred:
        return 0.0
    if gold == pred:
        return 1.0
    gw, pw = _words(gold), _words(pred)
    short, long_ = (gw, pw) if len(gw) <= len(pw) else (pw, gw)
    if short and all(any(_same_word(s, w) for w in long_) for s in short):
        return 1.0
    return anls(gold, pred)


def _digits(text: str) -> list[str]:
    return re.findall(r"\d+", text)


def value_match(gold: str, pred: str) -> bool:
    """Whether a predicted value states the gold value (rule 6); both normalized."""
    if gold == pred:
        return True
    g, p = to_number(gold.replace(",", "")), to_number(pred.replace(",", ""))
    if g is not None and p is not None:
        if float(g).is_integer() and float(p).is_integer():
            return g == p
        return abs(g - p) <= NUMBER_TOLERANCE * max(abs(g), 1e-12)
    if _YEAR.match(pred) and (_DATE_LIKE.match(gold) or _MONTH_YEAR.match(gold)):
        years = [d for d in _digits(gold) if len(d) == 4]
        if years == [pred]:  # a bare year states a date of that year, less precisely
            return True
    return _digits(gold) == _digits(pred) and _text_match(gold, pred)


def _expand_initials(pred: str, gold: str) -> str:
    """ "u.s. fish ..." -> "united states fish ..." when the gold has words with those initials."""
    words = re.findall(r"[a-z0-9]+", gold)

    def expand(m: re.Match) -> str:
        letters = re.sub(r"[^a-z]", "", m.group(0))
        for i in range(len(words) - len(letters) + 1):
            run = words[i : i + len(letters)]
            if "".join(w[0] for w in run) == letters:
                return " ".join(run) + " "
        return m.group(0)

    return re.sub(r"\b(?:[a-z]\.){2,}\s?", expand, pred).strip()


def _text_match(gold: str, pred: str) -> bool:
    """Two texts state the same value: a typo apart, or the prediction a shorter form of the gold."""
    if Levenshtein.distance(gold, pred) <= TYPO * max(len(gold), len(pred)):
        return True
    pred = _expand_initials(pred, gold)
    if pred == gold:
        return True
    gold_words, pred_words = set(_words(gold)), set(_words(pred))
    return bool(pred_words) and pred_words <= gold_words and 2 * len(pred_words) >= len(gold_words)


def entity_score(gold: str, pred: str) -> float:
    """Rule 4: how well two entity cells match (0 = not at all; 1 = equal), a trailing "(...)"
    disambiguation aside. Graded, so that "Gandhada Gudi" pairs with "Gandhada Gudi" rather
    than with "Gandhada Gudi Part 2" (which it also matches)."""
    if not gold or not pred:
        return 0.0
    best = 0.0
    for g in {gold, _PAREN_TAIL.sub("", gold)}:
        for p in {pred, _PAREN_TAIL.sub("", pred)}:
            if g and p and value_match(g, p):
                best = max(best, 1.0 if g == p else 0.5 + 0.5 * anls(g, p, 1.0))
    return best


def entity_match(gold: str, pred: str) -> bool:
    """Whether two entity cells name the same entity (rule 4)."""
    return entity_score(gold, pred) > 0


def cell_values(cell: str) -> list[str]:
    """The values of a (normalized) cell: TANQ joins several with ", "; ";" also separates."""
    return [v for v in (part.strip() for part in _VALUE_SPLIT.split(cell)) if v]


def classify_cell(gold: str, pred: str) -> str:
    """'correct' | 'partial' | 'wrong' | 'empty' for one aligned cell (both normalized)."""
    if pred in _EMPTY_CELLS:
        return "correct" if gold in _EMPTY_CELLS else "empty"
    gold_values, pred_values = cell_values(gold), cell_values(pred)
    if len(gold_values) <= 1 and value_match(gold, pred):  # several gold values: compared one by one,
        return "correct"  # so "Warner Bros." is not close enough to "Warner Bros., Netflix"
    if not gold_values:
        return "wrong"
    matrix = np.array([[1.0 if value_match(g, p) else 0.0 for p in pred_values] for g in gold_values])
    from scipy.optimize import linear_sum_assignment  # scipy.optimize: ~0.5 s per job start

    rows, cols = linear_sum_assignment(-matrix)
    covered = sum(int(matrix[r, c]) for r, c in zip(rows, cols))
    if covered < len(pred_values):  # some predicted value is no gold value
        return "wrong"
    if covered == len(gold_values):
        return "correct"
    return "partial" if len(gold_values) >= 2 and covered > 0 else "wrong"


def _assign(score: np.ndarray, minimum: float) -> dict[int, int]:
    """One-to-one pairs (row -> column) maximizing the score, keeping pairs scoring >= minimum."""
    if score.size == 0:
        return {}
    from scipy.optimize import linear_sum_assignment  # scipy.optimize: ~0.5 s per job start

    rows, cols = linear_sum_assignment(-score)
    return {int(r): int(c) for r, c in zip(rows, cols) if score[r, c] >= minimum}


# --- alignment --------------------------------------------------------------------------------


def _pad(grid: Sequence[Sequence[str]], width: int) -> list[list[str]]:
    return [list(r) + [""] * (width - len(r)) for r in grid]


def _kind(value: str) -> str:
    return "number" if to_number(value.replace(",", "")) is not None or _DATE_LIKE.match(value) else "text"


def _kinds_differ(gold_cells: list[str], pred_cells: list[str]) -> bool:
    """Whether a column of only numbers / dates meets a column of only text (or the reverse):
    then a label that matched only approximately names another relation (rule 2)."""
    gold = {_kind(v) for c in gold_cells for v in cell_values(c)}
    pred = {_kind(v) for c in pred_cells for v in cell_values(c) if v not in _EMPTY_CELLS}
    return len(gold) == 1 and len(pred) == 1 and gold != pred


def _reads_as_data(first: list[str], gold_rows: list[list[str]]) -> bool:
    """Rule 3 (given that no label of `first` matched a gold relation)."""
    if not any(first):
        return True
    if first[0] and any(entity_match(g[0], first[0]) for g in gold_rows):
        return True
    gold_values = {v for g in gold_rows for cell in g[1:] for v in cell_values(cell)}
    for cell in first[1:]:
        if not cell:
            continue
        if to_number(cell.replace(",", "")) is not None or _DATE_LIKE.match(cell):
            return True
        if any(value_match(g, v) for v in cell_values(cell) for g in gold_values):
            return True
    return False


def _align(gold_header: list[str], gold_rows: list[list[str]], grid: list[list[str]]) -> _Alignment:
    width = max(len(r) for r in grid)
    grid = _pad(grid, width)
    first = grid[0]
    label_score = np.array([[header_similarity(g, p) for p in first[1:]] for g in gold_header[1:]]).reshape(
        len(gold_header) - 1, width - 1
    )
    columns = {g + 1: p + 1 for g, p in _assign(label_score, TEXT_MATCH).items()}
    columns = {
        g: p
        for g, p in columns.items()
        if gold_header[g] == first[p] or not _kinds_differ([r[g] for r in gold_rows], [r[p] for r in grid[1:]])
    }
    header = bool(columns) or not _reads_as_data(first, gold_rows)
    data = grid[1:] if header else grid
    entity = np.array([[entity_score(g[0], d[0]) for d in data] for g in gold_rows]).reshape(len(gold_rows), len(data))
    rows = _assign(entity, 0.5)
    if not header:
        content = np.array(
            [
                [
                    sum(
                        classify_cell(gold_rows[gr][g], data[pr][p]) in ("correct", "partial")
                        for gr, pr in rows.items()
                    )
                    for p in range(1, width)
                ]
                for g in range(1, len(gold_header))
            ]
        ).reshape(len(gold_header) - 1, width - 1)
        columns = {g + 1: p + 1 for g, p in _assign(content, 1.0).items()}
        for col in range(1, min(width, len(gold_header))):  # the rest by position
            if col not in columns and col not in columns.values():
                columns[col] = col
    return _Alignment(header, columns, rows, width, first if header else [], data)


def classify(gold_header: Sequence[str], gold_rows: Sequence[Sequence[str]], table: ParsedTable | None) -> Failures:
    """The Table 10 categories of one prediction: `table` is what extraction read (None or an
    empty table: nothing was scored, the non-table category)."""
    if table is None or table.is_empty():
        return Failures(non_table=True)
    head = [normalize_cell(c) for c in gold_header]
    width = max([len(head)] + [len(r) for r in gold_rows])
    head = head + [""] * (width - len(head))
    rows = _pad([[normalize_cell(c) for c in r] for r in gold_rows], width)
    grid = [[normalize_cell(c) for c in table.header], *[[normalize_cell(c) for c in r] for r in table.rows]]
    grid = [r for r in grid if r] or [[""]]
    as_read = _align(head, rows, grid)
    flipped_header, flipped_rows = transpose(grid[0], grid[1:])
    flipped = _align(head, rows, [flipped_header, *flipped_rows]) if flipped_header else None
    transposed = flipped is not None and flipped.size > as_read.size
    a = flipped if flipped is not None and transposed else as_read

    missing_relations = tuple(head[g] for g in range(1, len(head)) if g not in a.columns)
    used = set(a.columns.values())
    extra = []
    for p in range(1, a.width):
        if p in used:
            continue
        label = a.labels[p] if a.header else ""
        if label or any(d[p] for d in a.data):
            extra.append(label or f"#{p + 1}")
    missing_entities = tuple(rows[g][0] for g in range(len(rows)) if g not in a.rows)
    wrong, partial = [], []
    for gr, pr in a.rows.items():
        for g, p in a.columns.items():
            kind = classify_cell(rows[gr][g], a.data[pr][p])
            if kind == "wrong":
                wrong.append((rows[gr][0], head[g]))
            elif kind == "partial":
                partial.append((rows[gr][0], head[g]))
    return Failures(
        non_table=False,
        no_header=not a.header,
        transposed=transposed,
        missing_relations=missing_relations,
        extra_relations=tuple(extra),
        missing_entities=missing_entities,
        wrong_cells=tuple(wrong),
        partial_cells=tuple(partial),
    )


def failure_scores(failures: Failures) -> list[tuple[str, str, float]]:
    """(metric, variant, 0 or 1) rows of one prediction, one per computed category; a cell's
    mean of these is the share of its predictions in the category."""
    return [(metric, VARIANT, float(on)) for metric, on in failures.labels.items()]


__all__ = [
    "CATEGORIES",
    "COMPUTED",
    "NOT_COMPUTED",
    "Failures",
    "cell_values",
    "classify",
    "classify_cell",
    "entity_match",
    "failure_scores",
    "header_similarity",
    "value_match",
]
