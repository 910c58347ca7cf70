"""Writing one cell: predictions.parquet from its completions, and summary.json's counts.

Each question's row holds the model's raw output, the answer extracted from it
(`cqabench.generation.extraction`), its tokens, latency and whether it came from the item cache,
and the cell's every switch (`PREDICTION_SCHEMA`). An item whose generation failed, or an
open-book dialogue that stopped without a final answer, gets a row whose parse reason says so,
never an answer. The summary counts items, cached, generated and failed ones, tokens and time;
`generation_provenance` is what the generate job records about its own environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from cqabench.common.io import write_parquet
from cqabench.common.provenance import job_provenance
from cqabench.generation.cell import CellOptions
from cqabench.generation.extraction import Extracted, extract_answer
from cqabench.generation.items import PreparedCell
from cqabench.generation.llm import identity_hash
from cqabench.generation.llm.base import Completion, LlmSpec
from cqabench.generation.prompts import chat_hash

PREDICTION_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("prompt_hash", pa.string()),
        ("raw_output", pa.string()),
        ("prediction", pa.string()),
        ("parse_ok", pa.bool_()),
        ("parse_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("latency_s", pa.float64()),
        ("cached", pa.bool_()),
        ("finish_reason", pa.string()),
        ("context_docids", pa.list_(pa.string())),
        ("n_docs", pa.int32()),  # documents the prompt gave (rag: at most k; fewer where the run ranks fewer)
        ("dataset", pa.string()),
        ("split", pa.string()),
        ("serialization", pa.string()),
        ("retriever", pa.string()),
        ("llm", pa.string()),
        ("backend", pa.string()),
        ("dtype", pa.string()),
        ("model_hash", pa.string()),
        ("prompt", pa.string()),
        ("template_hash", pa.string()),
        ("setting", pa.string()),
        ("k", pa.int32()),
        ("sampling", pa.string()),
        ("transcript", pa.string()),  # open-book: JSON {stop_reason, steps}; "" for other settings
    ]
)


class Answer(NamedTuple):
    """One question's outcome before its answer is extracted: an item's completion or a whole dialogue."""

    qid: str
    prompt_hash: str
    text: str
    prompt_tokens: int
    output_tokens: int
    latency_s: float
    cached: bool
    finish_reason: str
    docids: list[str]
    transcript: str  # open-book: the dialogue's JSON; "" for other settings
    failure: str  # why there is no answer ("" when there is one)


def write_cell(
    prepared: PreparedCell,
    spec: LlmSpec,
    identity: Mapping[str, Any],
    completions: Mapping[str, Completion],
    cached_keys: set[str],
    options: CellOptions,
    out_path: Path,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """predictions.parquet of one prepared cell from its completions; returns its summary (the caller
    adds timing and provenance before it writes summary.json)."""
    answers = _item_answers(prepared, completions, cached_keys) + _dialogue_answers(prepared)
    columns = _cell_columns(prepared, spec, identity)
    rows = [_row(a, prepared.cell.dataset, prepared.cell.prompt, columns) for a in answers]
    write_parquet(pa.Table.from_pylist(rows, schema=PREDICTION_SCHEMA), out_path)
    return _summary(prepared, spec, identity, options, rows, extra)


def _item_answers(prepared: PreparedCell, completions: Mapping[str, Completion], cached_keys: set[str]) -> list[Answer]:
    answers = []
    for it in prepared.items:
        comp = completions[it.key]
        answers.append(
            Answer(
                it.qid,
                chat_hash(it.chat),
                comp.text,
                comp.prompt_tokens,
                comp.output_tokens,
                comp.latency_s,
                it.key in cached_keys,
                comp.finish_reason,
                it.docids,
                "",
                f"generation failed: {comp.error}" if comp.error else "",
            )
        )
    return answers


def _dialogue_answers(prepared: PreparedCell) -> list[Answer]:
    answers = []
    for d in prepared.dialogues or []:
        comps = [c for _, c in d.completions]
        # a direct-answer prompt reads a marker-less reply as the answer; a dialogue that was cut
        # off mid-search has not answered (its "Action: X[a | b]" would read as a table row)
        failure = (
            ""
            if d.stop_reason == "final_answer"
            else f"no final answer: the open-book dialogue stopped at {d.stop_reason}"
        )
        if d.stop_reason == "generation_failed":
            failure = f"generation failed: {comps[-1].error}"
        answers.append(
            Answer(
                d.qid,
                chat_hash(d.chat),
                d.final_text,
                sum(c.prompt_tokens for c in comps),
                sum(c.output_tokens for c in comps),
                sum(c.latency_s for c in comps),
                all(step["cached"] for step in d.steps),
                comps[-1].finish_reason if comps else "",
                d.docids,
                d.transcript(),
                failure,
            )
        )
    return answers


def _cell_columns(prepared: PreparedCell, spec: LlmSpec, identity: Mapping[str, Any]) -> dict[str, Any]:
    """The columns every row of the cell shares: its switches, the model and the sampling."""
    cell = prepared.cell
    return {
        "dataset": cell.dataset,
        "split": cell.split,
        "serialization": cell.serialization,
        "retriever": cell.retriever,
        "llm": cell.llm,
        "backend": spec.backend,
        "dtype": spec.dtype,
        "model_hash": identity_hash(identity),
        "prompt": cell.prompt,
        "template_hash": prepared.template.hash,
        "setting": cell.setting,
        "k": cell.k,
        "sampling": prepared.sampling.to_json(),
    }


def _row(a: Answer, dataset: str, prompt: str, cell_columns: Mapping[str, Any]) -> dict[str, Any]:
    """One predictions.parquet row (`PREDICTION_SCHEMA`): the answer extracted, then the cell's columns."""
    ext = Extracted("", False, a.failure) if a.failure else extract_answer(dataset, a.text, prompt)
    return {
        "qid": a.qid,
        "prompt_hash": a.prompt_hash,
        "raw_output": a.text,
        "prediction": ext.answer,
        "parse_ok": bool(ext.ok),
        "parse_reason": ext.reason,
        "prompt_tokens": a.prompt_tokens,
        "output_tokens": a.output_tokens,
        "latency_s": a.latency_s,
        "cached": a.cached,
        "finish_reason": a.finish_reason,
        "context_docids": a.docids,
        "n_docs": len(a.docids),
        **cell_columns,
        "transcript": a.transcript,
    }


def _summary(
    prepared: PreparedCell,
    spec: LlmSpec,
    identity: Mapping[str, Any],
    options: CellOptions,
    rows: list[dict[str, Any]],
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """summary.json's cell, model, sampling and options, and its counts over the rows."""
    cell, template = prepared.cell, prepared.template
    return {
        "cell": {**asdict(cell), "backend": spec.backend, "dtype": spec.dtype, "template_hash": template.hash},
        "model": dict(identity),
        "sampling": prepared.sampling.to_dict(),
        "options": asdict(options),
        "n_items": len(rows),
        "n_cached": sum(r["cached"] for r in rows),
        "n_generated": sum(not r["cached"] and r["finish_reason"] != "failed" for r in rows),
        "n_failed": sum(r["finish_reason"] == "failed" for r in rows),
        # a cell with failed items is incomplete: `cqabench generate` exits non-zero after writing
        # it (docs/generation.md, "Failed items"), and scoring leaves these questions out, counted
        "complete": not any(r["finish_reason"] == "failed" for r in rows),
        "failed_qids": [r["qid"] for r in rows if r["finish_reason"] == "failed"],
        "n_without_evidence": len(prepared.without_evidence),
        "parse_failures": sum(not r["parse_ok"] for r in rows),
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "output_tokens": sum(r["output_tokens"] for r in rows),
        "latency_s": round(sum(r["latency_s"] for r in rows), 3),
        "generated_latency_s": round(sum(r["latency_s"] for r in rows if not r["cached"]), 3),
        **(_open_book_summary(prepared) if prepared.dialogues is not None else {}),
        **extra,
    }


def _open_book_summary(prepared: PreparedCell) -> dict[str, Any]:
    """The loop's limits and what the dialogues did (steps, tool calls, tool errors, how they ended)."""
    dialogues = prepared.dialogues or []
    steps = [s for d in dialogues for s in d.steps]
    stops: dict[str, int] = {}
    for d in dialogues:
        stops[d.stop_reason] = stops.get(d.stop_reason, 0) + 1
    tools: dict[str, int] = {}
    for s in steps:
        if "action" in s:
            tools[s["action"]] = tools.get(s["action"], 0) + 1
    return {
        "open_book": {
            "limits": dialogues[0].ctx.limits.to_dict() if dialogues else {},
            "n_model_calls": len(steps),
            "n_model_calls_generated": sum(not s["cached"] for s in steps),
            "tool_calls": dict(sorted(tools.items())),
            "tool_errors": sum(bool(s.get("tool_error")) for s in steps),
            "stop_reasons": dict(sorted(stops.items())),
        }
    }


def generation_provenance(identity: Mapping[str, Any]) -> dict[str, Any]:
    """The job's environment and the model's hash, recorded in the generation environment (vLLM's
    own venv), not by the jobs that score or aggregate later: those would report their own packages."""
    return {**job_provenance(), "model_hash": identity_hash(identity)}
