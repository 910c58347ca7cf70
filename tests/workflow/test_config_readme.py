"""config/README.md explains every key: every property path of the config schema, and every key
that config/config.yaml, config/dexter.yaml and config/tanq.yaml set (retriever family keys,
which the schema leaves to each family's resolve(), included). The Snakemake workflow catalog
shows this file as the workflow's configuration section."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text(encoding="utf-8"))
CONFIGS = ("config.yaml", "dexter.yaml", "tanq.yaml")
WILD = "*"  # a key the user chooses (a dataset, an LLM name): <name> in the README


def _resolve(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def schema_paths(node: Any = SCHEMA, prefix: str = "") -> set[str]:
    """Every property path of the schema; a map's key (additionalProperties) is WILD."""
    node, out = _resolve(node), set()
    if not isinstance(node, dict):
        return out
    for key, child in (node.get("properties") or {}).items():
        out |= {_join(prefix, key)} | schema_paths(child, _join(prefix, key))
    if isinstance(node.get("additionalProperties"), dict):
        out |= {_join(prefix, WILD)} | schema_paths(node["additionalProperties"], _join(prefix, WILD))
    return out


def config_paths(value: Any, node: Any = SCHEMA, prefix: str = "") -> set[str]:
    """Every key a config sets, as a path; keys the schema maps (additionalProperties) read WILD."""
    node, out = _resolve(node), set()
    if not isinstance(value, dict):
        return out
    props = (node or {}).get("properties") or {} if isinstance(node, dict) else {}
    extra = node.get("additionalProperties") if isinstance(node, dict) else None
    for key, child in value.items():
        if key in props:
            path, sub = _join(prefix, key), props[key]
        elif isinstance(extra, dict):
            path, sub = _join(prefix, WILD), extra
        else:  # a family's own key (retrievers.<name>.k1): the schema does not list it
            path, sub = _join(prefix, key), None
        out |= {path} | config_paths(child, sub, path)
    return out


def documented() -> set[str]:
    """The README's `key.paths` with `<placeholder>` segments read as WILD."""
    text = (REPO / "config" / "README.md").read_text(encoding="utf-8")
    return {re.sub(r"<[^>]+>", WILD, code) for code in re.findall(r"`([A-Za-z_<][^`\s]*)`", text)}


def test_every_schema_property_is_documented() -> None:
    missing = sorted(schema_paths() - documented())
    assert not missing, f"config/README.md does not explain these schema keys: {missing}"


def test_every_key_of_the_shipped_configs_is_documented() -> None:
    used = set().union(
        *(config_paths(yaml.safe_load((REPO / "config" / f).read_text(encoding="utf-8"))) for f in CONFIGS)
    )
    missing = sorted(used - documented())
    assert not missing, f"config/README.md does not explain these keys of {CONFIGS}: {missing}"


def test_the_path_walk_by_hand() -> None:
    """A few paths the walk must produce, so a broken walk cannot pass the tests above vacuously."""
    paths = schema_paths()
    assert {
        "datasets.*.files.*.*.sha256",
        "llms.*.sampling.stop",
        "generation.open_book.corpus.name",
        "report.significance.baseline",
        "retrievers.*.type",
    } <= paths
    sample = config_paths(
        {
            "retrievers": {"bm25": {"type": "bm25", "fields": {"title": 1.0}}},
            "datasets": {"musique": {"files": {"train": {"questions": {"path": "x"}}}}},
        }
    )
    assert sample == {
        "retrievers",
        "retrievers.*",
        "retrievers.*.type",
        "retrievers.*.fields",
        "retrievers.*.fields.title",
        "datasets",
        "datasets.*",
        "datasets.*.files",
        "datasets.*.files.*",
        "datasets.*.files.*.*",
        "datasets.*.files.*.*.path",
    }
    assert len(paths) > 120
