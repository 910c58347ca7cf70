"""The `cqabench` command: the one entry point every Snakemake rule calls.

Each stage registers its subcommands from `cqabench.commands.<stage>`, so a stage
adds commands without touching this file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading

from cqabench.common import redact
from cqabench.common.errors import CqaError

STAGES = ("data", "retrieval", "generation", "evaluation", "report", "models", "estimate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cqabench", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for stage in STAGES:
        module = importlib.import_module(f"cqabench.commands.{stage}")
        module.register(sub)
    return parser


def subcommand_parsers(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser by its full name ('search', 'cache drop'), nested ones included:
    what checks of the whole command line (every flag documented, every documented call valid) walk."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix}{name}"] = sub
                found.update(subcommand_parsers(sub, f"{prefix}{name} "))
    return found


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM (Snakemake or SLURM cancelling a job) as an exit that runs `finally` blocks.

    Python's default SIGTERM ends the process at once; an engine such as vLLM's EngineCore
    then outlives its job and keeps the CPU or GPU busy. Raising SystemExit lets the
    backends' close() run; finished items are already in the item cache.
    """
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # No key in any output (issue 21): every log line, the error line below and any uncaught
    # traceback are redacted (cqabench.common.redact); configured keys are registered as they are read.
    redact.install()
    try:
        return int(args.func(args) or 0)
    except CqaError as exc:
        print(redact.redact(f"cqabench {args.command}: error: {exc}"), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
