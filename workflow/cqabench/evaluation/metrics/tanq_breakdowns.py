"""The groups TANQ's Tables 5-9 break RMS down by, defined once for the scorer and the report.

The scorer (`scoring.tanq_groups`) writes one summary row per group ("rms_f1/n_relations=3")
and the report derives the same groups from per_question.parquet (`report.tables.DERIVED`);
both call the functions here, so a bucket means the same thing in metrics.parquet and in the
paper-layout tables.

- tanq_type (Table 5): simple / composition / intersection from the question type (the middle
  part of the qid: wikidata_simple, wikidata_comp, wikitables_composition, ...); every
  question also counts under "all".
- skill (Table 6): each of the question's skills (a question counts once under each).
- n_skills (Table 7): how many skills, 1, 2 or 3 (3 or more); a question without skills is in
  no group, as the paper's table has none.
- n_relations (Table 8): the requested relations = gold columns minus the entity column. The
  paper's groups are labelled one / three / five / ten relations while questions ask for any
  number (the sample has 1, 2, 4, 5, 7, 8, 9); we read the labels as upper bounds, as Table 9
  states its own: 1; 2-3 -> "3"; 4-5 -> "5"; 6-10 -> "10"; more than 10 -> "11+" (no paper
  column). docs/fidelity.md records this reading.
- table_length (Table 9): gold rows, short up to 3, medium up to 6, long 7 or more.
"""

from __future__ import annotations

import json
import math
from typing import Any

DIMENSIONS = ("tanq_type", "skill", "n_skills", "n_relations", "table_length")
RELATION_BUCKETS = ((1, 1, "1"), (2, 3, "3"), (4, 5, "5"), (6, 10, "10"))


def tanq_type(question_type: Any) -> str:
    """Table 5's question-type group of one of our question_type values."""
    text = "" if question_type is None else str(question_type)
    for part, group in (("intersection", "intersection"), ("comp", "composition"), ("simple", "simple")):
        if part in text:
            return group
    return text or "unknown"


def skills_of(value: Any) -> list[str]:
    """A question's skills from a list or from per_question.parquet's JSON text (empty: none)."""
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value)
        except ValueError:
            return [value]
        return [str(s) for s in parsed if s] if isinstance(parsed, list) else [str(parsed)]
    if isinstance(value, (list, tuple)):
        return [str(s) for s in value if s]
    if hasattr(value, "tolist"):  # a numpy array from Parquet
        return skills_of(list(value.tolist()))
    return []


def n_skills(skills: list[str]) -> str | None:
    """Table 7's group: "1", "2" or "3" (three or more); None without skills."""
    n = len(set(skills))
    return None if n == 0 else str(min(n, 3))


def _count(value: Any) -> int | None:
    try:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


def n_relations(answer_columns: Any) -> str | None:
    """Table 8's group of a gold table with `answer_columns` columns (None: unknown or no relation)."""
    columns = _count(answer_columns)
    if columns is None or columns < 2:
        return None
    relations = columns - 1
    return next((label for lo, hi, label in RELATION_BUCKETS if lo <= relations <= hi), "11+")


def table_length(answer_rows: Any) -> str | None:
    """Table 9's group of a gold table with `answer_rows` rows: short <= 3, medium <= 6, long 7+."""
    n = _count(answer_rows)
    if n is None:
        return None
    return "short" if n <= 3 else "medium" if n <= 6 else "long"


def groups(question_type: Any, skills: Any, answer_columns: Any, answer_rows: Any) -> dict[str, list[str]]:
    """dimension -> the groups one question counts under ([] = none), for DIMENSIONS."""
    names = sorted(set(skills_of(skills)))
    return {
        "tanq_type": [tanq_type(question_type), "all"],
        "skill": names,
        "n_skills": [b] if (b := n_skills(names)) else [],
        "n_relations": [b] if (b := n_relations(answer_columns)) else [],
        "table_length": [b] if (b := table_length(answer_rows)) else [],
    }
