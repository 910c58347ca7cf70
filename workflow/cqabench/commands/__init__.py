"""Subcommands of `cqabench`, one module per workflow stage; each exposes `register(subparsers)`.

A workflow job gets what it needs beyond its files and wildcards from the run's resolved
configuration (`--config results/<name>/config.json`, written by Snakemake's main process before
it plans: `cqabench.planner.resolved_config`): it rebuilds the plan from it (`plan_of`) and asks
the planner what it decided for this job (a cell's settings, its metrics record), so no job's
command line carries JSON and both always agree; a file that is not the config the run planned
(edited, or rewritten by another config of the same name) is refused by name.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqabench.common.errors import ConfigError

if TYPE_CHECKING:
    from cqabench.planner import Plan


SERIALIZATION_HELP = "table serialization: pipe | markdown | linear"  # help of every --serialization


def whole_number(minimum: int) -> Callable[[str], int]:
    """argparse type of a count that must be >= `minimum` (`--limit`, `--cores`, `--gpus`): a
    smaller value is a usage error naming the flag, not a slice, a "-1 s" bill or a traceback."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
        return value

    parse.__name__ = f"whole number >= {minimum}"  # what argparse names in its error
    return parse


def json_object(text: str, flag: str) -> dict[str, Any]:
    """A command-line JSON object (settings, cells); a malformed one names its flag."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object, got {type(value).__name__}")
    return value


def is_json_text(text: str) -> bool:
    """A flag's value given as JSON text rather than as a file or a name."""
    return text.lstrip().startswith(("{", "["))


def config_arg(text: str, flag: str = "--config") -> dict[str, Any]:
    """The run's configuration: a JSON file (the workflow's results/<name>/config.json), or the
    JSON object itself as text."""
    if is_json_text(text):
        return json_object(text, flag)
    path = Path(text)
    if not path.is_file():
        raise ConfigError(
            f"{flag}: {text!r} is not a file (the workflow writes results/<name>/config.json) nor a JSON object"
        )
    from cqabench.planner.resolved_config import verify

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{flag} {path}: not UTF-8 text (byte {exc.start})") from None
    verify(path, text)  # in a workflow job: the config this run planned, or a clear refusal
    return json_object(text, f"{flag} {path}")


def plan_of(config: Mapping[str, Any]) -> Plan:
    """The workflow's plan of a resolved configuration, rebuilt in a job's working directory."""
    from cqabench.planner import Environment, Plan

    return Plan(config, Environment(root=Path(".")))
