"""A rule's `resources:` from its jobs' estimates: one helper instead of a lambda per key per rule.

Every rule asks the scheduler for what the estimate says its job needs (`JobCosts.request`:
mem_mb for a first attempt, runtime in minutes, gpu). Written out, that was the same three
lambdas in each of 26 `resources:` blocks; `rule_resources` builds them from the rule's name, so a
rule says only what differs between rules:

- `retries=True` for a rule with `retries: MEMORY_RETRIES`: its mem_mb doubles per attempt
  (cqabench.common.job_memory.memory_mb), so an out-of-memory kill is retried with more. Only
  those rules take `attempt`: a rule without `retries:` re-asked under Snakemake's own
  `--retries` keeps its size, as it did when each rule wrote its lambdas out.
- `gpu=True` for a rule whose job may run its model on a GPU: the estimate's count
  (`Plan.uses_gpu`, a retriever's device). A rule that never uses one states `gpu=0` itself (a
  profile's default `gpu` must not apply to it) or asks for no gpu at all.

The functions are called by Snakemake with the job's wildcards (and `attempt`, which Snakemake
passes by name), once per job; the estimate caches each job's cost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from cqabench.common.job_memory import memory_mb


class Requests(Protocol):
    """What the rules' sizes come from: `JobCosts` (cqabench.estimate.model) in the workflow."""

    def request(self, rule: str, wildcards: Mapping[str, Any]) -> Mapping[str, int]: ...


class Wildcards(Protocol):
    """Snakemake's wildcards of a job (a Namedlist): only their name-value pairs are read."""

    def items(self) -> Iterable[tuple[str, Any]]: ...


def requested(costs: Requests, rule: str, wildcards: Wildcards) -> Mapping[str, int]:
    """The mem_mb (first attempt), runtime and gpu the job of `rule` with `wildcards` asks for."""
    return costs.request(rule, dict(wildcards.items()))


def rule_resources(
    costs: Requests, rule: str, *, gpu: bool = False, retries: bool = False
) -> dict[str, Callable[..., int]]:
    """The `resources:` of `rule` (`resources: **job_resources(rule, ...)` in the .smk files):
    mem_mb and runtime always, gpu where `gpu`; mem_mb doubling per attempt where `retries`
    (module docstring)."""

    def first_mem_mb(wildcards: Wildcards) -> int:
        return requested(costs, rule, wildcards)["mem_mb"]

    def retried_mem_mb(wildcards: Wildcards, attempt: int) -> int:
        return memory_mb(requested(costs, rule, wildcards)["mem_mb"], attempt)

    def runtime(wildcards: Wildcards) -> int:
        return requested(costs, rule, wildcards)["runtime"]

    def gpus(wildcards: Wildcards) -> int:
        return requested(costs, rule, wildcards)["gpu"]

    out: dict[str, Callable[..., int]] = {"gpu": gpus} if gpu else {}
    return {**out, "mem_mb": retried_mem_mb if retries else first_mem_mb, "runtime": runtime}
