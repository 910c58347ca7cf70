"""Strict reading of config files: duplicated keys refused, YAML errors with file, line and column.

Snakemake loads `--configfile` with PyYAML's default loader, which keeps the last of two equal
keys without a word (a dataset written twice silently loses its first settings) and reports a
syntax error without its position. The workflow re-reads each config file Snakemake was given
with this loader before planning (workflow/rules/common.smk), so such a file stops the run with
one line naming where the problem sits.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from cqabench.common.errors import ConfigError


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader whose mappings refuse a key that appears twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, yaml.Mark] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            mark = key_node.start_mark
            try:
                hash(key)
            except TypeError:
                continue  # an unhashable key: SafeLoader's own error below names it
            if key in seen:
                first = seen[key]
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"duplicated key {key!r} (first at line {first.line + 1}, column {first.column + 1})",
                    mark,
                )
            seen[key] = mark
        return super().construct_mapping(node, deep=deep)


def _position(exc: yaml.YAMLError) -> str:
    """`line L, column C` of the error (1-based, as editors count), or '' when PyYAML gives none."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    if not context:
        return problem
    mark = getattr(exc, "context_mark", None)
    if mark is not None and mark is not getattr(exc, "problem_mark", None):
        context += f" (started at line {mark.line + 1}, column {mark.column + 1})"
    return f"{context}: {problem}"


def load_text(text: str, source: str = "<string>") -> object:
    """Parse `text` strictly; a YAML error becomes ConfigError('<source>: line L, column C: ...')."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        where = _position(exc)
        raise ConfigError(f"{source}: {where + ': ' if where else ''}{_problem(exc)}") from None


def load_file(path: str | Path) -> object:
    """Read and strictly parse one config file (UTF-8, as Snakemake reads it)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: byte {exc.start}: not UTF-8 ({exc.reason})") from None
    return load_text(text, str(path))


def check_files(paths: Iterable[str | Path]) -> None:
    """Strictly re-read every config file Snakemake loaded; raise ConfigError at the first problem."""
    for path in paths:
        if Path(path).is_file():  # a missing one is Snakemake's own error, reported before this
            load_file(path)
