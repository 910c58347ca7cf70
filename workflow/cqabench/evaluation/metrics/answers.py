"""Answer metrics, one small pure function each; every function scores one question in [0, 1].

Definitions (docs/metrics.md has the worked examples):
- `answer_text.normalize` / `answer_text.contains` (cqabench.evaluation.metrics.answer_text):
  SQuAD's normalization (lower-case, delete string.punctuation, drop a/an/the, collapse
  whitespace) except that a number is one token keeping its sign and decimal point, and a gold
  that starts or ends with a number, or has three or fewer characters, matches at word
  boundaries only. Used by cover-EM, EM and F1 for the text datasets (MuSiQue, 2Wiki, OTT-QA,
  TAT-QA). SQuAD's own `normalize_answer` (cqabench.data.normalize) stays where a reference
  script uses it: AmbigQA's official F1_ans, the toolkit's CoverExactMatch (`squad_cover_em`,
  AmbigQA's `dexter` variant), StrategyQA's yes/no words.
- `cover_em`: 1 if any gold alias is contained in the prediction (`answer_text.contains`).
- `cover_em_script` (cqabench.evaluation.metrics.dexter_scripts): the toolkit LLM scripts' inline
  check, variant `dexter`.
- `boolean_cover_em` (StrategyQA): the gold's yes/no (or true/false) as a whole word of the
  normalized answer, never inside another word ("not", "unknown" do not cover "no").
- `exact_match` / `token_f1`: SQuAD EM and bag-of-tokens F1 on `answer_text.normalize`, maximum over aliases.
- TAT-QA multi-span: every span must be covered (`cover_em_all`); EM: the prediction is the
  spans in any order joined only by punctuation/"and"; F1: token F1 against all spans pooled.
- `f1_ans`: AmbigQA's official F1 over interpretations (ambigqa_evaluate_script.py):
  greedy one-to-one matching by normalized exact match, best annotation per question.
  `f1_ans_dexter`: the original toolkit's variant (pooled aliases as separate golds, cover-EM).
- `em_tol`: FinQA number match within 2% relative tolerance, signs kept, the gold read from the
  published answer string ("-3.2%", "44%", "73.22"; percent golds on either scale); variant
  `exe_ans` reads it from FinQA's program result instead;
  `em_tol_dexter`: the toolkit's comparison (absolute values, 3-place rounding, 1-decimal equality).
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cqabench.data.normalize import normalize_answer
from cqabench.evaluation.metrics.answer_text import comparable, contains, normalize
from cqabench.generation.extraction import ParsedNumber


def _aliases(aliases: str | Iterable[str]) -> list[str]:
    return [aliases] if isinstance(aliases, str) else [str(a) for a in aliases]


def cover_em(prediction: str, aliases: str | Iterable[str]) -> float:
    """1 if some alias occurs in the prediction: numbers whole and signed, short aliases as words."""
    return float(any(contains(*comparable(prediction, a)) for a in _aliases(aliases)))


def squad_cover_em(prediction: str, aliases: str | Iterable[str]) -> float:
    """The toolkit's CoverExactMatch: SQuAD-normalized alias a character substring of the
    SQuAD-normalized prediction (signs, points and word boundaries ignored); kept for the
    `dexter` variant of AmbigQA's F1, which the toolkit computes with it."""
    pred = normalize_answer(prediction)
    return float(any(normalize_answer(a) in pred for a in _aliases(aliases)))


def exact_match(prediction: str, aliases: str | Iterable[str]) -> float:
    return float(any(operator.eq(*comparable(prediction, a)) for a in _aliases(aliases)))


def _f1_tokens(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)  # SQuAD: both empty -> 1, one empty -> 0
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, aliases: str | Iterable[str]) -> float:
    pred = normalize(prediction).split()
    return max((_f1_tokens(pred, normalize(a).split()) for a in _aliases(aliases)), default=0.0)


# --- TAT-QA multi-span -----------------------------------------------------------------------
# A multi-span answer is one text with every span in it, joined by anything (commas, "and",
# new lines). Spans themselves may contain "and" or commas, so the prediction is not split;
# instead the gold spans are taken out of it. Empty gold spans (TAT-QA has a few) are ignored.

_CONNECTORS = {"and"}


def _spans(spans: Sequence[str]) -> list[str]:
    return [n for n in (normalize(s) for s in spans) if n]


def cover_em_all(prediction: str, spans: Sequence[str]) -> float:
    """Multi-span cover-EM: every gold span must be contained in the prediction (as `cover_em`)."""
    pred = normalize(prediction)
    gold = _spans(spans)
    return float(bool(gold) and all(contains(pred, s) for s in gold))


def multispan_em(prediction: str, spans: Sequence[str]) -> float:
    """1 when the prediction is the spans, in any order, joined only by punctuation or "and".

    Each span (longest first) must occur as whole words and is removed once; what remains
    must be connector words only.
    """
    rest = f" {normalize(prediction)} "
    gold = _spans(spans)
    if not gold:
        return 0.0
    for span in sorted(gold, key=len, reverse=True):
        if f" {span} " not in rest:
            return 0.0
        rest = rest.replace(f" {span} ", " ", 1)
    return float(all(t in _CONNECTORS for t in rest.split()))


def multispan_f1(prediction: str, spans: Sequence[str]) -> float:
    """Token F1 of the prediction against all spans pooled, connector words left out."""
    pred = [t for t in normalize(prediction).split() if t not in _CONNECTORS]
    gold = [t for s in _spans(spans) for t in s.split() if t not in _CONNECTORS]
    return _f1_tokens(pred, gold)


# --- StrategyQA -------------------------------------------------------------------------------


def boolean_accuracy(prediction: bool | None, gold: bool) -> float:
    """1 when the extracted yes/no equals the gold; None (nothing extracted) is wrong."""
    return float(prediction is not None and bool(prediction) == bool(gold))


# The words a yes/no gold is written as. StrategyQA's golds are booleans; our prompts ask for
# yes/no, the original toolkit's for true/false, so both forms of the gold count.
BOOLEAN_FORMS: dict[bool, frozenset[str]] = {True: frozenset({"yes", "true"}), False: frozenset({"no", "false"})}
_BOOLEAN_WORDS = {
    gold: re.compile(r"\b(?:" + "|".join(sorted(forms)) + r")\b") for gold, forms in BOOLEAN_FORMS.items()
}


def boolean_cover_em(prediction: str, gold: bool) -> float:
    """StrategyQA cover-EM: 1 when a word of the gold's polarity is a whole word of the answer.

    The toolkit's check (`str(bool).lower() in answer`, dexter_toolkit.md "Cover-EM as actually
    scored") looks for the gold word in the final answer. Done on characters, as the generic
    `cover_em` does, gold "no" would be covered by "not", "know", "unknown", "cannot", "nothing"
    and gold "yes" by "yesterday"; so the answer is normalized (`normalize_answer`) and its
    *words* (regex word boundaries, so a quote or dash that normalization keeps, "“No”",
    "No—", still bounds a word) are compared with the gold's forms (yes/true, no/false).
    Punctuation inside a word is deleted by normalization, so "no-one" ("noone") and "yes/no"
    ("yesno") hold no polarity word.

    Both polarities in one answer ("yes and no", "No, that is not true"): covered for either
    gold, the toolkit-faithful reading (its substring test counts the gold word wherever it
    is). The stricter reading is StrategyQA `accuracy`, which takes the first yes/no/true/false
    word as the answer (`extraction.parse_yes_no`, on the raw text).
    """
    return float(bool(_BOOLEAN_WORDS[bool(gold)].search(normalize_answer(prediction))))


# --- AmbigQA ----------------------------------------------------------------------------------


def _normalized_em(gold_aliases: Sequence[str], prediction: str) -> bool:
    pred = normalize_answer(prediction)
    return any(normalize_answer(a) == pred for a in gold_aliases)


def greedy_f1(golds: Sequence[Any], predictions: Sequence[str], match: Callable[[Any, str], bool]) -> float:
    """AmbigQA's get_f1: golds in order, each taking the first free prediction it matches."""
    if not golds or not predictions:
        return 0.0
    used_gold = [False] * len(golds)
    used_pred = [False] * len(predictions)
    for i, gold in enumerate(golds):
        for j, pred in enumerate(predictions):
            if used_gold[i] or used_pred[j]:
                continue
            if match(gold, pred):
                used_gold[i] = used_pred[j] = True
    recall = sum(used_gold) / len(golds)
    precision = sum(used_pred) / len(predictions)
    if recall + precision == 0:
        return 0.0
    return 2 * recall * precision / (recall + precision)


def _annotation_golds(annotation: dict[str, Any]) -> list[list[str]]:
    return [list(item.get("aliases") or []) for item in annotation.get("answers") or []]


def f1_ans(annotations: Sequence[dict[str, Any]], predictions: Sequence[str]) -> float:
    """Official AmbigQA F1_ans of one question: the best annotation's greedy F1 (0 if none)."""
    scores = [greedy_f1(_annotation_golds(a), list(predictions), _normalized_em) for a in annotations]
    return max(scores, default=0.0)


def is_multi_answer(annotations: Sequence[dict[str, Any]]) -> bool:
    """The official script's 'multi only' subset: no annotation of type singleAnswer."""
    return bool(annotations) and not any(a.get("type") == "singleAnswer" for a in annotations)


def _dexter_clean(text: str) -> str:
    return str(text).lower().replace("-", "").strip()


def f1_ans_dexter(pooled_aliases: Sequence[str], predictions: Sequence[str]) -> float:
    """The original toolkit's AmbigQA F1: every distinct alias of every interpretation is a
    separate gold (lower-cased, '-' removed; sorted here, a set in the toolkit), predictions
    likewise cleaned, and a gold matches a prediction by cover-EM."""
    golds = sorted({_dexter_clean(a) for a in pooled_aliases})
    preds = [_dexter_clean(p) for p in predictions]
    return greedy_f1(golds, preds, lambda g, p: bool(squad_cover_em(p, g)))


# --- FinQA ------------------------------------------------------------------------------------

REL_TOL = 0.02


def number_readings(number: ParsedNumber) -> set[float]:
    """The values a written number may mean: as written p, p/100 when written with %, p·unit
    when a unit word follows ("1.5 million" -> 1.5 and 1.5e6, because FinQA golds are in the
    table's unit). Predictions and published gold strings are read alike."""
    out = {number.value}
    if number.percent:
        out.add(number.value / 100.0)
    if number.multiplier != 1.0:
        out.add(number.value * number.multiplier)
    return out


def em_tol(
    prediction: ParsedNumber | bool | None, golds: Iterable[float] = (), gold_boolean: bool | None = None
) -> float:
    """FinQA match of one answer.

    yes/no golds: the extracted yes/no must equal them. Number golds: some reading of the
    prediction (`number_readings`) is within math.isclose(rel_tol=0.02) of some reading of the
    gold (`golds`: `number_readings` of the published answer string, or `exe_ans_golds`),
    signs kept.
    """
    if gold_boolean is not None:
        return float(isinstance(prediction, bool) and prediction == gold_boolean)
    golds = [float(g) for g in golds]
    if not golds or not isinstance(prediction, ParsedNumber):
        return 0.0
    preds = number_readings(prediction)
    return float(any(math.isclose(p, g, rel_tol=REL_TOL) for p in preds for g in golds))


def exe_ans_golds(number: float | None, percent_scale: bool = False) -> set[float]:
    """The gold readings of FinQA's program result `exe_ans` (variant `exe_ans`): g, and 100·g
    when the answer is a percentage (FinQA stores "5.2%" as 0.052; some programs already x100)."""
    if number is None or math.isnan(number):
        return set()
    return {float(number), 100.0 * number} if percent_scale else {float(number)}


def dexter_gold_value(answer_text: str) -> float | None:
    """The toolkit's gold: the answer string with $ % , removed, as a float."""
    try:
        return float(str(answer_text).replace("$", "").replace("%", "").replace(",", "").strip())
    except ValueError:
        return None


def em_tol_dexter(
    prediction: ParsedNumber | bool | None, gold_value: float | None = None, gold_boolean: bool | None = None
) -> float:
    """The original toolkit's FinQA match (how the paper's numbers were computed).

    Numbers as written (no % division), compared as absolute values: isclose(|round(g, 3)|,
    |round(p, 3)|, rel_tol=0.02), or equal after rounding |p| and |g| to one decimal. The gold is
    the answer string cleaned of $ % , (`dexter_gold_value`): 5.2% is 5.2. yes/no as words.
    """
    if gold_boolean is not None:
        return float(isinstance(prediction, bool) and prediction == gold_boolean)
    if gold_value is None or not isinstance(prediction, ParsedNumber):
        return 0.0
    p, g = prediction.value, float(gold_value)
    if math.isclose(abs(round(g, 3)), abs(round(p, 3)), rel_tol=REL_TOL):
        return 1.0
    return float(round(abs(p), 1) == round(abs(g), 1))
