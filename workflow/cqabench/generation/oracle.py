"""The oracle setting's context: every gold document of a question, optionally with distractors.

Pure functions over docids; `cqabench.generation.cell_inputs` reads the qrels and the corpus.

`oracle_contexts(qids, gold, distractors, seed)` gives, per selected question, the docids to
show. With `distractors == 0` that is exactly the question's gold documents in qrels order
(first occurrence of each). With `distractors = d > 0` it adds, as the TANQ paper describes,
"randomly chosen proofs of other questions as distractors": d documents drawn from the pool of
gold documents of the *other* questions of the split, never one of the question's own gold
documents and never twice. The result mixes them into the gold ones at random positions.

Reproducibility. Every random choice is a SHA-256 of `"{seed}|{qid}|{purpose}|{n}"`, so the
context of a question depends only on the config seed, its qid and the split's gold mapping:
not on which or how many questions are selected, nor on their order, nor on Python's `random`
implementation or hash seed. For that, `gold` must hold the gold documents of **every**
question of the split (qid -> ordered docids, as `cell_inputs.gold_docids` builds from all qrels
qids), not only of the selected questions; the pool is drawn from it.

- Pool of question q: the sorted set of every docid in `gold` minus q's own gold docids.
- Draws: candidate k (k = 0, 1, ...) is pool-universe index `H(seed, q, "draw", k) mod |U|`
  over the sorted universe U of all gold docids; a candidate that is q's own gold document or
  already drawn is skipped, until d are drawn (all of the pool, in draw order, when it holds d
  documents or fewer). So the distractors for d are the first d of those for d + 1.
- Positions: of the n = |gold| + d slots, the d with the smallest `H(seed, q, "slot", i)` take
  the distractors (in draw order); the others take the gold documents in qrels order. So gold
  documents keep their relative order (the qrels order, e.g. TANQ's answer-row order) but no
  position tells gold from distractor.

A question without gold documents gets [] (nothing to mix into); `questions_without_evidence`
lists those so the caller can leave them out of the cell and say how many, and refuses a cell
where no selected question has gold evidence.

What the gold documents are follows the dataset's relevance mode (`datasets.<ds>.relevance`),
since they are read from the qrels `prepare` wrote in that mode: in mode `paper` every
paragraph the dataset pairs with the question (MuSiQue's 20, 2Wiki's 10 context paragraphs,
DEXTER §3.1 and its toolkit), in mode `supporting` only the supporting ones.

Context sources (`generation.oracle_context`, recorded as the `context_source` of every row):
`gold` (the default) is the above. `facts` is StrategyQA's only offline evidence text: the
facts its annotators wrote while answering (the `facts` column of queries.parquet), one context
entry per fact, in the annotators' order. Those are not the paper's gold paragraphs (the
paragraph file is not in the sample), so a facts oracle is never reported as one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from cqabench.common.errors import ConfigError

CONTEXT_SOURCES = {
    "gold": "the question's gold documents from qrels (which ones: datasets.<ds>.relevance)",
    "facts": "the annotators' facts of the question (StrategyQA), not gold paragraphs",
}
FACTS_DATASETS = ("strategyqa",)  # the datasets whose queries carry annotators' facts


def _h(seed: int | str, qid: str, purpose: str, item: object) -> int:
    """A 256-bit integer fixed by (seed, qid, purpose, item)."""
    digest = hashlib.sha256(f"{seed}|{qid}|{purpose}|{item}".encode()).digest()
    return int.from_bytes(digest, "big")


def _unique(values: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(values))


def distractors_for(
    qid: str,
    own: Sequence[str],
    universe: Sequence[str],
    distractors: int,
    seed: int | str = 0,
    universe_set: set[str] | frozenset[str] | None = None,
) -> list[str]:
    """`distractors` docids of `universe` (sorted, unique: every gold docid of the split) not in
    `own`, drawn for `qid` as the module docstring says; fewer when the pool is smaller.
    `universe_set` (the same docids as a set) spares rebuilding it per question."""
    if distractors <= 0:
        return []
    members = universe_set if universe_set is not None else set(universe)
    own_set = set(own)
    pool_size = len(universe) - sum(1 for d in own_set if d in members)
    target = min(distractors, pool_size)
    drawn: list[str] = []
    seen: set[str] = set()
    limit = 64 * len(universe) + 1024  # a safety net; the draws hit every index long before
    k = 0
    while len(drawn) < target and k < limit:
        doc = universe[_h(seed, qid, "draw", k) % len(universe)]
        k += 1
        if doc in own_set or doc in seen:
            continue
        seen.add(doc)
        drawn.append(doc)
    if len(drawn) < target:
        rest = sorted(
            (d for d in universe if d not in own_set and d not in seen), key=lambda d: _h(seed, qid, "rank", d)
        )
        drawn.extend(rest[: target - len(drawn)])
    return drawn


def mix(qid: str, gold: Sequence[str], extra: Sequence[str], seed: int | str = 0) -> list[str]:
    """Gold docids (order kept) and `extra` docids (order kept) interleaved at seeded slots."""
    n = len(gold) + len(extra)
    slots = set(sorted(range(n), key=lambda i: _h(seed, qid, "slot", i))[: len(extra)])
    g, e = iter(gold), iter(extra)
    return [next(e) if i in slots else next(g) for i in range(n)]


def oracle_contexts(
    qids: Sequence[str], gold: Mapping[str, Sequence[str]], distractors: int = 0, seed: int | str = 0
) -> dict[str, list[str]]:
    """qid -> docids to show, for each selected qid (see the module docstring).

    `gold`: qid -> ordered gold docids for every question of the split (a selected qid absent
    from it has no gold). `distractors`: how many other questions' gold documents to add to
    each question (0: the gold documents only). Raises ConfigError for a negative count.
    """
    if isinstance(distractors, bool) or not isinstance(distractors, int) or distractors < 0:
        raise ConfigError(f"oracle distractors must be an integer >= 0, got {distractors!r}")
    universe_set = {d for docs in gold.values() for d in docs}
    universe = sorted(universe_set)
    out: dict[str, list[str]] = {}
    for qid in qids:
        own = _unique(list(gold.get(qid) or []))
        if not own:
            out[qid] = []
            continue
        out[qid] = mix(qid, own, distractors_for(qid, own, universe, distractors, seed, universe_set), seed)
    return out


def questions_without_evidence(
    dataset: str, split: str, qids: Sequence[str], gold: Mapping[str, Sequence[str]], reason: str = ""
) -> list[str]:
    """The selected qids with no gold document (selection order), for the caller to leave out.

    Raises ConfigError, naming the dataset and split, when no question is selected or none of
    the selected ones has gold evidence: an oracle cell would then show no document to any
    question, i.e. be the closed-book cell under another name. `reason` (e.g. what
    `datasets.has_gold_evidence` said) is added to the message.
    """
    selected = _unique(list(qids))
    without = [q for q in selected if not gold.get(q)]
    why = f" ({reason})" if reason else ""
    if not selected:
        raise ConfigError(f"{dataset}/{split}: setting oracle has no selected question to give gold evidence to")
    if len(without) == len(selected):
        raise ConfigError(
            f"{dataset}/{split} has no gold evidence for setting oracle: none of the {len(selected)} selected "
            f"question(s) has a gold document (qrels){why}; drop 'oracle' from this dataset's settings "
            "or configure raw files that carry the evidence"
        )
    return without


def facts_contexts(
    queries: Any, questions: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]], list[str]]:
    """The `facts` oracle context of the selected `questions` ({qid, ...} rows of `queries`, a
    queries.parquet table with a `facts` column): (qid -> context ids, id -> context entry,
    qids without facts). An entry is one fact, id `<qid>/facts/<i>`, no title; a question whose
    facts are empty is listed, for the caller to leave out (as gold-less questions are).
    Raises ConfigError when the table has no `facts` column or no selected question has facts."""
    if "facts" not in queries.column_names:
        raise ConfigError("oracle context facts needs the `facts` column of queries.parquet (StrategyQA)")
    by_qid = dict(zip(queries.column("qid").to_pylist(), queries.column("facts").to_pylist()))
    docs_for: dict[str, list[str]] = {}
    entries: dict[str, dict[str, Any]] = {}
    without: list[str] = []
    for q in questions:
        facts = [f.strip() for f in by_qid.get(q["qid"]) or [] if isinstance(f, str) and f.strip()]
        if not facts:
            without.append(q["qid"])
            continue
        ids = [f"{q['qid']}/facts/{i}" for i in range(len(facts))]
        docs_for[q["qid"]] = ids
        entries.update({d: {"docid": d, "title": "", "text": f, "kind": "text"} for d, f in zip(ids, facts)})
    if questions and len(without) == len(questions):
        raise ConfigError(f"oracle context facts: none of the {len(questions)} selected question(s) has facts")
    return docs_for, entries, without
