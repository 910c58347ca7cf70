"""Generation cells named by a path: which ones the config can make, and which exist on disk.

The grid (`Plan.generation_cells`) is what `snakemake` plans by default, but any cell can be
asked for by its path (`results/<name>/generation/<cell>/predictions.parquet`, `results/<name>/metrics/<cell>/
metrics.json`, with `<cell>` = `Cell.PATTERN`, `{dataset}/{split}/{serialization}/{retriever}/{llm}/
{prompt}/{setting}-k{k}`). A path outside the grid that the config can make (RAG at k = 2 over a
configured run, a known prompt whose template exists) is planned and, once it exists, counted
like a grid cell: its metrics go into the fact table, the report and `cqabench significance`
(`Plan.all_cells`). A path the config cannot make is refused when Snakemake plans it, with the
path and every reason (`problems`): closed-book and oracle show no retrieved documents (k 0,
retriever none), RAG needs one of the split's runs and a k within its depth, open-book is the
configured tool agent at k 1, and the LLM, prompt, template, split and serialization must be
ones the config has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from cqabench.generation.cell import CELL_FIELDS, PLAIN_K, Cell
from cqabench.generation.prompts import STRATEGIES

if TYPE_CHECKING:
    from cqabench.planner.evaluation import EvaluationPlan
    from cqabench.planner.generation import GenerationPlan

# Every cell folder, as a glob (`*/*/*/*/*/*/*-k*`): what `existing` looks for under the results tree.
ANY_CELL = Cell.label_of(dict.fromkeys(CELL_FIELDS, "*"))


def problems(plan: GenerationPlan, w: Mapping[str, str]) -> list[str]:
    """Why the config cannot make the cell these wildcard values name ([] if it can): what no
    config can make (`Cell.problems`), then what this one lacks."""
    ds, sp, ser, _, llm, prompt, setting, k_text = (str(w[f]) for f in CELL_FIELDS)  # the retriever: by setting, below
    if ds not in plan.datasets:
        return [f"dataset {ds!r} is not configured (datasets: {plan.datasets})"]
    out = []
    if sp not in plan.splits(ds):
        out.append(f"{sp!r} is not an evaluated split of {ds} (datasets.{ds}.splits: {plan.splits(ds)})")
    if ser not in plan.serializations:
        out.append(f"serialization {ser!r} is not configured (serializations: {plan.serializations})")
    if llm not in plan.gen_llms:
        defined = "defined under llms: but " if llm in plan.llms else ""
        out.append(
            f"llm {llm!r} is {defined}not in generation.llms {plan.gen_llms} (the LLMs whose environment, "
            "device and API key planning checks)"
        )
    if prompt not in STRATEGIES:
        out.append(f"prompt {prompt!r} is unknown; valid: {list(STRATEGIES)}")
    if not PLAIN_K.fullmatch(k_text):
        return out + [f"k {k_text!r} is not a whole number written plainly (k0, k5)"]
    cell = Cell.from_texts(w, "cell")
    out += cell.problems() + _config_problems(plan, cell)
    if prompt in STRATEGIES and not out:
        template = plan.template_file(ds, prompt, setting)
        if not (plan.env.root / template).is_file():
            out.append(f"its template {template!r} (prompt {prompt}, setting {setting}) is missing")
    return out


def _config_problems(plan: GenerationPlan, cell: Cell) -> list[str]:
    """What the cell needs of this config: gold documents, a run deep enough, the open-book agent
    (a retriever 'none' where one is needed is `Cell.problems`' to name)."""
    ds, sp, retriever, setting, k = cell.dataset, cell.split, cell.retriever, cell.setting, cell.k
    out = []
    # a facts oracle (generation.oracle_context) shows the queries' facts: no gold documents needed
    if setting == "oracle" and sp in plan.splits(ds) and plan.oracle_context_of(ds) == "gold":
        has, reason = plan.gold_evidence[(ds, sp)]
        if not has:
            out.append(f"oracle needs gold documents: {reason}")
    elif setting == "rag":
        runs = plan.run_names(ds, sp) if sp in plan.splits(ds) else []
        if retriever != "none" and retriever not in runs:
            out.append(f"rag reads a run: {retriever!r} is not a run of {ds}/{sp} (runs: {runs})")
        depth = plan.run_depth(retriever) if retriever in runs else None
        if depth is not None and k > depth[1]:
            out.append(
                f"k {k} exceeds {depth[0]}: {depth[1]} (the run {retriever} holds at most {depth[1]} documents "
                "per question)"
            )
    elif setting == "open-book":
        ob = plan.open_book
        if not (ob.get("corpus") and ob.get("retriever")):
            return ["open-book is the tool agent of generation.open_book, which is not configured"]
        if ds not in (ob.get("datasets") or []):
            out.append(f"{ds} is not in generation.open_book.datasets {ob.get('datasets') or []}")
        if retriever not in ("none", ob["retriever"]):
            out.append(f"open-book searches with generation.open_book.retriever {ob['retriever']!r}, not {retriever!r}")
    return out


def existing(plan: EvaluationPlan) -> tuple[list[Cell], list[tuple[str, list[str]]]]:
    """Cells outside the grid whose metrics or predictions exist under the config's results tree: (the ones the
    config can make, sorted; (folder, why not) of the others, which are left out)."""
    grid = set(plan.generation_cells())
    found: dict[str, dict[str, str] | None] = {}
    # a cell exists once its metrics do, or the predictions its metrics are made from
    for tree, name in ((plan.answer_metrics_dir(), "metrics.json"), (plan.generation_dir(), "predictions.parquet")):
        root = plan.env.root / tree
        for path in sorted(root.glob(f"{ANY_CELL}/{name}")) if root.is_dir() else []:
            rel = path.parent.relative_to(root).as_posix()
            found.setdefault(rel, Cell.parse(rel))
    counted: list[Cell] = []
    left_out: list[tuple[str, list[str]]] = []
    for rel, w in sorted(found.items()):
        if w is None:
            continue  # not a cell folder (e.g. a folder of another layout)
        why = problems(plan, w)
        if why:
            left_out.append((rel, why))
            continue
        cell = Cell.from_texts(w, rel)
        if cell not in grid:
            counted.append(cell)
    return counted, left_out
