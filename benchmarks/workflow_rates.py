"""Per-job fixed costs from a finished run's Snakemake `benchmark:` files, for the estimate.

The scale benchmarks (scale_corpus.py, generate_engines.py, ...) measure what a job costs per
item; what a small job costs regardless (starting Python and the JVM, imports, reading a config,
writing the outputs) is best seen on the jobs of a real run, whose corpora are tiny. Per rule
family, from the run's benchmark files and the estimate's item counts of the same jobs:

- per-item families (prepare, pool_corpus, export_beir, bm25_index, BM25 search; the MiniLM
  index's fixed cost is scale_corpus.py's, measured at sample-sized shards): fixed_s = the median over the run's jobs of (CPU s - the per-item CPU the rates
  file already has), at least 1 s; BM25 search's peak RSS too;
- jobs whose cost does not grow with anything a config sizes (evaluate_retrieval,
  evaluate_generation, convert_model, aggregate, report_tables, report_plots, report_page,
  estimate, import_run, fuse_runs (at sample scale ranx's import, not the fusion, is its
  cost); a generate job that assembles its answers from an engine batch's
  cache: `generate_cached`): light.cpu.<rule> fixed_s = median CPU s, peak_mb = largest peak
  RSS; light.cpu.any = the largest of those (for rules the run did not have).

CPU seconds (the benchmark files' `cpu_time`), not wall seconds: a small job is one process
doing one thing, so on an unloaded machine its wall time is its CPU time, and on the shared
machines here the wall time mostly measures the other jobs (a prepare job of 2,000 passages took
15 s of wall time for 1.7 s of CPU at a load of 16).

    python benchmarks/workflow_rates.py --run-dir DIR [--config config/config.yaml] --write-rates benchmarks/rates.yaml

DIR is where the run's Snakemake ran (its results/ holds benchmarks/; the config's raw files
are read there, to count the items).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

LIGHT = (
    "evaluate_retrieval",
    "evaluate_generation",
    "convert_model",
    "aggregate",
    "report_tables",
    "report_plots",
    "report_page",
    "estimate",
    "import_run",
    "fuse_runs",
)


def main() -> int:
    from cqabench.estimate import measured, run
    from cqabench.estimate.model import JobCosts
    from cqabench.estimate.rates import Rates, load_rates, provenance, update_rates

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--config", type=Path, default=ROOT / "config/config.yaml")
    ap.add_argument("--benchmarks", type=Path, default=None, help="default: RUN_DIR/results/benchmarks")
    ap.add_argument("--rates", type=Path, default=ROOT / "benchmarks/rates.yaml", help="the per-item rates to subtract")
    ap.add_argument("--write-rates", type=Path, default=None)
    args = ap.parse_args()
    bench = args.benchmarks or args.run_dir / "results/benchmarks"
    # The items of each job (documents, queries) come from the estimate itself, whose fixed costs
    # are what this measures: count with placeholders where the rates file has none yet.
    data = copy.deepcopy(load_rates(args.rates).data)
    for family, names in {
        "prepare": ["fixed_s"],
        "pool_corpus": ["fixed_s"],
        "export_beir": ["fixed_s"],
        "bm25_index": ["fixed_s"],
        "bm25_search": ["fixed_s", "peak_mb"],
    }.items():
        entry = data["rates"].setdefault(family, {}).setdefault("cpu", {}).setdefault("any", {})
        for name in names:
            entry.setdefault(name, {"value": 0, "unit": "", "assumed": {"source": "placeholder while measuring"}})
    plan = run.plan_costs(run.load_config(args.config), root=args.run_dir, rates_file=args.rates).plan
    costs = JobCosts(plan, Rates(data, args.rates))
    frame = measured.read(bench)
    if frame.empty:
        raise SystemExit(f"no benchmark files under {bench}")
    prov = provenance(source=f"{bench} ({len(frame)} jobs of {args.config})")
    out: dict[tuple[str, str, str], dict[str, tuple[float, str]]] = {}

    def jobs(rule: str, pick=lambda c: True) -> list[tuple[dict, object]]:
        rows = [r for r in frame.to_dict("records") if r["rule"] == rule]
        return [(r, c) for r in rows if pick(c := costs.cost(rule, r["wildcards"]))]

    def fixed(family: str, model: str, pairs: list, per_item) -> None:
        if not pairs:
            return
        rest = [max(1.0, r["cpu_time"] - per_item(c)) for r, c in pairs]
        entry = out.setdefault((family, "cpu", model), {})
        entry["fixed_s"] = (
            statistics.median(rest),
            f"CPU s per job besides its items (median of {len(rest)} jobs of a run)",
        )

    r = costs.rates
    per_m = lambda fam: lambda c: r.value(fam, "cpu", "any", "cpu_s_per_mdoc") * c.items.get("documents", 0) / 1e6  # noqa: E731
    fixed("prepare", "any", jobs("prepare"), per_m("prepare"))
    plan = costs.plan

    def pooled(c) -> float:  # one member file is hard-linked: nothing per document
        members = [sp for ds in plan.corpus_members(c.wildcards["corpus"]) for sp in plan.corpus_splits(ds)]
        return per_m("pool_corpus")(c) if len(members) > 1 else 0.0

    fixed("pool_corpus", "any", jobs("pool_corpus"), pooled)
    fixed("export_beir", "any", jobs("export_beir"), per_m("export_beir"))
    fixed(
        "bm25_index",
        "any",
        jobs("index", lambda c: c.model and costs.plan.retriever_configs[c.model]["type"] == "bm25"),
        per_m("bm25_index"),
    )
    bm25_search = [
        p
        for rule in ("search", "decompose_search")
        for p in jobs(rule, lambda c: costs.plan.retriever_configs[c.model]["type"] == "bm25")
    ]
    queries = sorted({c.items["queries"] for _, c in bm25_search})
    if len(queries) >= 3:  # fit CPU s = fixed + per query over the run's searches (the sample's small corpora)
        import numpy as np

        slope, intercept = np.polyfit(
            [c.items["queries"] for _, c in bm25_search], [p["cpu_time"] for p, _ in bm25_search], 1
        )
        if slope > 0:
            out[("bm25_search", "cpu", "any")] = {
                "fixed_s": (
                    max(float(intercept), 1.0),
                    f"CPU s per job (intercept over {len(bm25_search)} searches of a run)",
                ),
                "s_per_query": (
                    float(slope),
                    "CPU s per query (slope over a run's searches; corpora of at most 10k documents)",
                ),
            }
    if ("bm25_search", "cpu", "any") not in out:
        fixed(
            "bm25_search",
            "any",
            bm25_search,
            lambda c: c.items["queries"] * r.value("bm25_search", "cpu", "any", "s_per_query"),
        )
    if bm25_search:
        out[("bm25_search", "cpu", "any")]["peak_mb"] = (
            max(p[0]["max_rss"] for p in bm25_search),
            "MB, largest peak RSS of a run's jobs",
        )
    light: dict[str, list[dict]] = {rule: [x for x in frame.to_dict("records") if x["rule"] == rule] for rule in LIGHT}
    light["generate_cached"] = [
        x
        for x in frame.to_dict("records")
        if x["rule"] == "generate" and x["wildcards"]["llm"] in costs.plan.gen_batch_llms
    ]
    worst_s, worst_mb = 0.0, 0.0
    for rule, rows in light.items():
        if not rows:
            continue
        s = statistics.median(x["cpu_time"] for x in rows)
        mb = max(x["max_rss"] for x in rows)
        # a model conversion is no light job; a fusion's is ranx's import (numba), ~20 CPU s
        if rule not in ("convert_model", "fuse_runs"):
            worst_s, worst_mb = max(worst_s, s), max(worst_mb, mb)
        out[("light", "cpu", rule)] = {
            "fixed_s": (max(s, 1.0), f"CPU s per job (median of {len(rows)} jobs of a run)"),
            "peak_mb": (mb, "MB, largest peak RSS of a run's jobs"),
        }
    if worst_s:
        out[("light", "cpu", "any")] = {
            "fixed_s": (worst_s, "s per job: the largest median of the light rules"),
            "peak_mb": (worst_mb, "MB: the largest peak of the light rules"),
        }
    for (family, device, model), values in out.items():
        print(f"{family}.{device}.{model}: " + ", ".join(f"{k} {v:.3g}" for k, (v, _) in values.items()))
        if args.write_rates:
            update_rates(args.write_rates, family, device, model, values, prov)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
