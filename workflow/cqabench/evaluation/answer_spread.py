"""Does a cell's model answer its questions, or give one answer to all of them?

A small model often says "no" to every StrategyQA question or repeats one number on FinQA; its
accuracy is then the share of questions whose answer happens to be that one, and a difference
between two such cells says nothing about retrieval. So every answer cell records how its
predictions spread (metrics.json `answers`, fact-table columns of the same names), computed
where its metrics are (cqabench.evaluation.evaluate), and the report flags it:

- `constant_answer`: the most frequent prediction is at least CONSTANT_SHARE of the scored
  questions (and there are at least MIN_QUESTIONS of them). Predictions are compared after
  `normalized` (case, spacing and surrounding punctuation do not make two answers differ); an
  empty prediction (nothing extracted) counts as the answer "" like any other.
- `low_parse_rate`: fewer than LOW_PARSE_RATE of the questions had a final answer extracted, so
  most of the score is unparsed output counted as wrong.

Questions whose generation failed (no answer at all, `cqabench.evaluation.scoring.generation_failed`) are
left out, as they are of every mean.
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

CONSTANT_SHARE = 0.9
LOW_PARSE_RATE = 0.5
MIN_QUESTIONS = 2  # one question's answer is trivially "all the same"
_EDGES = string.punctuation + string.whitespace + "“”‘’"


def normalized(prediction: Any) -> str:
    """The prediction as compared: case-folded, whitespace collapsed, punctuation stripped at both ends."""
    if prediction is None:
        return ""
    return " ".join(str(prediction).casefold().split()).strip(_EDGES)


def answer_spread(predictions: Sequence[Any], parse_ok: Sequence[bool]) -> dict[str, Any]:
    """The spread of one cell's scored predictions (failed items already left out).

    Returns {n_answers, top_answer, top_answer_count, top_answer_share, parse_rate,
    constant_answer, low_parse_rate}; shares and the rate are fractions 0..1 (None for no
    question, and then neither flag is set). Ties for the top answer go to the answer
    met first.
    """
    if len(predictions) != len(parse_ok):
        raise ValueError(f"{len(predictions)} predictions but {len(parse_ok)} parse flags")
    n = len(predictions)
    if n == 0:
        return {
            "n_answers": 0,
            "top_answer": None,
            "top_answer_count": 0,
            "top_answer_share": None,
            "parse_rate": None,
            "constant_answer": False,
            "low_parse_rate": False,
        }
    counts = Counter(normalized(p) for p in predictions)
    top, count = counts.most_common(1)[0]  # most_common keeps first-met order among equal counts
    share = count / n
    rate = sum(bool(ok) for ok in parse_ok) / n
    return {
        "n_answers": n,
        "top_answer": top,
        "top_answer_count": count,
        "top_answer_share": share,
        "parse_rate": rate,
        "constant_answer": bool(n >= MIN_QUESTIONS and share >= CONSTANT_SHARE),
        "low_parse_rate": bool(rate < LOW_PARSE_RATE),
    }


def _count(value: Any) -> Any:
    """A count read back from the fact table is a float (its column holds nulls): 30.0 reads as 30."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def describe(spread: dict[str, Any], llm: str = "the model") -> list[str]:
    """The flags as plain sentences, e.g. "the model answered 'no' to 30/30 questions"."""
    out = []
    n = _count(spread.get("n_answers"))
    if spread.get("constant_answer"):
        answer = spread.get("top_answer")
        said = f"'{answer}'" if answer else "nothing extractable"
        out.append(f"{llm} answered {said} to {_count(spread['top_answer_count'])}/{n} questions")
    if spread.get("low_parse_rate"):
        if spread.get("parse_rate") is not None and n:
            parsed = round(spread["parse_rate"] * n)
            out.append(f"a final answer was extracted from only {parsed}/{n} outputs")
        else:
            out.append(f"a final answer was extracted from fewer than {LOW_PARSE_RATE:.0%} of the outputs")
    return out
