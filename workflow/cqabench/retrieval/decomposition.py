"""StrategyQA retrieval by question (IR-Q) and by decomposition step (IR-D).

IR-Q sends the question; IR-D sends one query per reasoning step (gold steps from
`Query.decomposition`, predicted steps from `Query.meta["predicted_decomposition"]`). Every
query, the question included, has stop words removed so IR-Q and IR-D differ only in what is
asked. The stop-word list is scikit-learn's `ENGLISH_STOP_WORDS` (318 words, available
offline); `#k` references to earlier steps are dropped too, since no paragraph contains them.
The results of a question's steps are merged: each paragraph keeps its best score, the
union is ordered by score (trec_eval order) and cut to k (10, as in the StrategyQA paper).
A step left empty after stop-word removal is not sent and is recorded; a question whose every
step is empty gets an empty result, also recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cqabench.common.errors import DataError
from cqabench.retrieval.base import QueryText, Results, rank

QUERY_KINDS = ("question", "gold", "predicted")
# The run name suffix of each kind, e.g. bm25-irq, bm25-ird-gold.
RUN_SUFFIX = {"question": "irq", "gold": "ird-gold", "predicted": "ird-pred"}
STOP_WORD_LIST = "sklearn.ENGLISH_STOP_WORDS"

_TOKEN = re.compile(r"#\d+|[^\W_]+(?:['’][^\W_]+)*")
_STOP: frozenset[str] | None = None

SearchFn = Callable[[list[QueryText], int], Results]


def stop_words() -> frozenset[str]:
    global _STOP
    if _STOP is None:
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        _STOP = frozenset(ENGLISH_STOP_WORDS)
    return _STOP


def strip_stop_words(text: str) -> str:
    """The words of `text` that are neither stop words nor step references, space-joined."""
    stop = stop_words()
    words = [w for w in _TOKEN.findall(text) if not w.startswith("#") and w.lower() not in stop]
    return " ".join(words)


def steps_of(row: Mapping[str, Any], kind: str, source: str = "queries") -> list[str]:
    """The texts a question is searched with under `kind`."""
    if kind == "question":
        return [row["question"]]
    if kind == "gold":
        return list(row["decomposition"] or [])
    if kind == "predicted":
        try:
            meta = json.loads(row.get("meta") or "{}")
        except json.JSONDecodeError as exc:
            raise DataError(source, row["qid"], "meta", f"not valid JSON ({exc.msg})") from None
        steps = meta.get("predicted_decomposition")
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise DataError(
                source, row["qid"], "meta.predicted_decomposition",
                "missing or not a list of strings; prepare StrategyQA with its 'decompositions' file",
            )  # fmt: skip
        return steps
    raise ValueError(f"unknown query kind {kind!r}; valid: {', '.join(QUERY_KINDS)}")


def decomposed_search(
    rows: Iterable[Mapping[str, Any]], kind: str, search: SearchFn, k: int = 10, source: str = "queries"
) -> tuple[Results, list[dict[str, Any]]]:
    """Merged top-k per question, and a log of every step query (sent, or why not)."""
    log: list[dict[str, Any]] = []
    step_queries: list[QueryText] = []
    owner: dict[str, str] = {}
    qids: list[str] = []
    for row in rows:
        qid = row["qid"]
        qids.append(qid)
        steps = steps_of(row, kind, source)
        sent = 0
        for i, step in enumerate(steps):
            text = strip_stop_words(step)
            status = "sent" if text else "empty_after_stop_words"
            log.append({"qid": qid, "step": i, "original": step, "query": text, "status": status})
            if text:
                step_qid = f"{qid}#{i}"
                owner[step_qid] = qid
                step_queries.append((step_qid, text))
                sent += 1
        if not sent:
            log.append(
                {"qid": qid, "step": -1, "original": "", "query": "",
                 "status": "no_steps" if not steps else "all_steps_empty"}
            )  # fmt: skip
    per_step = search(step_queries, k) if step_queries else {}
    best: dict[str, dict[str, float]] = {qid: {} for qid in qids}
    for step_qid, pairs in per_step.items():
        merged = best[owner[step_qid]]
        for docid, score in pairs:
            if score > merged.get(docid, float("-inf")):
                merged[docid] = score
    return {qid: rank(docs.items(), k) for qid, docs in best.items()}, log
