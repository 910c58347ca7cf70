"""Scoring a predictions table against a prepared split: which metrics apply, per question and overall.

Every question of the split (every row of answers.parquet) is scored; a question without a
prediction, or whose prediction failed extraction (`parse_ok` False), scores 0 on every
metric and stays in the mean, so systems that answer fewer questions are not flattered (TANQ's
official RMS reading excepted: it gives a reply without a table what TANQ's script gives it,
precision 1, recall 0, F1 0; see `_tanq_scores`).
Per-question values and summary values are both fractions in 0..1 (`UNIT`): a summary value is
the mean of the per-question values, for every metric alike, and every summary row says so in
its `unit` key. A summary row with no question to average (e.g. `f1_ans_multi` on a split
without multi-answer questions, or a cell with no questions) has value None and a `reason`;
it is shown as "n/a", never as 0.

A question whose generation failed (the backend gave up on it: predictions.parquet's
`finish_reason` "failed", `parse_reason` "generation failed: ..."; docs/generation.md, "Failed
items") is not a wrong answer: nobody answered it. It is left out of every mean and of the
per-question table, and every summary row counts it in `n_failed` (n + n_failed = the questions
asked), so a score over fewer questions always says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import pandas as pd
import pyarrow as pa

from cqabench.common.errors import ConfigError, DataError
from cqabench.evaluation.metrics import answers as am
from cqabench.evaluation.metrics import tanq_breakdowns, tanq_failures
from cqabench.evaluation.metrics.dexter_scripts import cover_em_script
from cqabench.evaluation.metrics.tables import RmsScore, rms, rms_official
from cqabench.generation.extraction import (
    EMPTY_TABLE,
    NO_TABLE,
    Extracted,
    ParsedTable,
    extract_answer,
    parse_answer,
    parse_number,
)

DEFAULT = "default"
DEXTER = "dexter"
OFFICIAL = "official"  # AmbigQA's and TANQ's own evaluation scripts
EXE_ANS = "exe_ans"  # FinQA EM-tol against the program result instead of the published answer
CQABENCH_PARSE = "cqabench_parse"  # TANQ RMS on the table extraction.parse_table reads
TANQ = "tanq"
RMS_METRICS = ("rms_precision", "rms_recall", "rms_f1")

# Datasets whose gold is a list of answer strings, scored by cover-EM / EM / F1 (cover-EM primary):
# a new dataset of that kind is named here once (docs/add_dataset.md); one that needs its own
# metric gets an entry in METRICS, PRIMARY and _SCORERS instead.
TEXT_DATASETS = ("musique", "2wikimultihopqa", "ottqa", "tatqa")

# dataset -> (metric, variant) rows its summary has (TANQ adds breakdown rows, see tanq_groups).
METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    # cover_em dexter: the toolkit's LLM scripts' inline check (metrics.dexter_scripts)
    **{ds: (("cover_em", DEFAULT), ("em", DEFAULT), ("f1", DEFAULT), ("cover_em", DEXTER)) for ds in TEXT_DATASETS},
    "strategyqa": (("accuracy", DEFAULT), ("cover_em", DEFAULT)),
    "ambigqa": (("f1_ans", OFFICIAL), ("f1_ans_multi", OFFICIAL), ("f1_ans", DEXTER), ("f1_ans_multi", DEXTER)),
    "finqa": (("em_tol", DEFAULT), ("em_tol", DEXTER), ("em_tol", EXE_ANS)),
    # RMS with the official reading of the prediction, RMS with our parser's table, then the
    # share of predictions in each failure category of TANQ's Table 10 (metrics.tanq_failures;
    # the categories that need judgement are n/a with the reason).
    "tanq": (
        *((m, OFFICIAL) for m in RMS_METRICS),
        *((m, CQABENCH_PARSE) for m in RMS_METRICS),
        *((metric, TANQ) for metric, _, _ in tanq_failures.CATEGORIES),
    ),
}
PARSE_METRIC = ("parse_ok", DEFAULT)  # share of questions whose output was extracted, every dataset
UNIT = "fraction"  # every value, per question and summary: 0..1

# dataset -> the (metric, variant) rows the report judges it by (answers_by_setting, k-effect plot,
# Table 3): DEXTER's choices; StrategyQA is reported with accuracy and cover-EM.
PRIMARY: dict[str, tuple[tuple[str, str], ...]] = {
    **{ds: (("cover_em", DEFAULT),) for ds in TEXT_DATASETS},
    "strategyqa": (("accuracy", DEFAULT), ("cover_em", DEFAULT)),
    "ambigqa": (("f1_ans", OFFICIAL),),
    "finqa": (("em_tol", DEFAULT),),
    "tanq": (("rms_f1", OFFICIAL),),
}
NO_QUESTIONS = "no question was scored (the cell asked none)"
GENERATION_FAILED = (
    "generation failed"  # predictions.parquet: finish_reason "failed", parse_reason "generation failed: ..."
)
ALL_FAILED = "generation failed for every question of the cell (n_failed): nothing to score"
NO_MULTI = "no multi-answer question (every question has a singleAnswer annotation)"
NO_PREDICTION = "no prediction"  # the question has no row in the predictions: nothing was generated


def not_evaluable_reason(metric: str) -> str:
    """Why a summary row of `metric` has no question to average (or is not computed at all)."""
    if metric in tanq_failures.NOT_COMPUTED:
        return tanq_failures.NOT_COMPUTED[metric]
    return NO_MULTI if metric.startswith("f1_ans_multi") else NO_QUESTIONS


def records(table: pa.Table | pd.DataFrame | Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as plain Python dicts (lists, not numpy arrays, in list columns)."""
    if isinstance(table, pa.Table):
        return table.to_pylist()
    if isinstance(table, pd.DataFrame):
        return pa.Table.from_pandas(table, preserve_index=False).to_pylist()
    return [dict(r) for r in table]


# --- per question -----------------------------------------------------------------------------


def _text_scores(dataset: str, ext: Extracted, answer: dict[str, Any]) -> list[tuple[str, str, float]]:
    aliases = list(answer.get("aliases") or [])
    if not ext.ok or not aliases:
        return [("cover_em", DEFAULT, 0.0), ("em", DEFAULT, 0.0), ("f1", DEFAULT, 0.0), ("cover_em", DEXTER, 0.0)]
    script = ("cover_em", DEXTER, cover_em_script(dataset, ext.answer, aliases))
    if answer.get("numeric_type") == "multi-span":
        return [
            ("cover_em", DEFAULT, am.cover_em_all(ext.answer, aliases)),
            ("em", DEFAULT, am.multispan_em(ext.answer, aliases)),
            ("f1", DEFAULT, am.multispan_f1(ext.answer, aliases)),
            script,
        ]
    return [
        ("cover_em", DEFAULT, am.cover_em(ext.answer, aliases)),
        ("em", DEFAULT, am.exact_match(ext.answer, aliases)),
        ("f1", DEFAULT, am.token_f1(ext.answer, aliases)),
        script,
    ]


def _strategyqa_scores(ext: Extracted, answer: dict[str, Any]) -> list[tuple[str, str, float]]:
    gold = answer.get("boolean")
    acc = am.boolean_accuracy(ext.value if ext.ok else None, bool(gold)) if gold is not None else 0.0
    # the gold's yes/no (or true/false) as a whole word, as the toolkit matched it (not "not")
    cover = am.boolean_cover_em(ext.answer, bool(gold)) if ext.ok and gold is not None else 0.0
    return [("accuracy", DEFAULT, acc), ("cover_em", DEFAULT, cover)]


def _ambigqa_scores(ext: Extracted, answer: dict[str, Any]) -> list[tuple[str, str, float]]:
    preds = list(ext.value or []) if ext.ok else []
    annotations = answer.get("annotations") or []
    official = am.f1_ans(annotations, preds)
    dexter = am.f1_ans_dexter(answer.get("aliases") or [], preds)
    out = [("f1_ans", OFFICIAL, official), ("f1_ans", DEXTER, dexter)]
    if am.is_multi_answer(annotations):
        out += [("f1_ans_multi", OFFICIAL, official), ("f1_ans_multi", DEXTER, dexter)]
    return out


def finqa_gold(answer: dict[str, Any]) -> tuple[set[float], bool | None, set[float], float | None]:
    """(readings of the published answer string, yes/no, readings of exe_ans, the toolkit's
    gold value) of a FinQA answer row. The published string is read as a prediction is
    (`extraction.parse_number`, then `answers.number_readings`: "-3.2%" -> {-3.2, -0.032},
    "$ 193 million" -> {193, 1.93e8}); one without a number falls back to exe_ans, in our
    variant and in the toolkit's."""
    aliases = [str(a) for a in answer.get("aliases") or []]
    text = aliases[0].strip() if aliases else ""
    boolean = answer.get("boolean") if answer.get("answer_type") == "boolean" else None
    if boolean is None and text.lower() in ("yes", "no"):
        boolean = text.lower() == "yes"
    number = answer.get("number")
    percent = answer.get("scale") == "percent" or text.endswith("%")
    exe_ans = am.exe_ans_golds(number, percent)
    written = parse_number(text) if text else None
    published = am.number_readings(written) if written is not None else exe_ans
    dexter = am.dexter_gold_value(text) if text else None
    if dexter is None and exe_ans and number is not None:  # exe_ans: a number, not nan
        dexter = 100.0 * number if percent else float(number)
    return published, boolean, exe_ans, dexter


def _finqa_scores(ext: Extracted, answer: dict[str, Any]) -> list[tuple[str, str, float]]:
    published, boolean, exe_ans, dexter_gold = finqa_gold(answer)
    pred = ext.value if ext.ok else None
    return [
        ("em_tol", DEFAULT, am.em_tol(pred, published, boolean)),
        ("em_tol", DEXTER, am.em_tol_dexter(pred, dexter_gold, boolean)),
        ("em_tol", EXE_ANS, am.em_tol(pred, exe_ans, boolean)),
    ]


def has_final_answer(ext: Extracted) -> bool:
    """Whether the output gave a final answer to read: extracted, or extracted but holding no
    table our parser reads (no prediction, an empty output, a missing marker, a cut-off
    open-book dialogue have none)."""
    return ext.ok or (ext.reason == NO_TABLE and bool(ext.answer.strip()))


def _rms_rows(variant: str, s: RmsScore) -> list[tuple[str, str, float]]:
    return [(metric, variant, value) for metric, value in zip(RMS_METRICS, (s.precision, s.recall, s.f1))]


def _tanq_scores(ext: Extracted, answer: dict[str, Any]) -> list[tuple[str, str, float]]:
    parsed = ext.ok and isinstance(ext.value, ParsedTable)
    table = ext.value if parsed else EMPTY_TABLE
    gold_header, gold_rows = answer.get("table_header") or [], answer.get("table_rows") or []
    zero = RmsScore(0.0, 0.0, 0.0)
    # official: what TANQ's script gives the text a pipeline hands it, table or not. That text is
    # the final answer, or "" where the reply gave none (an empty output, a reasoning prompt's
    # missing marker, a cut-off open-book dialogue). The script reads no datapoints in prose or in
    # "" and scores them (1, 0, 0) (tanq_utils.py:246-247), so precision counts them as 1, as it did
    # for the paper. Only a question with no prediction row at all scores 0: there is no text to
    # hand the script (it would stop at the missing key), and a missing answer must not raise a mean.
    # cqabench_parse: the table the extraction found, else 0 (RMS's precision 1 for an empty table
    # is kept for a table the model really left empty).
    if ext.reason == NO_PREDICTION:
        official = zero
    else:
        official = rms_official(gold_header, gold_rows, ext.answer if has_final_answer(ext) else "")
    ours = rms(gold_header, gold_rows, table.header, table.rows) if parsed else zero
    # failure types read the parsed table, as the paper's annotators read an output (a separator
    # row or a fence is not data to them): metrics.tanq_failures
    failures = tanq_failures.classify(gold_header, gold_rows, table)
    return [*_rms_rows(OFFICIAL, official), *_rms_rows(CQABENCH_PARSE, ours), *tanq_failures.failure_scores(failures)]


Scorer = Callable[[Extracted, dict[str, Any]], list[tuple[str, str, float]]]
_SCORERS: dict[str, Scorer] = {
    **{ds: partial(_text_scores, ds) for ds in TEXT_DATASETS},
    "strategyqa": _strategyqa_scores,
    "ambigqa": _ambigqa_scores,
    "finqa": _finqa_scores,
    "tanq": _tanq_scores,
}


def score_item(dataset: str, ext: Extracted, answer: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(metric, variant, value in 0..1) rows of one question."""
    try:
        scorer = _SCORERS[dataset]
    except KeyError:
        raise ConfigError(f"unknown dataset {dataset!r}; valid: {', '.join(_SCORERS)}") from None
    return [*scorer(ext, answer), (*PARSE_METRIC, float(ext.ok))]


# --- TANQ breakdowns --------------------------------------------------------------------------


def tanq_groups(query: dict[str, Any], answer: dict[str, Any]) -> dict[str, list[str]]:
    """The breakdown groups a TANQ question counts under: its raw question_type ("unknown" if
    empty), then the paper's Tables 5-9 groups (`metrics.tanq_breakdowns`: tanq_type with
    "all", skill, n_skills, n_relations, table_length), the same the report derives."""
    header, rows = answer.get("table_header") or [], answer.get("table_rows") or []
    return {
        "question_type": [query.get("question_type") or "unknown"],
        **tanq_breakdowns.groups(
            query.get("question_type"),
            query.get("skills"),
            len(header) if header else None,
            len(rows) if header else None,
        ),
    }


# --- the whole split --------------------------------------------------------------------------


def _prediction_map(
    predictions: pd.DataFrame | pa.Table | Iterable[dict[str, Any]], known: set[str], source: str
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(records(predictions)):
        if "qid" not in row or row["qid"] is None:
            raise DataError(source, f"row {i}", "qid", "missing")
        qid = str(row["qid"])
        if qid in out:
            raise DataError(source, qid, "qid", "duplicate prediction for this question")
        if qid not in known:
            raise DataError(source, qid, "qid", "not a question of this dataset split")
        out[qid] = row
    return out


def _extracted(dataset: str, row: dict[str, Any] | None, prompt: str | None) -> Extracted:
    if row is None:
        return Extracted("", False, NO_PREDICTION, EMPTY_TABLE if dataset == "tanq" else None)
    text = row.get("prediction")
    text = "" if text is None else str(text)
    if row.get("parse_ok") is False:
        reason = row.get("parse_reason") or "extraction failed at generation"
        return Extracted(text, False, str(reason), EMPTY_TABLE if dataset == "tanq" else None)
    return extract_answer(dataset, text, prompt) if prompt else parse_answer(dataset, text)


def score_predictions(
    dataset: str,
    queries: pa.Table | pd.DataFrame | Iterable[dict[str, Any]],
    answers: pa.Table | pd.DataFrame | Iterable[dict[str, Any]],
    predictions: pa.Table | pd.DataFrame | Iterable[dict[str, Any]],
    prompt: str | None = None,
    source: str = "predictions",
) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """Score `predictions` (qid, prediction[, parse_ok, parse_reason]) against a prepared split.

    `prediction` is final-answer text (what `extract_answer(...).answer` gives); with `prompt`
    set it is raw model output and the prompt's marker is looked for first. Returns the summary
    ([{"metric", "variant", "value" (fraction 0..1, or None), "n", "unit"[, "reason"]}]) and the
    per-question table (qid, metric, variant, value in 0..1). Every metric of the dataset has a
    summary row; one with no question to average has value None, n 0 and a `reason`. TANQ adds
    breakdown rows named "<metric>/<dimension>=<bucket>" (see `tanq_groups`) to the summary only.
    """
    if dataset not in _SCORERS:
        raise ConfigError(f"unknown dataset {dataset!r}; valid: {', '.join(_SCORERS)}")
    gold = records(answers)
    query_by_qid = {str(q["qid"]): q for q in records(queries)}
    preds = _prediction_map(predictions, {str(a["qid"]) for a in gold}, source)

    per_question: list[tuple[str, str, str, float]] = []
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    failed: dict[tuple[str, str], int] = defaultdict(int)  # questions a row would have averaged, had they been answered
    for answer in gold:
        qid = str(answer["qid"])
        row = preds.get(qid)
        is_failed = generation_failed(row)
        rows = score_item(dataset, _extracted(dataset, row, prompt), answer)
        scored = [((metric, variant), value) for metric, variant, value in rows]
        if dataset == "tanq":
            for dim, buckets in tanq_groups(query_by_qid.get(qid, {}), answer).items():
                for bucket in buckets:
                    scored += [
                        ((f"{metric}/{dim}={bucket}", variant), value)
                        for metric, variant, value in rows
                        if metric.startswith("rms_")
                    ]
        for key, value in scored:
            if is_failed:
                failed[key] += 1
            else:
                groups[key].append(float(value))
        if not is_failed:
            per_question += [(qid, metric, variant, float(value)) for metric, variant, value in rows]

    order = [*METRICS[dataset], PARSE_METRIC]
    keys = order + sorted(k for k in {*groups, *failed} if k not in order)
    summary = [summary_row(m, v, groups.get((m, v), []), failed.get((m, v), 0)) for m, v in keys]
    frame = pd.DataFrame(per_question, columns=["qid", "metric", "variant", "value"])
    return summary, frame


def tanq_failure_records(
    answers: pa.Table | pd.DataFrame | Iterable[dict[str, Any]],
    predictions: pa.Table | pd.DataFrame | Iterable[dict[str, Any]],
    source: str = "predictions",
) -> list[dict[str, Any]]:
    """Each TANQ question's failure categories and what triggered them, for reading labels by
    hand: the same extraction and table as `score_predictions` (a question without a
    prediction is non-table). One record per gold question, in the answers' order."""
    gold = records(answers)
    preds = _prediction_map(predictions, {str(a["qid"]) for a in gold}, source)
    out = []
    for answer in gold:
        qid = str(answer["qid"])
        ext = _extracted("tanq", preds.get(qid), None)
        table = ext.value if ext.ok and isinstance(ext.value, ParsedTable) else EMPTY_TABLE
        f = tanq_failures.classify(answer.get("table_header") or [], answer.get("table_rows") or [], table)
        out.append(
            {
                "qid": qid,
                "categories": sorted(f.names()),
                "transposed": f.transposed,
                "missing_relations": list(f.missing_relations),
                "extra_relations": list(f.extra_relations),
                "missing_entities": list(f.missing_entities),
                "wrong_cells": [list(c) for c in f.wrong_cells],
                "partial_cells": [list(c) for c in f.partial_cells],
                "parse_reason": ext.reason,
            }
        )
    return out


def summary_row(metric: str, variant: str, values: Sequence[float], n_failed: int = 0) -> dict[str, Any]:
    """One metrics.json entry: the mean of `values` (fraction), or None with the reason when empty.

    `n_failed`: questions of this row whose generation failed, left out of the mean (n + n_failed
    were asked); every row has it, 0 when nothing failed.
    """
    if not values:
        reason = ALL_FAILED if n_failed else not_evaluable_reason(metric)
        return {
            "metric": metric,
            "variant": variant,
            "value": None,
            "n": 0,
            "n_failed": n_failed,
            "unit": UNIT,
            "reason": reason,
        }
    return {
        "metric": metric,
        "variant": variant,
        "value": sum(values) / len(values),
        "n": len(values),
        "n_failed": n_failed,
        "unit": UNIT,
    }


def generation_failed(row: dict[str, Any] | None) -> bool:
    """Whether a prediction row is a failed item: the generation job's mark (finish_reason "failed",
    or a parse_reason "generation failed: ..." where finish_reason was not kept), not an answer."""
    if row is None:
        return False
    return row.get("finish_reason") == "failed" or str(row.get("parse_reason") or "").startswith(GENERATION_FAILED)


def failed_qids(predictions: pa.Table | pd.DataFrame | Iterable[dict[str, Any]]) -> list[str]:
    """The qids of the failed items of a predictions table, in its order (metrics.json `failed_qids`)."""
    return [str(r["qid"]) for r in records(predictions) if generation_failed(r)]


def format_summary(summary: Sequence[dict[str, Any]]) -> str:
    """A plain text table of the summary rows (fractions; n/a with the reason), for the terminal."""
    lines = [f"{'metric':<40} {'variant':<10} {'value':>8} {'n':>7}   (unit: {UNIT})"]
    for r in summary:
        value = "n/a" if r.get("value") is None else f"{r['value']:.4f}"
        line = f"{r['metric']:<40} {str(r.get('variant')):<10} {value:>8} {r.get('n', 0):>7}"
        if r.get("n_failed"):
            line += f"   (+{r['n_failed']} failed, not scored)"
        if r.get("value") is None and r.get("reason"):
            line += f"   {r['reason']}"
        lines.append(line)
    return "\n".join(lines)
