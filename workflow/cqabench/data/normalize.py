"""SQuAD's answer normalization, the one comparison of answer strings every stage shares.

The data stage judges AmbigQA's passages by it (an answer occurs in the normalized passage
text) and the answer metrics compare predictions with golds by it, so a passage is judged
relevant exactly when a prediction copying its answer would score.
"""

from __future__ import annotations

import re
import string

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, delete string.punctuation, drop the words a/an/the, collapse whitespace."""
    text = str(text).lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())
