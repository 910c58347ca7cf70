"""The `cqabench` command: the one entry point every Snakemake rule calls.

Each stage registers its subcommands from `cqabench.commands.<stage>`, so a stage
adds commands without touching this file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from cqabench.errors import CqaError

STAGES = ("data", "retrieval", "generation", "evaluate", "report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cqabench", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for stage in STAGES:
        module = importlib.import_module(f"cqabench.commands.{stage}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except CqaError as exc:
        print(f"cqabench {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
