"""`cqabench estimate`: the bill of a config before it runs (cqabench.estimate)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cqabench.commands import whole_number
from cqabench.common.errors import ConfigError


def _estimate(args: argparse.Namespace) -> int:
    from cqabench.commands import config_arg
    from cqabench.estimate import run, tables

    if (args.configfile is None) == (args.config is None):
        raise ConfigError(
            "give the configuration as --configfile FILE (a config to validate) or --config FILE "
            "(the workflow's resolved results/<name>/config.json, or its JSON) (one of them)"
        )
    config = run.load_config(args.configfile) if args.configfile else config_arg(args.config)
    from cqabench.estimate.spread import parse_prices

    est = run.estimate(
        config,
        args.gpus,
        args.cores,
        root=args.root,
        rates_file=args.rates,
        gpu_class=args.gpu_class,
        validate=args.configfile is not None,  # --config: the workflow's, validated already
        prices=parse_prices(args.price),
    )
    if args.out_dir:
        tables.write(est, args.out_dir)
    if args.markdown:
        from cqabench.common.io import write_text

        write_text(tables.render_markdown(est), args.markdown)
    if not args.quiet:
        sys.stdout.write(tables.render_text(est))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="what a config's jobs will cost (time, CPU/GPU-hours, memory, disk), "
        "from the measured rates in benchmarks/rates.yaml, without running a job",
    )
    p.add_argument("--configfile", type=Path, help="a config file, as given to snakemake --configfile")
    p.add_argument(
        "--config",
        help="the workflow's resolved configuration, results/<name>/config.json (what its "
        "estimate rule passes; validated already), or the same as JSON text",
    )
    p.add_argument(
        "--gpus", type=whole_number(0), default=8, help="GPUs for the makespan bound (default 8: the reference node)"
    )
    p.add_argument("--cores", type=whole_number(1), default=64, help="CPU cores for the makespan bound (default 64)")
    p.add_argument("--gpu-class", default="rtx3090", help="device class of the GPU jobs' rates (default rtx3090)")
    p.add_argument(
        "--rates", type=Path, default=None, help="the rates file (default benchmarks/rates.yaml under --root)"
    )
    p.add_argument("--root", type=Path, default=Path("."), help="the working directory the workflow runs in")
    p.add_argument("--out-dir", type=Path, help="write estimate.csv / .parquet / _jobs.parquet / .json here")
    p.add_argument("--markdown", type=Path, help="write the per-rule table as Markdown here")
    p.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="NAME=INPUT,OUTPUT",
        help="an API model's price in USD per million input and output tokens, for the money line "
        "(repeatable; over the config's estimate.prices; no price is built in)",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=_estimate)
