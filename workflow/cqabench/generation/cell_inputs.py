"""A cell's input files read into what its prompts are built from: questions and their documents.

The queries give the questions (the first `max_questions`, in file order); the setting decides
each question's documents: none (closed), the run's top k (rag), the qrels' gold documents or
StrategyQA's annotators' facts (oracle, `cqabench.generation.oracle`). Only the documents the
prompts need are read from the corpus. Open-book cells read their tool corpus in
`cqabench.generation.open_book` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cqabench.common.errors import ConfigError, DataError
from cqabench.common.io import read_parquet
from cqabench.generation import oracle
from cqabench.generation.cell import Cell, CellInputs, CellOptions
from cqabench.retrieval.runs import ranked, read_run

log = logging.getLogger(__name__)


def select_questions(queries: pa.Table, max_questions: int | None) -> list[dict[str, Any]]:
    """The first `max_questions` questions in file order: an explicit, stable cap."""
    rows = queries.select(["qid", "question"]).to_pylist()
    return rows if max_questions is None else rows[:max_questions]


def read_questions(inputs: CellInputs, options: CellOptions) -> list[dict[str, Any]]:
    """The cell's questions: `select_questions` of its queries file."""
    return select_questions(read_parquet(inputs.queries), options.max_questions)


def gold_docids(qrels: pa.Table, qids: set[str]) -> dict[str, list[str]]:
    """Relevant docids per question, first-seen order, each once even if several annotators list it."""
    out: dict[str, list[str]] = {q: [] for q in qids}
    cols = qrels.select(["qid", "docid", "relevance"]).to_pydict()
    for qid, docid, rel in zip(cols["qid"], cols["docid"], cols["relevance"]):
        if qid in out and rel > 0 and docid not in out[qid]:
            out[qid].append(docid)
    return out


def retrieved_docids(run_path: Path, qids: set[str], k: int) -> dict[str, list[str]]:
    """Top-k per question from a run file; a question the run lacks gets no documents (logged).

    A run ranking fewer than k documents for every question (an external run, whose depth the
    planner cannot know) is refused: each row would say k while giving fewer. A question with
    a shorter ranking than k gets what the run has; its row's `n_docs` records how many.
    """
    run = read_run(run_path)
    deepest = max((len(docs) for docs in run.values()), default=0)
    if run and deepest < k:
        raise DataError(
            run_path,
            None,
            "k",
            f"the run ranks at most {deepest} document(s) per question, fewer than "
            f"k = {k}: every row would say k = {k}; use a k <= {deepest} or a deeper run",
        )
    top = ranked({q: d for q, d in run.items() if q in qids}, k)
    missing = sorted(qids - set(top))
    if missing:
        log.warning(
            "%s has no ranking for %d question(s), e.g. %s: they get no context", run_path, len(missing), missing[0]
        )
    return {q: [docid for docid, _ in top.get(q, [])] for q in qids}


def load_documents(corpus_path: Path, docids: set[str]) -> dict[str, dict[str, Any]]:
    """Only the needed rows of a (possibly pooled, large) corpus, via a Parquet filter."""
    if not docids:
        return {}
    table = pq.read_table(corpus_path, filters=[("docid", "in", sorted(docids))])
    docs = {row["docid"]: row for row in table.to_pylist()}
    absent = sorted(docids - set(docs))
    if absent:
        raise DataError(
            corpus_path, absent[0], "docid", f"{len(absent)} document(s) named by the run/qrels are not in the corpus"
        )
    return docs


@dataclass
class CellContext:
    """What a closed, rag or oracle cell's prompts are built from."""

    questions: list[dict[str, Any]]  # the selected ones, less those without evidence
    docs_for: dict[str, list[str]]  # qid -> the docids its prompt shows, in order
    documents: Mapping[str, Mapping[str, Any]]  # docid -> corpus row (or oracle fact entry)
    without_evidence: list[str]  # oracle: selected questions left out for lack of gold documents


def read_context(cell: Cell, inputs: CellInputs, options: CellOptions, questions: list[dict[str, Any]]) -> CellContext:
    """Each selected question's documents under the cell's setting, and those documents' rows."""
    qids = {q["qid"] for q in questions}
    without_evidence: list[str] = []
    fact_docs: dict[str, dict[str, Any]] = {}  # oracle context facts: the context entries themselves
    if cell.setting == "closed":
        docs_for: dict[str, list[str]] = {q: [] for q in qids}
    elif cell.setting == "oracle" and options.oracle_context == "facts":
        docs_for, fact_docs, without_evidence = oracle.facts_contexts(read_parquet(inputs.queries), questions)
        _warn_left_out(cell, "oracle (facts)", "have no facts", without_evidence, questions)
        questions = [q for q in questions if q["qid"] not in set(without_evidence)]
    elif cell.setting == "oracle":
        questions, docs_for, without_evidence = _gold_contexts(cell, inputs, options, questions)
    else:
        if inputs.run is None:
            raise ConfigError("setting rag needs --run")
        docs_for = retrieved_docids(inputs.run, qids, cell.k)
    documents = fact_docs if fact_docs else _corpus_documents(cell, inputs, docs_for)
    return CellContext(questions, docs_for, documents, without_evidence)


def _gold_contexts(
    cell: Cell,
    inputs: CellInputs,
    options: CellOptions,
    questions: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, list[str]], list[str]]:
    """Oracle with gold documents: (questions kept, their contexts, questions without a gold document)."""
    if options.oracle_context != "gold":
        raise ConfigError(f"oracle context {options.oracle_context!r} is not one of {list(oracle.CONTEXT_SOURCES)}")
    if inputs.qrels is None:
        raise ConfigError("setting oracle needs --qrels")
    qrels = read_parquet(inputs.qrels)
    gold = gold_docids(qrels, set(qrels.column("qid").to_pylist()) | {q["qid"] for q in questions})
    without_evidence = oracle.questions_without_evidence(cell.dataset, cell.split, [q["qid"] for q in questions], gold)
    _warn_left_out(cell, "oracle", "have no gold document", without_evidence, questions)
    questions = [q for q in questions if q["qid"] not in set(without_evidence)]
    docs_for = oracle.oracle_contexts(
        [q["qid"] for q in questions], gold, options.oracle_distractors, options.oracle_seed
    )
    return questions, docs_for, without_evidence


def _warn_left_out(cell: Cell, what: str, lacking: str, left_out: list[str], questions: list[dict[str, Any]]) -> None:
    if left_out:
        log.warning(
            "%s/%s %s: %d of %d question(s) %s and are left out, e.g. %s",
            cell.dataset,
            cell.split,
            what,
            len(left_out),
            len(questions),
            lacking,
            left_out[0],
        )


def _corpus_documents(cell: Cell, inputs: CellInputs, docs_for: Mapping[str, list[str]]) -> dict[str, dict[str, Any]]:
    """The corpus rows the contexts name (none for a closed-book cell)."""
    needed = {d for ids in docs_for.values() for d in ids}
    if not needed:
        return {}
    if inputs.corpus is None:
        raise ConfigError(f"setting {cell.setting} needs --corpus")
    return load_documents(inputs.corpus, needed)
