"""Retrieval metrics: trec_eval measures through pytrec_eval, and StrategyQA Recall@10.

Every choice that moves a number is a switch recorded in the metrics.json cell:

* identical ids: a retrieved document whose id equals the query id is dropped before scoring
  when `drop_identical_ids` (BEIR's default, for corpora that contain the queries).
* empty results: a query with qrels but nothing retrieved (or absent from the run) scores 0 on
  every measure and stays in the mean. BEIR drops such queries silently (pytrec_eval returns
  nothing for them), which inflates the mean; we do not.
* queries without relevant qrels (no qrel with relevance > 0) are excluded from the mean, as
  trec_eval does; their count is reported.
* ties: pytrec_eval orders by score, then docid descending (trec_eval's rule, checked in
  tests/evaluation/test_retrieval_metrics.py); our run files are ranked the same way.

Values are fractions in 0..1 (every metrics.json entry carries `"unit": "fraction"`). A measure
with no evaluable query is not 0 but null, with the reason (shown as "n/a" by the report):

* trec_eval measures: not evaluable when no query of the split has a relevant qrel (qrels empty,
  e.g. the AmbigQA light sample), or, when the searched corpus is given, when no relevant
  qrel's document is in it.
* StrategyQA Recall@10: a gold paragraph id counts only if it is a document of the split's
  qrels (the loader writes a qrel for every evidence id it found in the paragraphs file) and,
  when the searched corpus is given, also a document of that corpus. Annotators are scored on
  those ids; a question whose annotators name ids but none of them counts is not evaluable and
  left out of the mean (counted in `strategyqa_questions_gold_not_in_corpus`); a question with
  no evidence id at all (only operation / no_evidence steps) scores 0 and stays in the mean, as
  before. When no question is evaluable (the sample: no StrategyQA paragraphs, qrels empty)
  Recall@10 is null with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from cqabench.common.errors import DataError
from cqabench.data.qrels import qrels_from_rows
from cqabench.retrieval.base import rank

Run = dict[str, dict[str, float]]

CUTOFFS: dict[str, tuple[int, ...]] = {
    "ndcg_cut": (1, 3, 5, 10, 100),
    "recall": (10, 20, 100),
    "map_cut": (100,),
    "P": (1, 10),
}
TREC_VARIANT = "trec_eval"
STRATEGYQA_VARIANT = "strategyqa_best_annotator"
PER_QUERY_SCHEMA = pa.schema(
    [("qid", pa.string()), ("metric", pa.string()), ("variant", pa.string()), ("value", pa.float64())]
)
POLICIES = {
    "empty_result_policy": "zero_kept_in_mean",
    "no_qrels_policy": "excluded_from_mean",
    "tie_policy": "trec_eval_score_desc_docid_desc",
}
UNIT = "fraction"
NO_RELEVANT_QRELS = "no query of the split has a relevant qrel (qrels empty): nothing to evaluate"
QRELS_NOT_IN_CORPUS = "no relevant qrel's document is in the searched corpus"
NO_GOLD_IN_CORPUS = (
    "no gold evidence paragraph of the split is in the searched corpus (StrategyQA paragraphs not loaded: qrels empty)"
)


def measure_names(cutoffs: Mapping[str, Sequence[int]] = CUTOFFS) -> list[str]:
    """pytrec_eval's result keys, e.g. ndcg_cut_10, recall_100, P_1."""
    return [f"{name}_{k}" for name, ks in cutoffs.items() for k in ks]


@dataclass
class Evaluation:
    per_query: dict[str, dict[str, float]]  # qid -> measure -> value (only evaluated queries)
    counts: dict[str, int] = field(default_factory=dict)


def drop_identical(run: Mapping[str, Mapping[str, float]]) -> tuple[Run, int]:
    """The run without documents named like their query, and how many were removed."""
    dropped = 0
    out: Run = {}
    for qid, docs in run.items():
        out[qid] = {d: s for d, s in docs.items() if d != qid}
        dropped += len(docs) - len(out[qid])
    return out, dropped


def judged_queries(qrels: Mapping[str, Mapping[str, int]]) -> list[str]:
    return sorted(qid for qid, docs in qrels.items() if any(r > 0 for r in docs.values()))


def evaluate(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, int]],
    drop_identical_ids: bool = True,
    cutoffs: Mapping[str, Sequence[int]] = CUTOFFS,
) -> Evaluation:
    """trec_eval measures per query over the queries that have a relevant document."""
    counts = {"identical_ids_dropped": 0}
    run = {q: dict(d) for q, d in run.items()}
    if drop_identical_ids:
        run, counts["identical_ids_dropped"] = drop_identical(run)
    judged = judged_queries(qrels)
    counts["queries_evaluated"] = len(judged)
    counts["queries_without_relevant_qrels"] = len(qrels) - len(judged)
    counts["run_queries_without_qrels"] = len(set(run) - set(qrels))
    counts["queries_with_empty_result"] = sum(1 for q in judged if not run.get(q))
    if not judged:
        return Evaluation({}, counts)
    import pytrec_eval  # here, not at the top: the data stage's env reads qrels without it (cqabench.data.beir)

    measures = {f"{name}.{','.join(str(k) for k in ks)}" for name, ks in cutoffs.items()}
    evaluator = pytrec_eval.RelevanceEvaluator({q: dict(qrels[q]) for q in judged}, measures)
    # An empty dict makes pytrec_eval score the query (all zeros) instead of skipping it.
    scored = evaluator.evaluate({q: run.get(q, {}) for q in judged})
    names = measure_names(cutoffs)
    per_query = {q: {m: float(scored[q][m]) for m in names} for q in judged}
    return Evaluation(per_query, counts)


def best_annotator_recall(
    ranking: Sequence[str],
    evidence: Sequence[Sequence[Sequence[str]]],
    k: int = 10,
    known: Container[str] | None = None,
) -> float | None:
    """StrategyQA Recall@k for one question.

    Per annotator the gold set is every paragraph id named in any of that annotator's steps
    (only ids in `known`, when given: the documents that exist in the searched corpus); recall
    is the share of that set found among the first k retrieved ids. The question gets its best
    annotator's recall. An annotator with no paragraph ids (only "operation" / "no_evidence"
    steps) has no recall and is skipped; a question with no annotator left scores 0. A question
    whose annotators name ids but none of them is `known` is not evaluable: None.
    """
    top = set(ranking[:k])
    best: float | None = None
    named = False
    for steps in evidence:
        gold = {pid for step in steps for pid in step}
        named = named or bool(gold)
        if known is not None:
            gold = {pid for pid in gold if pid in known}
        if not gold:
            continue
        recall = len(gold & top) / len(gold)
        best = recall if best is None else max(best, recall)
    if best is None and named and known is not None:
        return None
    return best if best is not None else 0.0


def strategyqa_recall(
    run: Mapping[str, Mapping[str, float]],
    evidence: Mapping[str, Sequence[Sequence[Sequence[str]]]],
    k: int = 10,
    drop_identical_ids: bool = True,
    known: Container[str] | None = None,
) -> dict[str, float]:
    """Recall@k per evaluable question of `evidence` (retrieved or not; see `best_annotator_recall`).

    With `known` (the gold paragraph ids present in the searched corpus), questions whose gold ids
    are all absent are left out; without it every question is scored.
    """
    if drop_identical_ids:
        run, _ = drop_identical(run)
    out = {}
    for qid, annotators in evidence.items():
        ranking = [docid for docid, _ in rank(run.get(qid, {}).items(), k)]
        value = best_annotator_recall(ranking, annotators, k, known)
        if value is not None:
            out[qid] = value
    return out


def metric_rows(per_query: Mapping[str, Mapping[str, float]], variant: str) -> list[dict[str, Any]]:
    return [
        {"qid": qid, "metric": metric, "variant": variant, "value": float(value)}
        for qid, values in per_query.items()
        for metric, value in values.items()
    ]


def summary(
    per_query: Mapping[str, Mapping[str, float]],
    variant: str,
    names: Sequence[str] | None = None,
    reason: str = NO_RELEVANT_QRELS,
) -> list[dict[str, Any]]:
    """metrics.json entries: the mean of each measure over the queries that have it (fractions).

    Every measure of `names` gets an entry (a measure no query has is null, n 0, with `reason`),
    then any other measure found, sorted.
    """
    found = sorted({m for values in per_query.values() for m in values})
    wanted = list(names) if names is not None else []
    out = []
    for m in wanted + [m for m in found if m not in wanted]:
        values = [v[m] for v in per_query.values() if m in v]
        if values:
            out.append(
                {"metric": m, "variant": variant, "value": sum(values) / len(values), "n": len(values), "unit": UNIT}
            )
        else:
            out.append({"metric": m, "variant": variant, "value": None, "n": 0, "unit": UNIT, "reason": reason})
    return out


def corpus_docids(corpus_path: str | Path) -> set[str]:
    """The document ids of a corpus.parquet (only that column is read)."""
    import pyarrow.parquet as pq

    return {str(d) for d in pq.read_table(corpus_path, columns=["docid"]).column("docid").to_pylist()}


def evaluate_files(
    run_path: str | Path,
    qrels_path: str | Path,
    queries_path: str | Path,
    cell: Mapping[str, Any],
    out_json: str | Path,
    out_per_query: str | Path,
    drop_identical_ids: bool = True,
    with_strategyqa_recall: bool = False,
    corpus_path: str | Path | None = None,
) -> dict[str, Any]:
    """One retrieval cell: metrics.json (means + policies) and per_query.parquet (qid, metric, variant, value).

    `corpus_path` (optional): the corpus the run searched; qrels / gold paragraphs outside it are
    not evaluable (see the module docstring). Without it the qrels alone decide.
    """
    from cqabench.common.io import read_parquet, write_json, write_parquet
    from cqabench.common.provenance import job_provenance
    from cqabench.models.provenance import retriever_model
    from cqabench.retrieval.runs import read_run

    started = time.perf_counter()
    run = read_run(run_path)
    qrels = qrels_from_rows(read_parquet(qrels_path).to_pylist())
    queries = read_parquet(queries_path).select(["qid", "evidence"]).to_pylist()
    unknown = sorted(set(run) - {q["qid"] for q in queries})
    if unknown:
        raise DataError(run_path, unknown[0], "qid", f"{len(unknown)} run query id(s) are not in {queries_path}")
    in_corpus = corpus_docids(corpus_path) if corpus_path is not None else None
    reason = NO_RELEVANT_QRELS
    if in_corpus is not None and judged_queries(qrels):
        relevant = {d for docs in qrels.values() for d, r in docs.items() if r > 0}
        if not relevant & in_corpus:
            reason = QRELS_NOT_IN_CORPUS
            qrels = {}
    result = evaluate(run, qrels, drop_identical_ids)
    entries = summary(result.per_query, TREC_VARIANT, measure_names(), reason)
    rows = metric_rows(result.per_query, TREC_VARIANT)
    if with_strategyqa_recall:
        known = {d for docs in qrels.values() for d in docs}
        if in_corpus is not None:
            known &= in_corpus
        evidence = {q["qid"]: q["evidence"] or [] for q in queries}
        has_ids = {qid for qid, ann in evidence.items() if any(p for steps in ann for step in steps for p in step)}
        recall = strategyqa_recall(run, evidence, 10, drop_identical_ids, known) if known else {}
        per_question = {qid: {"recall_10": value} for qid, value in recall.items()}
        entries += summary(per_question, STRATEGYQA_VARIANT, ["recall_10"], NO_GOLD_IN_CORPUS)
        rows += metric_rows(per_question, STRATEGYQA_VARIANT)
        result.counts["strategyqa_questions_without_evidence"] = len(evidence) - len(has_ids)
        result.counts["strategyqa_questions_gold_not_in_corpus"] = len(has_ids - set(recall))
    full_cell = {
        **cell,
        "stage": "retrieval",
        "identical_id_policy": "drop" if drop_identical_ids else "keep",
        **POLICIES,
    }
    document = {
        "cell": full_cell,
        "metrics": entries,
        "provenance": {
            "wall_time_s": round(time.perf_counter() - started, 3),
            **result.counts,
            # this job runs in the retrieval environment, the one that indexed and searched
            **job_provenance(),
            **retriever_model(cell.get("retriever_settings")),
        },
    }
    write_parquet(pa.Table.from_pylist(rows, schema=PER_QUERY_SCHEMA), out_per_query)
    write_json(document, out_json)
    return document
