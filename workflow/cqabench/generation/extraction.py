"""The final answer out of model text, in the form each dataset's metric needs.

Two steps, kept apart so each can be tested and reused on its own:

1. `final_answer(text, prompt)` cuts the answer out of the model's whole output by the marker
   the prompt strategy asks for ("[Final Answer]:", self-ask's "So the final answer is").
2. `parse_answer(dataset, text)` turns that answer text into what the metric compares:
   a list of answers (AmbigQA), a number or yes/no (FinQA), yes/no (StrategyQA), a table (TANQ),
   or the text itself (span datasets).

`extract_answer` runs both. Nothing here raises on model output: output that cannot be parsed
gives `Extracted(ok=False, reason=...)`, which scoring counts as wrong (an empty table for TANQ).
Model output is data: it is only matched with regular expressions and parsed as text.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from cqabench.data.tables import to_markdown

# ---------------------------------------------------------------------------------------------
# Result types


@dataclass(frozen=True)
class Extracted:
    """One model output after extraction.

    `answer` is the final-answer text (what predictions.parquet stores in `prediction`; parsing
    it again gives the same `value`), `value` the parsed form the metric uses, `ok` whether the
    output had what the dataset needs, `reason` why not (empty when ok).
    """

    answer: str
    ok: bool
    reason: str = ""
    value: Any = None


@dataclass(frozen=True)
class ParsedNumber:
    """A number as written: `value` keeps the written magnitude and sign ("5.2%" -> 5.2,
    "(1,234)" -> -1234); `percent` and `multiplier` (a unit word such as "million") are kept
    apart because FinQA golds are sometimes stated in the table's unit and sometimes not."""

    value: float
    percent: bool = False
    multiplier: float = 1.0
    text: str = ""


@dataclass(frozen=True)
class ParsedTable:
    """A table read from model text; rows may be ragged (RMS handles that as TANQ does)."""

    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    source: str = ""  # html | pipe | tsv | csv

    def is_empty(self) -> bool:
        return not self.header and not self.rows


EMPTY_TABLE = ParsedTable()

# ---------------------------------------------------------------------------------------------
# Step 1: the final answer by prompt strategy

_MARKERS_GENERIC = (
    re.compile(r"\[\s*final\s+answer\s*\]\s*:?", re.IGNORECASE),
    re.compile(r"final\s+answer\s*:", re.IGNORECASE),
    re.compile(r"answer\s+is\s*:?", re.IGNORECASE),
)
_MARKERS_SELF_ASK = (re.compile(r"so\s+the\s+final\s+answer\s+is\s*:?", re.IGNORECASE),) + _MARKERS_GENERIC


def _prompt_kind(prompt: str | None) -> str:
    p = (prompt or "").lower().replace("_", "-").replace(" ", "-")
    if "self-ask" in p or "selfask" in p:
        return "self-ask"
    if "cot" in p:
        return "marked"
    return "free"  # direct-answer prompts (few-shot, zero-shot): the reply is the answer


def _clean_answer(text: str) -> str:
    """Drop the whitespace and markdown bold a model leaves around a marker ('**Final Answer:** x')."""
    return text.strip().strip("*").strip()


def final_answer(text: str | None, prompt: str | None = None) -> Extracted:
    """The text after the last final-answer marker of the prompt's strategy.

    Markers are tried in order (self-ask: "So the final answer is" first; all strategies:
    "[Final Answer]:", then "Final Answer:", then "answer is"); the first marker kind that
    occurs wins and its last occurrence is used, because CoT text can quote the marker earlier.
    Reasoning prompts (names containing "cot", or "self-ask") fail without a marker: scoring
    the whole rationale by substring match would reward verbosity. Direct-answer prompts
    ("few-shot", "zero-shot", or None for text that is already the answer) ask for the answer
    alone, so without a marker the whole reply is the answer (the original toolkit's scripts
    count any generation without "[Final Answer]:" as a miss; docs/metrics.md, Extraction).
    """
    if text is None or not str(text).strip():
        return Extracted("", False, "empty output")
    text = str(text)
    kind = _prompt_kind(prompt)
    for marker in _MARKERS_SELF_ASK if kind == "self-ask" else _MARKERS_GENERIC:
        hits = list(marker.finditer(text))
        if hits:
            answer = _clean_answer(text[hits[-1].end() :])
            if not answer:
                return Extracted("", False, f"nothing after the marker {hits[-1].group(0)!r}")
            return Extracted(answer, True)
    if kind == "free":
        return Extracted(_clean_answer(text), True)
    return Extracted(_clean_answer(text), False, f"no final-answer marker ({kind} prompt {prompt!r})")


# ---------------------------------------------------------------------------------------------
# Step 2 parsers

_YES_NO = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)


def parse_yes_no(text: str) -> bool | None:
    """The first yes/no/true/false word, or None."""
    m = _YES_NO.search(text or "")
    if not m:
        return None
    return m.group(1).lower() in ("yes", "true")


_UNITS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_NUMBER = re.compile(
    r"(?P<open>\()?\s*\$?\s*(?:(?<![\w)])(?P<sign>[-+\u2212\u2013]))?\s*\$?\s*"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?P<close>\s*\))?"
    r"(?P<pct>\s*(?:%|percent\b|per\s+cent\b))?"
    r"(?:\s*(?P<unit>thousand|million|billion|trillion)\b)?",
    re.IGNORECASE,
)


def parse_number(text: str) -> ParsedNumber | None:
    """The last number in the text ($, thousands commas, %, "(x)" negatives, unit words).

    The last one, as the original toolkit takes it: in an answer sentence the result usually
    comes after the quantities it was computed from.
    """
    matches = list(_NUMBER.finditer(text or ""))
    if not matches:
        return None
    m = matches[-1]
    value = float(m.group("num").replace(",", ""))
    negative = bool(m.group("sign") and m.group("sign") != "+") or bool(m.group("open") and m.group("close"))
    unit = (m.group("unit") or "").lower()
    return ParsedNumber(
        value=-value if negative else value,
        percent=bool(m.group("pct")),
        multiplier=_UNITS.get(unit, 1.0),
        text=m.group(0).strip(),
    )


_BULLET = re.compile(r"^\s*(?:[-*\u2022\u00b7\u2013]+|\(?\d{1,2}[.)]|\(\d{1,2}\))(?:\s+|$)")


def parse_answer_list(text: str) -> list[str]:
    """One answer per line, bullets and numbering stripped, blank lines dropped.

    Lines are not split on commas: answers such as "Washington, D.C." contain them. A literal
    backslash-n (as some few-shot examples print it) counts as a line break.
    """
    text = (text or "").replace("\\n", "\n")
    out = []
    for line in text.splitlines():
        item = _BULLET.sub("", line).strip().strip("*").strip()
        if item:
            out.append(item)
    return out


# --- tables -----------------------------------------------------------------------------------

_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_SEPARATOR_CELL = re.compile(r"^:?-+:?$")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def clean_cell(cell: str) -> str:
    """Markdown decoration off a cell: **bold**, __bold__, `code`, *italic*, <br>; spaces collapsed.

    Idempotent: RMS applies it again to gold and predicted cells alike (`metrics.tables.normalize_cell`)."""
    s = _BR.sub(" ", str(cell)).replace("\\|", "|")
    s = s.replace("**", "").replace("__", "").replace("`", "")
    s = " ".join(s.split())
    while len(s) >= 2 and s[0] == s[-1] and s[0] in "*_":
        s = s[1:-1].strip()
    return s


class _HtmlTable(HTMLParser):
    """Rows of the first top-level <table>; nested tables are read as cell text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.done = False
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.done:
            return
        if tag == "table":
            self.depth += 1
        elif self.depth == 1 and tag == "tr":
            self._finish_row()
            self._row = []
        elif self.depth == 1 and tag in ("td", "th"):
            self._finish_cell()
            if self._row is None:
                self._row = []
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if self.done:
            return
        if tag == "table":
            self.depth -= 1
            if self.depth == 0:
                self._finish_row()
                self.done = True
        elif self.depth == 1 and tag in ("td", "th"):
            self._finish_cell()
        elif self.depth == 1 and tag == "tr":
            self._finish_row()

    def handle_data(self, data: str) -> None:
        if self._cell is not None and not self.done:
            self._cell.append(data)

    def _finish_cell(self) -> None:
        if self._cell is not None and self._row is not None:
            self._row.append(clean_cell("".join(self._cell)))
        self._cell = None

    def _finish_row(self) -> None:
        self._finish_cell()
        if self._row:
            self.rows.append(self._row)
        self._row = None


def _html_rows(text: str) -> list[list[str]]:
    parser = _HtmlTable()
    start = re.search(r"<table\b", text, re.IGNORECASE)
    parser.feed(text[start.start() :] if start else text)
    parser.close()
    parser._finish_row()
    return parser.rows


def _blocks(lines: list[str], keep) -> list[list[str]]:
    """Runs of consecutive lines for which keep(line) holds."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        if keep(line):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


# A table's rows may be separated by blank lines and by at most this many other lines (a
# stray note, a row the model wrote without separators); those lines are skipped. More such
# lines in a row (a paragraph) end the table.
MAX_STRAY_LINES = 1


def _table_runs(lines: list[str], is_row, split, is_separator=None) -> list[list[list[str]]]:
    """Tables (lists of rows of cells) in reading order; see `parse_table` for the rule."""
    runs: list[list[list[str]]] = []
    current: list[list[str]] = []
    stray = 0
    for line in lines:
        if not line.strip():
            continue
        if not is_row(line):
            if current:
                stray += 1
                if stray > MAX_STRAY_LINES:
                    runs.append(current)
                    current, stray = [], 0
            continue
        stray = 0
        cells = split(line)
        if is_separator is not None and is_separator(cells):
            if len(current) >= 2:  # a header + separator after rows: a new table starts
                runs.append(current[:-1])
                current = current[-1:]
            continue
        current.append(cells)
    if current:
        runs.append(current)
    return runs


def _pipe_row(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return [clean_cell(c) for c in _UNESCAPED_PIPE.split(s)]


def _is_separator(cells: list[str]) -> bool:
    cells = [c.replace(" ", "") for c in cells]
    return any(cells) and all(_SEPARATOR_CELL.match(c) for c in cells if c)


def _first_table(blocks: list[list[list[str]]]) -> list[list[str]] | None:
    """The first block with a header and a data row, else the first non-empty one."""
    nonempty = [b for b in blocks if b]
    for b in nonempty:
        if len(b) >= 2:
            return b
    return nonempty[0] if nonempty else None


MAX_HEADER_WORDS = 4
_SENTENCE_END = ".!?:;"
_CONNECTIVES = frozenset(
    "and but or so which who whom whose that including because while although though however then "
    "if when where since".split()
)


def _label_like(cell: str) -> bool:
    """A CSV header cell that reads as a column label, not as a piece of a sentence."""
    words = cell.split()
    return 0 < len(words) <= MAX_HEADER_WORDS and cell[-1] not in _SENTENCE_END and words[0].lower() not in _CONNECTIVES


def _csv_table(block: list[str]) -> list[list[str]] | None:
    """The CSV table of a run of comma lines (leading lines that do not fit are dropped), or None."""
    for start in range(len(block) - 1):
        try:
            rows = [
                [clean_cell(c) for c in r]
                for r in csv.reader(io.StringIO("\n".join(block[start:])), skipinitialspace=True)
            ]
        except csv.Error:
            continue
        rows = [r for r in rows if any(r)]
        if len(rows) < 2 or len(rows[0]) < 2:
            continue
        if any(len(r) != len(rows[0]) for r in rows):
            continue
        if not all(_label_like(c) for c in rows[0]):
            continue
        if any(c.split()[0] in _CONNECTIVES for r in rows[1:] for c in r[1:] if c.strip()):
            continue  # ", but ...", ", which ...": a clause after a comma, not a cell
        return rows
    return None


def parse_table(text: str) -> ParsedTable | None:
    """A table out of model text: HTML, markdown/pipe rows, TSV or CSV; the first row is the header.

    Formats are tried from the most to the least specific (HTML, pipes, tabs, commas) so that
    prose with commas is only read as CSV when nothing else looks like a table. Markdown
    separator rows and code fences are skipped and decoration is removed from cells
    (`clean_cell`). None when the text holds no table.

    Pipe and TSV tables: a table starts at the first line with a separator (`|`, a tab) and
    keeps every such line as a row, across blank lines and across at most `MAX_STRAY_LINES`
    other non-blank line at a time (skipped, not a row), as TANQ's own evaluation reads every
    line of the prediction. It ends at the end of the text, at two or more consecutive
    non-blank lines without a separator (a paragraph), or where a new markdown table starts
    (a separator row after the table already has a header and a row: the line above it is the
    new table's header). The first table with a header and a data row is returned.

    CSV (only when there is no pipe or TSV table): a run of consecutive lines with a comma is a
    table when, from some line on (leading lines that do not fit are dropped), it has at least
    two rows, every row has the same number (>= 2) of cells, and the first row reads as column
    labels: every cell non-empty, at most `MAX_HEADER_WORDS` words, not ending in . ! ? : ;
    and not starting with a connective (and, but, which, who, including, ...); and no later
    cell after a comma starts with a lower-case connective (", but it ..."). Prose with commas
    fails the labels, the connectives or the consistent cell count.
    """
    text = text or ""
    if re.search(r"<table\b", text, re.IGNORECASE):
        rows = _html_rows(text)
        if rows:
            return ParsedTable(rows[0], rows[1:], "html")
    lines = [ln for ln in text.replace("\r\n", "\n").split("\n") if not ln.strip().startswith("```")]

    found = _first_table(_table_runs(lines, lambda ln: "|" in ln, _pipe_row, _is_separator))
    if found:
        return ParsedTable(found[0], found[1:], "pipe")

    tsv_runs = _table_runs(lines, lambda ln: "\t" in ln, lambda ln: [clean_cell(c) for c in ln.split("\t")])
    found = _first_table([b for b in tsv_runs if len(b) >= 2])
    if found:
        return ParsedTable(found[0], found[1:], "tsv")

    for block in _blocks(lines, lambda ln: "," in ln and ln.strip() != ""):
        table = _csv_table(block)
        if table:
            return ParsedTable(table[0], table[1:], "csv")
    return None


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Markdown text of a table; `parse_table` reads it back to the same cells."""
    return to_markdown(header, rows)


# ---------------------------------------------------------------------------------------------
# Step 2 by dataset

LIST_DATASETS = ("ambigqa",)
TABLE_DATASETS = ("tanq",)
# why a final answer of a table dataset failed: it is there but holds no table `parse_table` reads
# (TANQ's official RMS reading still reads it: scoring._tanq_scores)
NO_TABLE = "no table (markdown, pipe, TSV, CSV or HTML) in the answer"


def parse_answer(dataset: str, text: str | None) -> Extracted:
    """Parse final-answer text for `dataset`'s metric; see the module docstring for the forms."""
    text = "" if text is None else str(text).strip()
    if not text:
        return Extracted("", False, "empty answer", EMPTY_TABLE if dataset in TABLE_DATASETS else None)
    if dataset == "strategyqa":
        yn = parse_yes_no(text)
        if yn is None:
            return Extracted(text, False, "no yes/no/true/false in the answer")
        return Extracted(text, True, value=yn)
    if dataset == "finqa":
        return _parse_finqa(text)
    if dataset in LIST_DATASETS:
        items = parse_answer_list(text)
        if not items:
            return Extracted(text, False, "no answer lines", [])
        return Extracted(text, True, value=items)
    if dataset in TABLE_DATASETS:
        table = parse_table(text)
        if table is None:
            return Extracted(text, False, NO_TABLE, EMPTY_TABLE)
        return Extracted(text, True, value=table)
    return Extracted(text, True, value=text)


def _parse_finqa(text: str) -> Extracted:
    """yes/no when the answer starts with it, else the number, else a yes/no anywhere."""
    first = re.match(r"\W*(yes|no|true|false)\b", text, re.IGNORECASE)
    if first:
        return Extracted(text, True, value=first.group(1).lower() in ("yes", "true"))
    number = parse_number(text)
    if number is not None:
        return Extracted(text, True, value=number)
    yn = parse_yes_no(text)
    if yn is not None:
        return Extracted(text, True, value=yn)
    return Extracted(text, False, "no number and no yes/no in the answer")


def extract_answer(dataset: str, raw: str | None, prompt: str | None = None) -> Extracted:
    """Both steps: the final answer by the prompt's marker, then the dataset's parse.

    A missing marker fails the item (ok False, scored wrong) but the parse is still attempted
    on the whole text so that `value` shows what would have been read.
    """
    fa = final_answer(raw, prompt)
    parsed = parse_answer(dataset, fa.answer)
    if not fa.ok:
        return Extracted(fa.answer, False, fa.reason, parsed.value)
    return parsed
