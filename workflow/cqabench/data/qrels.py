"""Relevance judgments as every stage reads them: {qid: {docid: grade}}.

Several annotators naming one document give one judgment, the highest grade; the metrics and
the exports (BEIR, TREC qrels) merge them the same way, so a tool reading an export scores what
we score.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Qrels = dict[str, dict[str, int]]


def qrels_from_rows(rows: Iterable[Mapping[str, Any]]) -> Qrels:
    """Qrels table rows -> {qid: {docid: relevance}}; several annotators merge, highest grade wins."""
    qrels: Qrels = {}
    for row in rows:
        docs = qrels.setdefault(str(row["qid"]), {})
        docid = str(row["docid"])
        docs[docid] = max(int(row["relevance"]), docs.get(docid, int(row["relevance"])))
    return qrels
