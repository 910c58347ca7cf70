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
                    None,
                    None,
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


# What a user who tried `--config key=value` needs instead (config/README.md, "Changing one setting").
ONE_SETTING = (
    "to change one setting, put it in a second config file after the first, and the target "
    "after `--`: snakemake --configfile config/config.yaml extra.yaml -- TARGET "
    '(config/README.md, "Changing one setting")'
)


def check_schema(config: dict, schema_path: str | Path, overrides: dict | None = None) -> None:
    """Validate `config` against the JSON schema; raise ConfigError with one line naming the key
    and the problem (Snakemake's own `validate` prints the whole schema, over a thousand lines).

    `overrides` are Snakemake's `--config` pairs: they *replace* the embedded default (the
    Snakefile loads config/config.yaml only when no config is given) and cannot set a nested key
    (`generation.max_questions=2` is refused by Snakemake itself, `max_questions=2` becomes a new
    top-level key), so the message then says how to change one setting instead.
    """
    import jsonschema

    schema = load_file(schema_path)
    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is None:
        return
    where = ".".join(str(p) for p in error.absolute_path) or "the top level"
    advice = (
        f"`--config {' '.join(sorted(overrides))}` sets top-level keys only, and without --configfile "
        "replaces the embedded default; " + ONE_SETTING
        if overrides
        else "every key is explained in config/README.md"
    )
    raise ConfigError(f"config: {where}: {error.message} ({advice})")
