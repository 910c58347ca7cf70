"""How long the whole plan takes on N GPUs and M CPU cores: bounds from the estimated jobs.

- lower bound: no schedule beats max(GPU-seconds / N, core-seconds / M, critical path), where
  core-seconds are wall x threads of every job and the critical path is the longest chain of
  estimated wall times through the jobs' dependencies;
- list schedule: an actual schedule of the estimated jobs, greedy as Snakemake's own is: whenever
  a GPU or cores are free, the ready job with the longest remaining path that fits starts. A
  GPU job also takes its threads' cores. Its length is a makespan the plan can reach under the
  estimate (an upper bound of the optimum for these job times), and never below the lower bound.
Remote API jobs (device `api`) take a core but no GPU; their time is the API's.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from cqabench.common.errors import ConfigError
from cqabench.estimate.dag import Job
from cqabench.estimate.model import Cost


@dataclass(frozen=True)
class Makespan:
    gpus: int
    cores: int
    lower_bound_s: float
    critical_path_s: float
    list_schedule_s: float
    gpu_bound_s: float
    cpu_bound_s: float


def makespan(jobs: Sequence[Job], costs: Sequence[Cost], gpus: int, cores: int) -> Makespan:
    if gpus < 0 or cores < 1:
        raise ConfigError(f"need --gpus >= 0 and --cores >= 1, got {gpus} and {cores}")
    by_id = {j.id: j for j in jobs}
    cost = {c.id: c for c in costs}
    order = [j.id for j in jobs]  # stage order: every dependency comes first (dag.ordered)
    tail: dict[str, float] = {}
    children: dict[str, list[str]] = {i: [] for i in order}
    for i in order:
        for d in by_id[i].deps:
            children[d].append(i)
    for i in reversed(order):
        tail[i] = cost[i].wall_s + max((tail[ch] for ch in children[i]), default=0.0)
    critical = max(tail.values(), default=0.0)
    gpu_s = sum(c.gpu_s for c in costs)
    core_s = sum(c.wall_s * min(c.threads, cores) for c in costs)
    if gpu_s and not gpus:
        raise ConfigError(f"the plan has {sum(1 for c in costs if c.gpus)} GPU job(s): give --gpus N with N >= 1")
    gpu_bound = gpu_s / gpus if gpus else 0.0
    cpu_bound = core_s / cores
    lower = max(gpu_bound, cpu_bound, critical)
    return Makespan(
        gpus,
        cores,
        lower,
        critical,
        _list_schedule(order, by_id, cost, children, tail, gpus, cores),
        gpu_bound,
        cpu_bound,
    )


def critical_path(jobs: Sequence[Job], costs: Sequence[Cost]) -> list[tuple[str, float]]:
    """The longest chain of estimated wall times through the dependencies: (job id, wall s), in
    the order the jobs run (its sum is `Makespan.critical_path_s`)."""
    by_id = {j.id: j for j in jobs}
    wall = {c.id: c.wall_s for c in costs}
    best: dict[str, tuple[float, str | None]] = {}  # id -> (longest chain ending here, its previous job)
    for j in jobs:  # dependencies first (dag.ordered)
        prev = max(((best[d][0], d) for d in by_id[j.id].deps if d in best), default=(0.0, None))
        best[j.id] = (prev[0] + wall[j.id], prev[1])
    if not best:
        return []
    node: str | None = max(best, key=lambda i: best[i][0])
    path = []
    while node is not None:
        path.append((node, wall[node]))
        node = best[node][1]
    return path[::-1]


def _list_schedule(
    order: list[str],
    by_id: dict[str, Job],
    cost: dict[str, Cost],
    children: dict[str, list[str]],
    tail: dict[str, float],
    gpus: int,
    cores: int,
) -> float:
    """Greedy: GPU jobs and CPU jobs each wait in order of their remaining path; the first of a
    queue starts as soon as what it needs is free (a later job does not jump it)."""
    waiting = {i: len(by_id[i].deps) for i in order}
    queues: tuple[list[tuple[float, str]], list[tuple[float, str]]] = ([], [])

    def enqueue(i: str) -> None:
        heapq.heappush(queues[0 if cost[i].gpus else 1], (-tail[i], i))

    for i in order:
        if waiting[i] == 0:
            enqueue(i)
    running: list[tuple[float, str]] = []
    free_gpu, free_cores, now = gpus, cores, 0.0
    while any(queues) or running:
        for queue in queues:
            while queue:
                c = cost[queue[0][1]]
                need = min(c.threads, cores)
                if c.gpus > free_gpu or need > free_cores:
                    break
                _, i = heapq.heappop(queue)
                free_gpu -= c.gpus
                free_cores -= need
                heapq.heappush(running, (now + c.wall_s, i))
        if not running:
            raise RuntimeError("a job needs more GPUs than the machine has")
        now, done = heapq.heappop(running)
        finished = [done]
        while running and running[0][0] <= now:
            finished.append(heapq.heappop(running)[1])
        for i in finished:
            c = cost[i]
            free_gpu += c.gpus
            free_cores += min(c.threads, cores)
            for ch in children[i]:
                waiting[ch] -= 1
                if waiting[ch] == 0:
                    enqueue(ch)
    return now
