"""Retrieval pipelines at planning time: fused and reranked runs, declared under `retrieval.pipelines`.

A pipeline is a run made from other runs of the same dataset split, with no index of its own:

    retrieval:
      pipelines:
        hybrid: {type: fusion, fuse: [bm25, minilm], method: rrf, rrf_k: 60}
        bm25-ce: {type: rerank, of: bm25, model: cross-encoder/ms-marco-MiniLM-L-6-v2, revision: main, depth: 100}
        hybrid-ce: {type: rerank, of: hybrid, model: ..., depth: 50}       # a reranking of a fusion

Its inputs are runs of any kind: configured retrievers (`retrieval.retrievers`), StrategyQA's
IR-Q / IR-D runs, external runs and other pipelines. A pipeline exists for every (dataset,
split) where all its inputs exist, so `hybrid` above is a run of every dataset BM25 and MiniLM
search, and is evaluated, tested against the baseline, offered to generation
(`generation.rag_retrievers`) and rebuilt by path like any other run. What it computes:
`cqabench.retrieval.fusion` (ranx) and `cqabench.retrieval.rerank` (a sentence-transformers
CrossEncoder).

The checks here are the ones the JSON schema cannot make, each naming its key: settings per
type (`resolve`), a name taken by another run, an input that names no run, a cycle of
pipelines, a fusion of runs that share no dataset split (runs of different datasets), and a
rerank deeper than its input holds or a fusion deeper than its inputs together. A RAG k deeper than a pipeline's `depth` is refused with
the other depth checks (`GenerationPlan._rag_depth_problems`, through `RetrievalPlan.run_depth`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.retrieval.decomposition import RUN_SUFFIX

KEY = "retrieval.pipelines"
TYPES = ("fusion", "rerank")
Split = tuple[str, str]


def inputs_of(spec: Mapping[str, Any]) -> list[str]:
    """The runs a pipeline reads, in the order it reads them (as written; unchecked)."""
    if spec.get("type") == "fusion":
        return [str(n) for n in spec.get("fuse") or [] if isinstance(n, str)]
    if spec.get("type") == "rerank":
        return [spec["of"]] if isinstance(spec.get("of"), str) else []
    return []


def input_key(spec: Mapping[str, Any]) -> str:
    """The config key that names a pipeline's inputs (`fuse` or `of`)."""
    return "fuse" if spec.get("type") == "fusion" else "of"


def resolve(spec: Mapping[str, Any], default_depth: int, input_depth: int | None = None) -> dict[str, Any]:
    """A pipeline's settings, defaults filled in and checked by its type's module.

    `input_depth`: the most its inputs hold per question (`held_by_inputs`), None when unknown.
    A fusion's `depth` defaults to `default_depth` (retrieval.k); a rerank's to 100; either to what
    its inputs hold where that is less (a rerank of a depth-10 IR-Q run reranks its 10, a fusion of
    two of them holds at most 20), so the default is never refused by the depth check below and
    every row records a depth the run can hold.
    """
    kind = spec.get("type")
    if kind == "fusion":
        from cqabench.retrieval import fusion

        if spec.get("depth") is None and input_depth is not None:
            default_depth = min(default_depth, input_depth)
        return fusion.resolve(spec, default_depth)
    if kind == "rerank":
        from cqabench.retrieval import rerank

        if spec.get("depth") is None and input_depth is not None:
            spec = {**spec, "depth": min(int(rerank.DEFAULTS["depth"]), input_depth)}
        return rerank.resolve(spec)
    raise ConfigError(f"type: {kind!r} is not one of {', '.join(TYPES)}")


def _where(name: str, message: str) -> str:
    """`retrieval.pipelines.<name>.<key>: ...` when the message starts with its key, else `<name>: ...`."""
    head, sep, rest = message.partition(": ")
    if sep and head.isidentifier():
        return f"{KEY}.{name}.{head}: {rest}"
    return f"{KEY}.{name}: {message}"


def order(pipelines: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The pipelines, each after the pipelines it reads (call after `cycle_problems` found none)."""
    done: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        for dep in inputs_of(pipelines[name]):
            if dep in pipelines and dep != name:
                visit(dep)
        done.append(name)

    for name in pipelines:
        visit(name)
    return done


def cycle_problems(pipelines: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every cycle of pipelines reading each other, once, as `a -> b -> a` under its first name."""
    out: list[str] = []
    seen_cycles: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1: on the path, 2: finished

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in inputs_of(pipelines[name]):
            if dep not in pipelines:
                continue
            if state.get(dep) == 1:
                cycle = path[path.index(dep) :] + [dep]
                if frozenset(cycle) not in seen_cycles:
                    seen_cycles.add(frozenset(cycle))
                    first = cycle[0]
                    out.append(f"{KEY}.{first}.{input_key(pipelines[first])}: a cycle of runs: {' -> '.join(cycle)} "
                               "(a pipeline cannot read itself, directly or through others)")  # fmt: skip
            elif state.get(dep) is None:
                visit(dep, path + [dep])
        state[name] = 2

    for name in pipelines:
        if state.get(name) is None:
            visit(name, [name])
    return out


def base_run_splits(plan: Any) -> dict[str, set[Split]]:
    """(dataset, split) pairs of every run that is no pipeline, from the config alone."""
    configured = {ds: list(plan.config["datasets"][ds]["splits"]) for ds in plan.datasets}
    out: dict[str, set[Split]] = {}
    ours = {(ds, sp) for ds in plan.retrieval_datasets if ds in configured for sp in configured[ds]}
    for r in plan.retrieval_retrievers:
        out[r] = set(ours)
    dec = plan.decomposition
    dec_splits = {(ds, sp) for ds in dec.get("datasets") or [] if ds in configured for sp in configured[ds]}
    for r in dec.get("retrievers") or []:
        for kind in dec.get("queries", list(RUN_SUFFIX)):
            if kind in RUN_SUFFIX:
                out[f"{r}-{RUN_SUFFIX[kind]}"] = set(dec_splits)
    for name, spec in plan.external_runs.items():
        out[name] = {(spec["dataset"], spec["split"])}
    return out


def run_splits(plan: Any) -> dict[str, set[Split]]:
    """(dataset, split) pairs of every run, pipelines included: a pipeline exists where all its inputs do."""
    out = base_run_splits(plan)
    for name in order(plan.pipelines):
        sets = [out.get(dep, set()) for dep in inputs_of(plan.pipelines[name])]
        out[name] = set.intersection(*sets) if sets else set()
    return out


def _shown(splits: set[Split]) -> str:
    return ", ".join(f"{ds}/{sp}" for ds, sp in sorted(splits)) or "nowhere"


def problems(plan: Any) -> list[str]:
    """Every pipeline problem the schema cannot see (module docstring), each naming its key."""
    pipes: Mapping[str, Mapping[str, Any]] = plan.pipelines
    if not pipes:
        return []
    out: list[str] = []
    for name, spec in pipes.items():
        try:
            resolve(spec, plan.retrieval_k)
        except ConfigError as exc:
            out.append(_where(name, str(exc)))
    base = base_run_splits(plan)
    for name in pipes:
        if name in plan.retriever_configs:
            out.append(f"{KEY}.{name}: the name is already a retriever's (retrievers.{name}); pick another name")
        elif name in plan.external_runs:
            out.append(f"{KEY}.{name}: the name is already an external run's (external_runs.{name}); pick another name")
        elif name in base:
            out.append(f"{KEY}.{name}: the name is already a StrategyQA IR-Q / IR-D run's (retrieval.decomposition); "
                       "pick another name")  # fmt: skip
    known = set(base) | set(pipes)
    for name, spec in pipes.items():
        for dep in inputs_of(spec):
            if dep not in known:
                hint = (f" ({dep} is under `retrievers:` but not in retrieval.retrievers, so it has no run)"
                        if dep in plan.retriever_configs else "")  # fmt: skip
                out.append(
                    f"{KEY}.{name}.{input_key(spec)}: {dep!r} names no run{hint}; runs: {sorted(known - {name})}"
                )
    cycles = cycle_problems(pipes)
    out += cycles
    if cycles or any(dep not in known for spec in pipes.values() for dep in inputs_of(spec)):
        return out  # availability and depth need a well-formed graph
    splits = run_splits(plan)
    for name, spec in pipes.items():
        deps = inputs_of(spec)
        if deps and not splits[name]:
            if spec.get("type") == "fusion":
                shown = "; ".join(f"{d} ({_shown(splits[d])})" for d in deps)
                out.append(f"{KEY}.{name}.fuse: the runs share no dataset split: {shown}; a fusion fuses runs of "
                           "one dataset split")  # fmt: skip
            else:
                out.append(f"{KEY}.{name}.of: run {deps[0]!r} exists for no configured dataset split")
    out += _depth_problems(plan)
    return out


def held_by_inputs(
    spec: Mapping[str, Any], run_depth: Callable[[str], tuple[str, int] | None]
) -> tuple[str, int] | None:
    """(where it comes from, depth): the most a pipeline's inputs hold per question; None when an
    input's depth is unknown at planning (an external run's is its file's).

    A rerank reorders its input's ranking, so it holds what that input holds; a fusion holds the
    union of its inputs' rankings, at most the sum of their depths.
    """
    held = [run_depth(dep) for dep in inputs_of(spec)]
    if not held or any(h is None for h in held):
        return None
    known = [h for h in held if h is not None]
    if spec.get("type") == "rerank":
        return known[0]
    where = " + ".join(f"{dep} {key}: {depth}" for dep, (key, depth) in zip(inputs_of(spec), known))
    return where, sum(depth for _, depth in known)


def _depth_problems(plan: Any) -> list[str]:
    """A pipeline deeper than its inputs hold would record a depth it never had: a rerank deeper
    than its input, a fusion deeper than its inputs together."""
    out = []
    for name, spec in plan.pipelines.items():
        try:
            held = held_by_inputs(spec, plan.run_depth)
            depth = plan.pipeline_settings(name)["depth"]
        except ConfigError:
            continue  # its settings, or its input's, are reported by `problems`
        if held is None or depth <= held[1]:
            continue
        if spec.get("type") == "rerank":
            out.append(f"{KEY}.{name}.depth: {depth} exceeds what run {spec['of']!r} holds per question "
                       f"({held[0]}: {held[1]}); rerank at most {held[1]}")  # fmt: skip
        else:
            out.append(f"{KEY}.{name}.depth: {depth} exceeds what its runs hold together per question "
                       f"({held[0]}; at most {held[1]}); fuse at most {held[1]}")  # fmt: skip
    return out
