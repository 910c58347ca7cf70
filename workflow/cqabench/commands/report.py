"""`cqabench` subcommands of the report stage: aggregate, report-tables, report-answers, report-plots,
significance."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from cqabench.commands import config_arg, plan_of
from cqabench.common.errors import ConfigError
from cqabench.common.layout import DEFAULT_RESULTS as R  # the defaults name the sample's tree

log = logging.getLogger(__name__)


def _aggregate(args: argparse.Namespace) -> int:
    from cqabench.report.aggregate import aggregate, find_metric_files

    # --metrics (even empty): exactly those; else --config: the plan's (the workflow's way, what the
    # rule's inputs are), which also says which cells are off the grid; else every one under --results-dir.
    off_grid: set[str] | None = None  # None: no plan, no grid known (the off_grid column is null)
    if args.metrics is not None:
        files = [Path(p) for p in args.metrics]
    elif args.config is not None:
        plan = plan_of(config_arg(args.config))
        files, off_grid = [Path(p) for p in plan.metric_files()], plan.off_grid_metric_files()
    else:
        files = find_metric_files(args.results_dir)
    missing = [str(p) for p in files if not p.exists()]
    if missing:
        raise ConfigError(f"metric files not found: {missing[:5]}")
    rows, pq_rows = aggregate(
        files,
        args.out_metrics,
        args.out_per_question,
        results_dir=args.results_dir,
        data_dir=args.data_dir,
        config_hash=args.config_hash,
        off_grid=off_grid,
    )
    print(
        f"{len(files)} metric files -> {rows} metric rows ({args.out_metrics}), "
        f"{pq_rows} per-question rows ({args.out_per_question})"
    )
    return 0


def not_planned_of(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The cells left out of the plan: --not-planned, or what the planner says of the plan of
    --not-planned-from (Plan.not_planned_cells, the workflow's way), else none."""
    if args.not_planned_from is not None:
        if args.not_planned is not None:
            raise ConfigError("give --not-planned or --not-planned-from, not both")
        from cqabench.report.answer_comparisons import validate_not_planned

        return validate_not_planned(
            plan_of(config_arg(args.not_planned_from, "--not-planned-from")).not_planned_cells()
        )
    return not_planned_arg(args.not_planned)


def not_planned_arg(text: str | None) -> list[dict[str, Any]]:
    """--not-planned: a JSON list [{dataset, split, setting, reason}, ...], or a path to a file holding one."""
    from cqabench.report.answer_comparisons import validate_not_planned

    if text is None or not text.strip():
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        path = Path(text)
        if not path.is_file():
            raise ConfigError(f"--not-planned: neither JSON ({exc.msg}) nor an existing file: {text[:80]!r}") from None
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc2:
            raise ConfigError(f"--not-planned: {path} is not valid JSON ({exc2.msg})") from None
    return validate_not_planned(value)


def _answers(args: argparse.Namespace, metrics=None, per_question=None) -> None:
    from cqabench.report.answer_comparisons_render import render_answers
    from cqabench.report.tables import read_fact_table

    metrics = read_fact_table(args.metrics) if metrics is None else metrics
    per_question = read_fact_table(args.per_question) if per_question is None else per_question
    doc = render_answers(
        metrics,
        per_question,
        not_planned_of(args),
        args.out_dir,
        seed=args.seed,
        bootstrap_resamples=args.bootstrap_resamples,
        test_resamples=args.test_resamples,
        correction=args.correction,
        alpha=args.alpha,
    )
    groups = {tuple(c[k] for k in ("dataset", "split", "serialization", "llm", "prompt")) for c in doc["cells"]}
    print(
        f"answers_by_setting: {len(groups)} groups, {len({c['cell_id'] for c in doc['cells']})} cells, "
        f"{len(doc['comparisons'])} comparisons, {len(doc['not_planned'])} not planned"
    )


def _print_summaries(summaries: list[dict[str, Any]]) -> None:
    for s in summaries:
        print(
            f"{s['id']}: OK {s['ok']}, FAIL {s['fail']}, not comparable {s['not_comparable']}, "
            f"missing {s['missing']}, n/a {s['not_available']}, ours only {s['ours_only']}"
        )


def _tables(args: argparse.Namespace) -> int:
    from cqabench.common.io import write_json
    from cqabench.report.expected import load_expected
    from cqabench.report.tables import read_fact_table, render_tables

    if not args.expected and args.table_summaries is None:
        raise ConfigError(
            "report-tables: give --expected (render the paper tables) or --table-summaries "
            "(gather the summaries the table_<id> rules wrote)"
        )
    specs = [spec for path in args.expected or [] for spec in load_expected(path)]
    not_planned_of(args)  # a malformed list fails before any table is written
    metrics, per_question = read_fact_table(args.metrics), read_fact_table(args.per_question)
    if args.table_summaries is not None:  # the workflow: each paper table is its own job (paper-table)
        summaries = [s for p in args.table_summaries for s in _read_summaries(Path(p))]
        write_json(summaries, Path(args.out_dir) / "summary.json")
    else:
        config = _config_arg(args.config)
        paper_data = _paper_data(args, config)
        summaries = render_tables(
            metrics, per_question, specs, args.out_dir, run=args.run, paper_data=paper_data, config=config
        )
    _print_summaries(summaries)
    _answers(args, metrics, per_question)
    _retrieval_significance(args, metrics, per_question)
    return 0


def _read_summaries(path: Path) -> list[dict[str, Any]]:
    """One `<id>.summary.json`: the list of table summaries `paper-table` wrote."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--table-summaries: {path}: not a readable JSON file ({exc})") from None
    if not isinstance(value, list) or not all(isinstance(s, dict) and "id" in s for s in value):
        raise ConfigError(f"--table-summaries: {path}: not a list of table summaries (JSON objects with an 'id')")
    return value


def _table(args: argparse.Namespace) -> int:
    """One paper table from its own cells' metric files (the table_<id> rule), nothing else."""
    from cqabench.report.aggregate import build_metrics_table, build_per_question_table
    from cqabench.report.expected import load_expected
    from cqabench.report.tables import render_tables

    specs = [spec for path in args.expected for spec in load_expected(path) if spec.id == args.table]
    if not specs:
        raise ConfigError(f"--table: {args.table!r} is no table of {args.expected}")
    off_grid: set[str] | None = None  # as in `aggregate`: known from the plan only
    if args.metrics is None:  # the table's own cells, as the planner gives them (the rule's inputs)
        if args.config is None:
            raise ConfigError("paper-table: give the table's --metrics files, or --config to take its planned cells'")
        plan = plan_of(config_arg(args.config))
        args.metrics, off_grid = plan.table_inputs(args.table)["metrics"], plan.off_grid_metric_files()
    missing = [p for p in args.metrics if not Path(p).is_file()]
    if missing:
        raise ConfigError(f"metric files not found: {missing[:5]}")
    # The fact-table rows of these cells, built as `aggregate` builds them (same columns, types).
    metrics = build_metrics_table(args.metrics, args.results_dir, args.config_hash, off_grid=off_grid).to_pandas()
    per_question = None
    if specs[0].source == "per_question":
        per_question = build_per_question_table(args.metrics, args.results_dir, args.data_dir, off_grid).to_pandas()
    config = _config_arg(args.config)
    paper_data = _paper_data(args, config)
    summaries = render_tables(
        metrics,
        per_question,
        specs,
        args.out_dir,
        run=args.run,
        paper_data=paper_data,
        config=config,
        summary_name=f"{args.table}.summary.json",
    )
    print(f"{len(args.metrics)} metric files")
    _print_summaries(summaries)
    return 0


def _config_arg(text: str | None) -> dict[str, Any] | None:
    """--config: the run's configuration, a file or JSON (what the comparability check reads), or None."""
    return None if text is None else config_arg(text)


def _paper_data(args: argparse.Namespace, config: dict[str, Any] | None) -> bool:
    """--paper-data, else the config's report.paper_data (the schema's default without a config)."""
    from cqabench.common.config_defaults import configured

    return bool(args.paper_data or configured(config, "report", "paper_data"))


def _retrieval_significance(args: argparse.Namespace, metrics, per_question) -> None:
    from cqabench.report.retrieval_significance import render

    doc = render(
        per_question,
        args.out_dir,
        metrics=metrics,
        baseline=args.baseline,
        correction=args.correction,
        alpha=args.alpha,
        resamples=args.test_resamples,
        seed=args.seed,
    )
    tested = [c for c in doc["comparisons"] if c["p_value"] is not None]
    print(
        f"retrieval_vs_baseline: {len(doc['comparisons'])} comparisons vs {args.baseline}, {len(tested)} tested, "
        f"{sum(bool(c['significant']) for c in tested)} significant after {args.correction}"
    )
    from cqabench.report import retrieval_pipelines

    pipes = retrieval_pipelines.render(per_question, metrics, args.out_dir, baseline=args.baseline,
                                       correction=args.correction, alpha=args.alpha, resamples=args.test_resamples,
                                       seed=args.seed)  # fmt: skip
    print(f"retrieval_pipelines: {len(pipes['runs'])} pipeline runs, {len(pipes['rows'])} rows")


def _report_answers(args: argparse.Namespace) -> int:
    _answers(args)
    return 0


def _plots(args: argparse.Namespace) -> int:
    from cqabench.report import plots
    from cqabench.report.tables import read_fact_table

    metrics = read_fact_table(args.metrics)
    per_question = read_fact_table(args.per_question)
    statuses = {}
    if args.k_effect:
        statuses["k_effect"] = plots.plot_k_effect(
            metrics, args.k_effect, per_question, k_values=args.k_values, seed=args.seed, svg=args.k_effect_svg
        )
    if args.heatmap:
        from cqabench.report.comparability import RunContext
        from cqabench.report.expected import load_expected

        specs = [spec for path in args.expected or [] for spec in load_expected(path)]
        paper, name = plots.heatmap_paper(specs, args.heatmap_metric)
        config = _config_arg(args.config)
        run = None if config is None else RunContext.of(config)
        apart = plots.heatmap_not_comparable(metrics, specs, args.heatmap_metric, run)
        statuses["retriever_heatmap"] = plots.plot_heatmap(
            metrics, args.heatmap, metric=args.heatmap_metric, paper=paper, paper_name=name, not_comparable=apart
        )
    if args.skills:
        statuses["tanq_skills"] = plots.plot_skills(per_question, args.skills, metric=args.skills_metric)
    for name, status in statuses.items():
        print(f"{name}: " + ("drawn" if status.drawn else f"not drawn ({status.reason})"))
    if args.manifest:
        plots.write_manifest(statuses, args.manifest)
    return 0


def _page(args: argparse.Namespace) -> int:
    import datetime as dt
    import os

    from cqabench.estimate.measured import compare_dir
    from cqabench.report.expected import load_expected
    from cqabench.report.fact_views import read_for_views
    from cqabench.report.page import write_fact_table_views, write_page
    from cqabench.report.tables import read_fact_table

    config = config_arg(args.config)
    metrics = read_fact_table(args.metrics)
    views = read_for_views(args.metrics) if Path(args.metrics).exists() else metrics  # integers stay integers
    write_fact_table_views(views, args.fact_csv, args.fact_html, args.fact_report_html)
    page_dir = Path(args.out).parent
    specs = [spec for path in args.expected for spec in load_expected(path)]
    written = (
        dt.datetime.fromtimestamp(Path(args.metrics).stat().st_mtime, dt.UTC) if Path(args.metrics).exists() else None
    )
    sections = write_page(
        args.out,
        config=config,
        metrics=metrics,
        tables_dir=args.tables_dir,
        plots_dir=args.plots_dir,
        table_ids=args.table_ids,
        specs=specs,
        benchmarks_dir=args.benchmarks_dir,
        rules=args.rules,
        fact_csv=os.path.relpath(args.fact_csv, page_dir),
        fact_html=os.path.relpath(args.fact_html, page_dir),
        results_at=written,
        snakemake_logs=args.snakemake_logs,
        estimate_dir=args.estimate_dir,
        estimate_comparison=compare_dir(args.estimate_dir, args.benchmarks_dir)
        if args.estimate_dir is not None
        else None,
    )
    print(f"{args.out}: {len(sections)} sections")
    from cqabench.report.fact_views import DATA_URI_LIMIT, data_uri_length

    size = data_uri_length(Path(args.out).stat().st_size, Path(args.out).name)
    if size > DATA_URI_LIMIT:  # `snakemake --report` (one file) would show it as a blank page
        log.warning(
            "%s: %d characters as a data URI, over Chromium's %d: the single-file `snakemake --report` "
            "cannot show it (report.zip can)",
            args.out,
            size,
            DATA_URI_LIMIT,
        )
    return 0


def _significance(args: argparse.Namespace) -> int:
    from cqabench.common.io import write_json
    from cqabench.report.significance import compare, format_result, parse_spec
    from cqabench.report.tables import read_fact_table

    frame = read_fact_table(args.per_question)
    if frame.empty:
        raise ConfigError(f"{args.per_question}: missing or empty; run `snakemake {args.per_question}`")
    result = compare(
        frame, parse_spec(args.a), parse_spec(args.b), args.metric, args.variant, args.method, args.resamples, args.seed
    )
    print(format_result(result))
    if args.json:
        write_json(result, args.json)
    return 0


def _answer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--not-planned",
        default=None,
        help='JSON list [{"dataset", "split", "setting", "reason"}, ...] of cells the workflow did not '
        "plan (or a path to a JSON file); listed with their reason",
    )
    p.add_argument(
        "--not-planned-from",
        default=None,
        help="instead of --not-planned: the run's resolved configuration (results/<name>/config.json); "
        "the cells its plan leaves out, with their reason (what the workflow passes)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the randomization test")
    p.add_argument(
        "--bootstrap-resamples",
        type=int,
        default=9999,
        help="bootstrap resamples of each cell's confidence interval (default %(default)s)",
    )
    p.add_argument(
        "--test-resamples",
        type=int,
        default=10000,
        help="resamples of each paired randomization test (default %(default)s)",
    )
    p.add_argument(
        "--correction",
        choices=("holm", "bh"),
        default="holm",
        help="multiple-testing correction over each family: holm (family-wise error) or bh "
        "(Benjamini-Hochberg, false discovery rate); config report.significance.correction",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="level at which an adjusted p-value is marked *")
    p.add_argument("--baseline", default="bm25", help="the run every other retrieval run is tested against")


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (each sets `func`)."""
    p = sub.add_parser("aggregate", help="every metrics.json -> results/<name>/metrics.parquet + per_question.parquet")
    p.add_argument(
        "--metrics", nargs="*", default=None, help="metrics.json files; omitted: every one under --results-dir"
    )
    p.add_argument("--results-dir", default=R, help="the config's results tree; cell ids are paths relative to it")
    p.add_argument("--data-dir", default=f"{R}/data", help="prepared queries, for question type / skills")
    p.add_argument("--out-metrics", default=f"{R}/metrics.parquet", help="metrics table to write (default %(default)s)")
    p.add_argument(
        "--out-per-question",
        default=f"{R}/per_question.parquet",
        help="per-question table to write (default %(default)s)",
    )
    p.add_argument(
        "--config-hash", default=None, help="sha256 of the run's config (the workflow passes it); every row records it"
    )
    p.add_argument(
        "--config",
        default=None,
        help="without --metrics: the metric files of this resolved configuration's plan "
        "(results/<name>/config.json: what the workflow passes)",
    )
    p.set_defaults(func=_aggregate)

    p = sub.add_parser(
        "report-tables",
        help="the report's tables in one job: summary.json of the paper tables (or the "
        "tables themselves, with --expected), answers_by_setting and the "
        "retrieval significance tables (one paper table: paper-table)",
    )
    p.add_argument("--metrics", default=f"{R}/metrics.parquet", help="the metrics table (default %(default)s)")
    p.add_argument(
        "--per-question", default=f"{R}/per_question.parquet", help="the per-question table (default %(default)s)"
    )
    p.add_argument("--expected", nargs="*", default=None, help="config/expected/*.yaml: render every paper table")
    p.add_argument(
        "--table-summaries",
        nargs="*",
        default=None,
        help="instead of rendering the paper tables, gather the <id>.summary.json files `paper-table` "
        "wrote into summary.json (the workflow builds each table in its own job)",
    )
    p.add_argument("--out-dir", default=f"{R}/report/tables", help="folder the tables go to (default %(default)s)")
    p.add_argument("--run", default=None, help="name of the configuration the numbers come from (captions)")
    p.add_argument(
        "--paper-data",
        action="store_true",
        help="the run is on the paper's full data: the captions leave out the sample caveat",
    )
    p.add_argument(
        "--config",
        default=None,
        help="the run's resolved configuration (results/<name>/config.json, or its JSON): each cell's setup "
        "(split, relevance, questions, corpus) is checked against the paper's; without it a full-data "
        "run's cells read not comparable",
    )
    _answer_args(p)
    p.set_defaults(func=_tables)

    p = sub.add_parser(
        "paper-table",
        help="one paper table (<id>.md, .html, .caption.rst, .summary.json) from the metric files of its own cells",
    )
    p.add_argument("--table", required=True, help="the table id (config/expected/*.yaml)")
    p.add_argument("--expected", nargs="+", required=True, help="the config/expected file(s) holding it")
    p.add_argument(
        "--metrics",
        nargs="*",
        default=None,
        help="metrics.json of the table's cells (per-question files beside them are read for a "
        "per-question table); omitted: those --config's plan gives the table (what the workflow does)",
    )
    p.add_argument("--results-dir", default=R, help="cell ids are paths relative to this")
    p.add_argument("--data-dir", default=f"{R}/data", help="prepared splits, for question type / skills")
    p.add_argument("--out-dir", default=f"{R}/report/tables", help="folder the tables go to (default %(default)s)")
    p.add_argument("--run", default=None, help="name of the configuration the numbers come from (captions)")
    p.add_argument(
        "--paper-data",
        action="store_true",
        help="the run is on the paper's full data: the captions leave out the sample caveat",
    )
    p.add_argument(
        "--config",
        default=None,
        help="the run's resolved configuration, a file (results/<name>/config.json) "
        "or its JSON (each cell's comparability)",
    )
    p.add_argument("--config-hash", default=None, help="sha256 of the run's config (recorded in the rows read)")
    p.set_defaults(func=_table)

    p = sub.add_parser(
        "report-answers",
        help="answers_by_setting.{md,html,json}: closed-book vs RAG@k vs oracle, "
        "bootstrap intervals, paired tests with Holm correction",
    )
    p.add_argument("--metrics", default=f"{R}/metrics.parquet", help="the metrics table (default %(default)s)")
    p.add_argument(
        "--per-question", default=f"{R}/per_question.parquet", help="the per-question table (default %(default)s)"
    )
    p.add_argument("--out-dir", default=f"{R}/report/tables", help="folder the tables go to (default %(default)s)")
    _answer_args(p)
    p.set_defaults(func=_report_answers)

    p = sub.add_parser("report-plots", help="PNG figures: effect of k, retriever heatmap, TANQ skills")
    p.add_argument("--metrics", default=f"{R}/metrics.parquet", help="the metrics table (default %(default)s)")
    p.add_argument(
        "--per-question", default=f"{R}/per_question.parquet", help="the per-question table (default %(default)s)"
    )
    p.add_argument("--k-effect", help="PNG to write: each dataset's primary answer metric against k (DEXTER Figure 2)")
    p.add_argument("--k-effect-svg", default=None, help="also write the k-effect figure (DEXTER Figure 2) as SVG")
    p.add_argument(
        "--manifest",
        default=None,
        help="figures.json: per figure whether it has data marks or why not (the report page reads it)",
    )
    p.add_argument("--heatmap", help="PNG to write: retriever x dataset heatmap of --heatmap-metric")
    p.add_argument("--heatmap-metric", default="ndcg_cut_10", help="the heatmap's metric (default %(default)s)")
    p.add_argument(
        "--expected",
        nargs="*",
        default=None,
        help="config/expected/*.yaml: the heatmap shows Δ to the paper table of its metric",
    )
    p.add_argument(
        "--config",
        default=None,
        help="the run's resolved configuration (results/<name>/config.json, or its JSON): a heatmap cell "
        "that paper table marks not comparable shows no Δ; without it none is judged",
    )
    p.add_argument("--skills", help="PNG to write: TANQ mean per-question --skills-metric by skill")
    p.add_argument("--skills-metric", default="rms_f1", help="answer metric of the skills figure (default %(default)s)")
    p.add_argument(
        "--k-values",
        type=int,
        nargs="*",
        default=None,
        help="x ticks of the k-effect plot (the configured k); default: every k that ran",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed of the error bars")
    p.set_defaults(func=_plots)

    p = sub.add_parser(
        "report-page",
        help="results/<name>/report/index.html: one self-contained report page, and the fact table as CSV and HTML",
    )
    p.add_argument(
        "--config",
        required=True,
        help="the run's resolved configuration, a file (results/<name>/config.json) or its JSON",
    )
    p.add_argument("--metrics", default=f"{R}/metrics.parquet", help="the metrics table (default %(default)s)")
    p.add_argument("--tables-dir", default=f"{R}/report/tables", help="report-tables' folder (default %(default)s)")
    p.add_argument("--plots-dir", default=f"{R}/report/plots", help="report-plots' folder (default %(default)s)")
    p.add_argument(
        "--fact-report-html",
        default=None,
        help="the fact table's compact view for `snakemake --report` (lead columns, every row, within "
        "the browser's data-URI limit)",
    )
    p.add_argument("--table-ids", nargs="*", default=[], help="paper tables in page order (config/expected ids)")
    p.add_argument("--expected", nargs="*", default=[], help="config/expected/*.yaml (the heatmap's paper numbers)")
    p.add_argument(
        "--benchmarks-dir", default=f"{R}/benchmarks", help="Snakemake's per-job benchmark files (default %(default)s)"
    )
    p.add_argument(
        "--rules",
        nargs="*",
        default=[],
        help="every rule of the workflow (those without benchmarks are listed as such)",
    )
    p.add_argument(
        "--snakemake-logs",
        default=None,
        help="Snakemake's run logs (.snakemake/log): wall times of jobs without a benchmark file",
    )
    p.add_argument(
        "--estimate-dir",
        default=None,
        help="the run's estimate (rule estimate: estimate.json, estimate_jobs.parquet), shown beside the benchmarks",
    )
    p.add_argument("--fact-csv", default=f"{R}/report/metrics.csv", help="fact table CSV out (default %(default)s)")
    p.add_argument(
        "--fact-html", default=f"{R}/report/fact_table.html", help="fact table HTML to write (default %(default)s)"
    )
    p.add_argument("--out", default=f"{R}/report/index.html", help="report page to write (default %(default)s)")
    p.set_defaults(func=_page)

    p = sub.add_parser("significance", help="paired test between two cells on the same questions")
    p.add_argument(
        "--per-question", default=f"{R}/per_question.parquet", help="the per-question table (default %(default)s)"
    )
    p.add_argument("--a", required=True, help="cell A as key=value,... over per_question.parquet columns")
    p.add_argument("--b", required=True, help="cell B, likewise")
    p.add_argument("--metric", required=True, help="the metric column compared, e.g. ndcg_cut_10 or rms_f1")
    p.add_argument("--variant", default=None, help="the metric's variant, where it has several")
    p.add_argument(
        "--method",
        choices=("both", "randomization", "bootstrap"),
        default="both",
        help="paired randomization test, paired bootstrap, or both (default %(default)s)",
    )
    p.add_argument("--resamples", type=int, default=10000, help="resamples of each test (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the resampling (default %(default)s)")
    p.add_argument("--json", help="also write the result here")
    p.set_defaults(func=_significance)
