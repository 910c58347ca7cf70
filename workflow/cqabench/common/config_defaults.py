"""The configuration's defaults, read from their one home: the schema's `default:` values.

`snakemake.utils.validate` fills a schema default only inside a section the config has (a
config without `retrieval:` gets no `retrieval.k`), and the estimate (`validate=False`), the
tests and the jobs' own settings read configs it never filled. Code that needs a default asks
the schema here instead of writing the literal a second time, so changing a default in
workflow/schemas/config.schema.yaml changes it everywhere at once.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"  # this checkout's


@functools.cache
def _schema() -> dict[str, Any]:
    """The schema, parsed once per process (libyaml's loader where PyYAML has it: 23 ms, not 123)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(SCHEMA.read_text(encoding="utf-8"), Loader=loader)  # noqa: S506 (a safe loader)


def _resolved(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """`node`, or the `$defs` entry its local `$ref` ("#/$defs/<name>") points to."""
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolved(_schema()["$defs"][ref.removeprefix("#/$defs/")])
    return node


def _node(path: tuple[str, ...]) -> Mapping[str, Any]:
    """The schema of the config key at `path`; a name the schema does not list (a dataset's,
    written "*" by convention) walks into `additionalProperties`."""
    node: Mapping[str, Any] = _schema()
    for i, key in enumerate(path):
        node = _resolved(node)
        properties = node.get("properties") or {}
        if key in properties:
            node = properties[key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            raise LookupError(f"{'.'.join(path[: i + 1])}: no such config key in {SCHEMA}")
    return _resolved(node)


def default(*path: str) -> Any:
    """The schema's `default:` of the config key at `path` (`default("generation", "threads")`)."""
    node = _node(path)
    if "default" not in node:
        raise LookupError(f"{'.'.join(path)}: {SCHEMA} gives this config key no default")
    return copy.deepcopy(node["default"])


def configured(config: Mapping[str, Any] | None, *path: str) -> Any:
    """The config's value at `path`, or the schema's default where the config (or a section on
    the way to it) leaves it out or null, as a validated config would hold it."""
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
        if node is None:
            return default(*path)
    return node
