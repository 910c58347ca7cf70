"""What `cqabench evaluate` and `evaluate-generation` do: score predictions against a prepared split.

Kept apart from `cqabench.commands.evaluation` (which only declares the arguments) because it
imports pandas, pyarrow and scipy: every `cqabench` command builds the whole parser, and a
job that does not score anything should not pay those imports (about a second per job).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cqabench.common.errors import DataError
from cqabench.common.io import atomic_files, read_parquet, write_jsonl
from cqabench.data.datasets.common import read_json, read_jsonl
from cqabench.evaluation.scoring import failed_qids, format_summary, score_predictions, tanq_failure_records

log = logging.getLogger(__name__)

PER_QUESTION_SCHEMA = pa.schema(
    [("qid", pa.string()), ("metric", pa.string()), ("variant", pa.string()), ("value", pa.float64())]
)


def read_predictions_jsonl(path: Path) -> pd.DataFrame:
    """qid + prediction per line; a list prediction (AmbigQA answers) is joined one per line."""
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for lineno, obj in read_jsonl(path):
        rec = f"line {lineno}"
        if "qid" not in obj:
            raise DataError(path, rec, "qid", "missing")
        qid = obj["qid"]
        if isinstance(qid, bool) or not isinstance(qid, (str, int)):
            raise DataError(path, rec, "qid", f"expected a string, got {type(qid).__name__}")
        qid = str(qid)
        if qid in seen:
            raise DataError(path, rec, "qid", f"duplicate qid {qid!r} (first on line {seen[qid]})")
        seen[qid] = lineno
        if "prediction" not in obj:
            raise DataError(path, rec, "prediction", "missing")
        pred = obj["prediction"]
        if isinstance(pred, list) and all(isinstance(p, str) for p in pred):
            pred = "\n".join(pred)
        elif isinstance(pred, (int, float)) and not isinstance(pred, bool):
            pred = str(pred)
        elif pred is not None and not isinstance(pred, str):
            raise DataError(path, rec, "prediction", f"expected a string, got {type(pred).__name__}")
        rows.append({"qid": qid, "prediction": pred, "line": lineno})
    return pd.DataFrame(rows, columns=["qid", "prediction", "line"])


def _read_table(path: Path, name: str) -> pa.Table:
    """A prepared Parquet table; a missing file, a folder or a file that is no Parquet is a DataError naming it."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, None, "-", f"{name} file not found")
    if path.is_dir():
        raise DataError(path, None, "-", f"{name}: is a directory, not a Parquet file")
    try:
        return read_parquet(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(path, None, "-", f"{name}: not a readable Parquet file ({exc})") from None


def _missing_predictions(preds: pd.DataFrame, answers: pa.Table, path: Path) -> list[str]:
    """Questions of the split without a prediction: scored as wrong (the split is the
    denominator), so said loudly rather than silently lowering the score."""
    have = set(preds["qid"])
    missing = [q for q in answers.column("qid").to_pylist() if q not in have]
    if missing:
        shown = ", ".join(repr(q) for q in missing[:5]) + (", ..." if len(missing) > 5 else "")
        log.warning(
            "%s: %d of %d questions of the split have no prediction and are scored as wrong: %s",
            path,
            len(missing),
            answers.num_rows,
            shown,
        )
    return missing


def _check_unknown(preds: pd.DataFrame, answers: pa.Table, path: Path) -> None:
    known = set(answers.column("qid").to_pylist())
    for row in preds.itertuples():
        if row.qid not in known:
            raise DataError(path, f"line {row.line}", "qid", f"{row.qid!r} is not a question of this split")


def _write(
    summary: list[dict[str, Any]],
    per_question: pd.DataFrame,
    cell: dict[str, Any],
    provenance: dict[str, Any],
    out_json: Path | None,
    out_pq: Path | None,
    failed: list[str] | None = None,
    answers: dict[str, Any] | None = None,
) -> None:
    """Both outputs as one (io.atomic_files): a failure never leaves a metrics.json without its per-question table."""
    targets = {k: p for k, p in (("pq", out_pq), ("json", out_json)) if p is not None}
    if not targets:
        return
    with atomic_files(targets) as tmp:
        if "pq" in tmp:
            pq.write_table(
                pa.Table.from_pandas(per_question, schema=PER_QUESTION_SCHEMA, preserve_index=False), tmp["pq"]
            )
        if "json" in tmp:
            doc = {"cell": cell, "metrics": summary, "provenance": provenance}
            if failed is not None:  # generation cells: the questions left out of every mean (n_failed)
                doc["failed_qids"] = failed
            if answers is not None:  # generation cells: how the predictions spread (cqabench.evaluation.answer_spread)
                doc["answers"] = answers
            tmp["json"].write_text(
                json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
            )


def run_evaluate(args: argparse.Namespace) -> int:
    start = time.monotonic()
    split_dir = Path(args.data_dir) / args.dataset / args.split
    queries = _read_table(split_dir / "queries.parquet", "queries")
    answers = _read_table(split_dir / "answers.parquet", "answers")
    preds = read_predictions_jsonl(args.predictions)
    if preds.empty:
        raise DataError(args.predictions, None, "-", "no predictions in the file (empty, or only blank lines)")
    _check_unknown(preds, answers, args.predictions)
    missing = _missing_predictions(preds, answers, args.predictions)
    summary, per_question = score_predictions(
        args.dataset, queries, answers, preds.drop(columns=["line"]), prompt=args.prompt, source=str(args.predictions)
    )
    print(format_summary(summary))
    cell = {
        "stage": "generation",
        "dataset": args.dataset,
        "split": args.split,
        "predictions": str(args.predictions),
        "prompt": args.prompt or "",
    }
    provenance = {
        "wall_time_s": round(time.monotonic() - start, 3),
        "n_predictions": len(preds),
        "n_missing_predictions": len(missing),
    }
    _write(summary, per_question, cell, provenance, args.out, args.out_per_question)
    return 0


def generation_provenance(preds: pd.DataFrame) -> dict[str, Any]:
    """Totals of the generation job's cost columns, where the predictions table has them."""
    out: dict[str, Any] = {"n_predictions": len(preds)}
    for col in ("prompt_tokens", "output_tokens", "wall_time_s"):
        if col in preds.columns:
            out[col] = float(pd.to_numeric(preds[col], errors="coerce").fillna(0).sum())
            if col != "wall_time_s":
                out[col] = int(out[col])
    if "parse_ok" in preds.columns:
        out["parse_failures"] = int((~preds["parse_ok"].astype(bool)).sum())
    out.update(docs_given(preds))
    return out


def docs_given(preds: pd.DataFrame) -> dict[str, Any]:
    """docs_given_min/mean/max: the documents the prompts actually gave per question, so a RAG@k
    cell whose run ranked fewer than k for some question says so (`n_docs`, else the length of
    `context_docids` in predictions written before `n_docs` existed); {} when neither is there."""
    if "n_docs" in preds.columns:
        counts = pd.to_numeric(preds["n_docs"], errors="coerce").dropna()
    elif "context_docids" in preds.columns:
        counts = preds["context_docids"].map(lambda ids: 0 if ids is None else len(ids))
    else:
        return {}
    if counts.empty:
        return {}
    return {
        "docs_given_min": int(counts.min()),
        "docs_given_mean": float(counts.mean()),
        "docs_given_max": int(counts.max()),
    }


def from_generation_summary(path: Path | None) -> dict[str, Any]:
    """This job's commit plus what the generating job recorded in its summary.json.

    Without a summary the package versions stay unrecorded rather than borrowed from this
    process, which is not the environment that generated the answers.
    """
    from cqabench.common.provenance import git_commit
    from cqabench.evaluation.cell_provenance import generation_summary_provenance

    out: dict[str, Any] = {"git_commit": git_commit()}
    if path is None:
        return out
    doc = read_json(Path(path))  # unreadable, non-UTF-8 or broken JSON: a DataError naming the file
    if not isinstance(doc, dict):
        raise DataError(path, None, "(file)", "expected a JSON object")
    out.update(generation_summary_provenance(doc))
    return out


def _cell_predictions_and_answers(args: argparse.Namespace) -> tuple[pd.DataFrame, pa.Table]:
    """A cell's predictions and the answers of exactly the questions it was asked.

    A generation cell holds a row for every question it was asked (failures included), so its
    questions are exactly the scored set; questions left out by an explicit `max_questions` cap
    were never asked and must not count as wrong.
    """
    preds_table = _read_table(args.predictions, "predictions")
    for col in ("qid", "prediction"):
        if col not in preds_table.column_names:
            raise DataError(args.predictions, None, col, "column missing")
    preds = preds_table.to_pandas()
    answers = _read_table(args.answers, "answers")
    asked = pa.array(preds["qid"].astype(str).unique())
    return preds, answers.filter(pc.is_in(answers["qid"], value_set=asked))


def spread_of(preds: pd.DataFrame, failed: list[str]) -> dict[str, Any]:
    """cqabench.evaluation.answer_spread over the cell's scored predictions (its failed items left out)."""
    from cqabench.evaluation.answer_spread import answer_spread

    scored = preds[~preds["qid"].astype(str).isin(set(failed))]
    parse_ok = scored["parse_ok"].astype(bool).tolist() if "parse_ok" in scored.columns else [True] * len(scored)
    return answer_spread(scored["prediction"].tolist(), parse_ok)


def run_evaluate_generation(args: argparse.Namespace, cell: dict[str, Any]) -> int:
    """Score a generation cell's predictions; `cell` names it in metrics.json (Plan.generation_cell)."""
    preds, answers = _cell_predictions_and_answers(args)
    queries = _read_table(args.queries, "queries")
    keep = [c for c in ("qid", "prediction", "parse_ok", "parse_reason", "finish_reason") if c in preds.columns]
    summary, per_question = score_predictions(args.dataset, queries, answers, preds[keep], source=str(args.predictions))
    print(format_summary(summary))
    failed = failed_qids(preds[keep])
    if failed:
        log.warning(
            "%s: %d question(s) whose generation failed are left out of every mean (n_failed): %s",
            args.predictions,
            len(failed),
            ", ".join(failed[:10]),
        )
    cell = {"stage": "generation", "dataset": args.dataset, **cell}
    provenance = {**generation_provenance(preds), **from_generation_summary(getattr(args, "summary", None))}
    answers = spread_of(preds[keep], failed)
    from cqabench.evaluation.answer_spread import describe

    for line in describe(answers, str(cell.get("llm") or "the model")):
        log.warning("%s: %s", args.predictions, line)
    _write(summary, per_question, cell, provenance, args.out_json, args.out_per_question, failed, answers)
    return 0


def run_tanq_failures(args: argparse.Namespace) -> int:
    """Print (and with --out write as JSONL) each TANQ question's failure categories and why."""
    preds, answers = _cell_predictions_and_answers(args)
    if "table_header" not in answers.column_names:
        raise DataError(args.answers, None, "table_header", "column missing: not a TANQ answers file")
    keep = [c for c in ("qid", "prediction", "parse_ok", "parse_reason") if c in preds.columns]
    rows = tanq_failure_records(answers, preds[keep], source=str(args.predictions))
    for r in rows:
        why = [f"{k}={r[k]}" for k in ("missing_relations", "extra_relations", "wrong_cells", "partial_cells") if r[k]]
        if r["missing_entities"]:
            why.append(f"missing_entities={len(r['missing_entities'])}")
        print(f"{r['qid']}\t{','.join(r['categories']) or '-'}\t{' '.join(why)}")
    if args.out is not None:
        write_jsonl(rows, args.out)
    return 0
