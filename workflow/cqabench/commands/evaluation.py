"""`cqabench` subcommands of the evaluate stage.

evaluate             score a JSONL predictions file against a prepared split (by hand, or for
                     outputs produced outside the workflow)
evaluate-generation  score a generation job's predictions.parquet (what the workflow runs)
tanq-failures        list each TANQ prediction's failure types (Table 10) and what triggered them

Both write metrics.json in docs/architecture.md's shape and per_question.parquet
(qid, metric, variant, value); both print the summary table. Every value is a fraction in 0..1
and every metrics.json entry carries `"unit": "fraction"`; an entry with no question to average
is `{"value": null, "n": 0, "reason": ...}` (see docs/metrics.md, "Units and n/a").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cqabench.commands import config_arg, is_json_text, json_object, plan_of
from cqabench.common.errors import ConfigError
from cqabench.common.layout import DEFAULT_RESULTS
from cqabench.data.datasets import DATASETS


def run_evaluate(args: argparse.Namespace) -> int:
    from cqabench.evaluation.evaluate import run_evaluate as run

    return run(args)


def run_evaluate_generation(args: argparse.Namespace) -> int:
    from cqabench.evaluation.evaluate import run_evaluate_generation as run

    return run(args, _generation_cell(args.cell, args.config))


def _generation_cell(cell: str, config: str | None) -> dict[str, Any]:
    """--cell: the cell's record as JSON, or with --config its label (dataset/split/serialization/
    retriever/llm/prompt/setting-kK), whose record the planner makes (Plan.generation_cell)."""
    if is_json_text(cell):
        return json_object(cell, "--cell")
    from cqabench.generation.cell import Cell

    if config is None:
        raise ConfigError(f"--cell {cell!r}: a cell label needs --config (the run's resolved configuration)")
    return plan_of(config_arg(config)).generation_cell(Cell.from_label(cell, "--cell"))


def run_tanq_failures(args: argparse.Namespace) -> int:
    from cqabench.evaluation.evaluate import run_tanq_failures as run

    return run(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (each sets `func`)."""
    p = sub.add_parser("evaluate", help="score a JSONL predictions file against a prepared split")
    p.add_argument("--dataset", required=True, choices=DATASETS, help="the dataset of the predictions")
    p.add_argument("--split", required=True, help="the prepared split they answer, e.g. dev")
    p.add_argument("--predictions", required=True, type=Path, help="JSONL: one object per line with qid and prediction")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(DEFAULT_RESULTS) / "data",
        help="the prepared data of a results tree (default: the sample's; results/<name>/data)",
    )
    p.add_argument(
        "--prompt",
        default=None,
        help="prompt strategy when predictions are raw model output (e.g. few-shot-cot, "
        "self-ask); omit when they are already the final answer",
    )
    p.add_argument("--out", type=Path, default=None, help="metrics.json to write")
    p.add_argument("--out-per-question", type=Path, default=None, help="per_question.parquet to write")
    p.set_defaults(func=run_evaluate)

    g = sub.add_parser("evaluate-generation", help="score a generation job's predictions.parquet")
    g.add_argument("--dataset", required=True, choices=DATASETS, help="the dataset of the predictions")
    g.add_argument(
        "--predictions",
        required=True,
        type=Path,
        help="Parquet: qid, prediction, parse_ok, parse_reason (raw_output and token counts optional)",
    )
    g.add_argument("--queries", required=True, type=Path, help="the split's queries.parquet")
    g.add_argument("--answers", required=True, type=Path, help="the split's answers.parquet")
    g.add_argument(
        "--cell",
        default="{}",
        help="the experiment cell written into metrics.json: a JSON object, or "
        "with --config the cell's label <dataset>/<split>/<serialization>/"
        "<retriever>/<llm>/<prompt>/<setting>-k<k> (what the workflow passes)",
    )
    g.add_argument("--config", help="the run's resolved configuration (results/<name>/config.json)")
    g.add_argument(
        "--summary",
        type=Path,
        default=None,
        help="the generation job's summary.json: its package versions, model identity and "
        "sampling go into metrics.json's provenance",
    )
    g.add_argument("--out-json", required=True, type=Path, help="metrics.json to write")
    g.add_argument("--out-per-question", required=True, type=Path, help="per_question.parquet to write")
    g.set_defaults(func=run_evaluate_generation)

    t = sub.add_parser("tanq-failures", help="each TANQ prediction's failure types (Table 10) and why")
    t.add_argument(
        "--predictions",
        required=True,
        type=Path,
        help="a generation job's predictions.parquet (qid, prediction, parse_ok, parse_reason)",
    )
    t.add_argument("--answers", required=True, type=Path, help="the split's answers.parquet")
    t.add_argument("--out", type=Path, default=None, help="JSONL to write: one record per question")
    t.set_defaults(func=run_tanq_failures)
