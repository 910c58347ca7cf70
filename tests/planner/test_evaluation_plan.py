"""cqabench.planner.evaluation: the evaluation stage's decisions, each asserted on a computed value:
where a cell's answer metrics go and what its evaluate_generation job reads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cqabench.common.errors import ConfigError
from cqabench.planner import Cell
from plan_helpers import load_config, plan_of

CELL = "tatqa/dev/pipe/bm25/smollm2-135m/few-shot/rag-k3"


def _wildcards(cell: str) -> SimpleNamespace:
    """The wildcards Snakemake gives the rule for this cell's path: text, by attribute."""
    return SimpleNamespace(**Cell.parse(cell))


def test_each_planned_cell_is_scored_into_its_own_metrics_folder() -> None:
    plan = plan_of(load_config())
    assert plan.evaluation_targets() == [
        t.replace("/generation/", "/metrics/").replace("predictions.parquet", "metrics.json")
        for t in plan.generation_targets()
    ]


def test_scoring_reads_the_cells_predictions_and_its_splits_answers() -> None:
    plan = plan_of(load_config())
    assert plan.evaluation_inputs(_wildcards(CELL)) == {
        "predictions": f"results/sample/generation/{CELL}/predictions.parquet",
        "summary": f"results/sample/generation/{CELL}/summary.json",
        "queries": "results/sample/data/tatqa/dev/queries.parquet",
        "answers": "results/sample/data/tatqa/dev/answers.parquet",
    }
    closed = "tatqa/dev/pipe/none/smollm2-135m/few-shot/closed-k3"  # closed-book has no k
    with pytest.raises(ConfigError, match=f"results/sample/metrics/{closed}/metrics.json: the config cannot make"):
        plan.evaluation_inputs(_wildcards(closed))
