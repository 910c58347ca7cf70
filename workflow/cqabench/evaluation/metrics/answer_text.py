"""The answer metrics' text comparison: SQuAD normalization that keeps numbers whole.

SQuAD's `normalize_answer` (cqabench.data.normalize) deletes every punctuation character, so
"-12.6" becomes "126" and is then found inside "126", "1260", "0.126" and "12.6"; and a
character substring test finds a short alias inside any longer word (MuSiQue's Norway alias
"NO" inside "I do not know"). This module is what cover-EM, EM and F1 compare instead
(docs/metrics.md, "Text normalization"); the data stage keeps SQuAD's function unchanged,
because AmbigQA's relevance judgments are defined by it (the qrels do not move).

- `normalize`: SQuAD's steps, except that a number is one token that keeps its sign and
  decimal point: "-$1,234.50" -> "-1234.5" (thousands commas dropped, a currency sign between
  the minus and the digits skipped, trailing fractional zeros dropped so "12.60" == "12.6" and
  "5.0" == "5"; "$(9.8)" is the accounting negative -9.8). A minus is a sign only where no letter or digit precedes it ("1990-1995" is
  two numbers, "B-52" stays SQuAD's "b52"). Every other character is treated as SQuAD treats it.
- `contains`: a gold occurs in a prediction (both normalized). Where the gold starts (ends) with
  a number, or the whole gold has three or fewer characters, it must start (end) at a word
  boundary of the prediction; longer text golds keep SQuAD's character substring test
  (the toolkit's CoverExactMatch), so "beatles" is still found in "thebeatles".
"""

from __future__ import annotations

import re
import string

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# A number: optional sign (not glued to a preceding letter or digit), an optional currency sign,
# digits with or without thousands groups, an optional fraction; or a bare fraction (".5"); a
# letter may follow ("12.6m", "1990s" -> "12.6 m", "1990 s"), a digit or a point and digit not.
# Not preceded by a word character, a point or a comma (so "1.2.3" or "x12" are not numbers),
# nor by a hyphen that follows a word character ("B-52", "COVID-19": SQuAD joins those).
NUMBER = re.compile(
    r"(?<![\w.,])(?<!\w-)(?P<sign>[-+]?)[$€£]?"
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?P<frac>\.\d+)?"
    r"(?!\d|[.,]\d)"
)
# An accounting negative after a currency sign, "$(9.8)" (TAT-QA golds have them): read as "-$9.8".
# A bare "(1997)" stays a number in brackets, not a negative.
_ACCOUNTING = re.compile(r"([$€£])\(\s*(\d[\d,]*(?:\.\d+)?)\s*\)")
_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-"})  # the minus sign and en dash typeset as minus
SHORT = 3  # a gold of at most this many characters (normalized) matches whole words only


def canonical_number(sign: str, whole: str | None, frac: str | None) -> str:
    """One number's token: sign kept ("-" only), thousands commas and trailing fractional zeros
    dropped, a bare fraction given its 0 ("-.5" -> "-0.5"); "-0" is "0"."""
    digits = (whole or "0").replace(",", "").lstrip("0") or "0"
    fraction = (frac or "").rstrip("0").rstrip(".")
    token = digits + fraction
    return f"-{token}" if sign == "-" and token.strip("0.") else token


def _squad_chars(text: str) -> str:
    return "".join(ch for ch in text if ch not in _PUNCT)


def normalize(text: str, drop_articles: bool = True) -> str:
    """Lower-case; numbers as signed tokens (module docstring); elsewhere delete
    string.punctuation; drop the words a/an/the (unless `drop_articles` is False); collapse
    whitespace."""
    text = _ACCOUNTING.sub(r"-\1\2", str(text).lower().translate(_MINUS))
    parts: list[str] = []
    end = 0
    for m in NUMBER.finditer(text):
        if m.group("int") is None and m.group("frac") is None:
            continue  # an empty match (a lone sign or currency sign)
        parts += [_squad_chars(text[end : m.start()]), canonical_number(m["sign"], m["int"], m["frac"])]
        end = m.end()
    parts.append(_squad_chars(text[end:]))
    text = " ".join(parts)
    return " ".join((_ARTICLES.sub(" ", text) if drop_articles else text).split())


def comparable(prediction: str, gold: str) -> tuple[str, str]:
    """(prediction, gold) normalized for comparison. A gold that is only an article (OTT-QA's
    answer "A", a grade) would normalize to nothing, which SQuAD's substring test finds in every
    prediction; it is compared with the articles kept instead, on both sides."""
    normalized = normalize(gold)
    if normalized or not gold.strip():
        return normalize(prediction), normalized
    return normalize(prediction, drop_articles=False), normalize(gold, drop_articles=False)


def _starts_number(text: str) -> bool:
    return bool(text) and (text[0].isdigit() or (text[0] == "-" and text[1:2].isdigit()))


def contains(prediction: str, gold: str) -> bool:
    """Whether normalized `gold` occurs in normalized `prediction` (module docstring): bounded by
    word boundaries at a number edge and on both sides of a short gold; an empty gold never."""
    if not gold:
        return False
    short = len(gold) <= SHORT
    left = r"(?<!\S)" if short or _starts_number(gold) else ""
    right = r"(?!\S)" if short or gold[-1].isdigit() else ""
    if not left and not right:
        return gold in prediction
    return re.search(left + re.escape(gold) + right, prediction) is not None
