"""One helper gives every rule its `resources:` (cqabench.estimate.rule_resources, issue 39 item 2):
the values it hands Snakemake, checked by hand against a stand-in estimate and, for config/dexter.yaml,
against what the rules asked for when each wrote its lambdas out."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from snakemake.iocontainers import Wildcards  # what Snakemake hands a resource function

from cqabench.estimate import run
from cqabench.estimate.rule_resources import requested, rule_resources

REPO = Path(__file__).resolve().parents[2]


class Estimate:
    """A stand-in for JobCosts: 3000 MB, 45 minutes, one GPU for every job; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def request(self, rule: str, wildcards: Mapping[str, Any]) -> dict[str, int]:
        self.asked.append((rule, dict(wildcards)))
        return {"mem_mb": 3000, "runtime": 45, "gpu": 1}


W = Wildcards(fromdict={"dataset": "tatqa", "split": "dev", "serialization": "pipe", "retriever": "bm25"})


def test_a_retried_rule_asks_for_twice_the_memory_per_attempt() -> None:
    est = Estimate()
    res = rule_resources(est, "search", gpu=True, retries=True)
    assert list(res) == ["gpu", "mem_mb", "runtime"]
    assert [res["mem_mb"](W, attempt) for attempt in (1, 2, 3)] == [3000, 6000, 12000]
    assert res["runtime"](W) == 45 and res["gpu"](W) == 1
    # Snakemake passes `attempt` by name, to the functions that declare it
    assert list(inspect.signature(res["mem_mb"]).parameters) == ["wildcards", "attempt"]
    # each call asks the estimate for this rule's job, with the job's wildcards as a plain dict
    assert est.asked[0] == (
        "search",
        {"dataset": "tatqa", "split": "dev", "serialization": "pipe", "retriever": "bm25"},
    )
    assert {rule for rule, _ in est.asked} == {"search"}


def test_a_rule_without_retries_keeps_its_size_and_a_cpu_rule_asks_no_gpu() -> None:
    """No `attempt`: under Snakemake's own --retries such a job is re-asked at its first size, as
    before the helper; no gpu key, so the profile's default applies as it did."""
    res = rule_resources(Estimate(), "download")
    assert list(res) == ["mem_mb", "runtime"]
    assert list(inspect.signature(res["mem_mb"]).parameters) == ["wildcards"]
    assert res["mem_mb"](W) == 3000 and res["runtime"](W) == 45


def test_dexter_resources_are_what_the_rules_asked_for_before() -> None:
    """config/dexter.yaml, DPR's search of AmbigQA dev: `snakemake -n -p --configfile
    config/dexter.yaml` of the base commit (8cff694, each rule with its own lambdas) printed
    mem_mb=5300 runtime=139 gpu=1 for that job; the helper gives the same from the same estimate
    (benchmarks/rates.yaml), and 2x, 4x the memory on the retries."""
    costs = run.plan_costs(run.load_config(REPO / "config" / "dexter.yaml"), root=REPO)
    search = Wildcards(fromdict={"dataset": "ambigqa", "split": "dev", "serialization": "pipe", "retriever": "dpr"})
    res = rule_resources(costs, "search", gpu=True, retries=True)
    assert requested(costs, "search", search) == {"mem_mb": 5300, "runtime": 139, "gpu": 1}
    assert (res["gpu"](search), res["runtime"](search)) == (1, 139)
    assert [res["mem_mb"](search, a) for a in (1, 2, 3)] == [5300, 10600, 21200]
