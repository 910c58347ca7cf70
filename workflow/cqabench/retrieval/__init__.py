"""Retriever registry: a config `type` names a family module, imported only when used.

Importing lazily keeps BM25 runs free of torch, and a missing optional family (e.g. colbert)
fails only for the configs that ask for it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.common.io import atomic_dir
from cqabench.retrieval.base import (
    Doc,
    QueryText,
    Results,
    check_index,
    index_signature,
    write_settings,
)

FAMILIES: dict[str, str] = {
    "bm25": "cqabench.retrieval.bm25",
    "dense": "cqabench.retrieval.dense",
    "splade": "cqabench.retrieval.splade",
    "colbert": "cqabench.retrieval.colbert",
}


def family(settings: Mapping[str, Any]) -> ModuleType:
    """The module implementing `settings['type']` (see `cqabench.retrieval.base`)."""
    kind = settings.get("type")
    if kind not in FAMILIES:
        raise ConfigError(f"retriever type {kind!r} is unknown; valid types: {', '.join(sorted(FAMILIES))}")
    return importlib.import_module(FAMILIES[kind])


def _search_only(module: ModuleType) -> frozenset[str]:
    return frozenset(getattr(module, "SEARCH_ONLY_KEYS", ()))


# Families whose models run in a chosen precision (`encoders.check_dtype`); the rerank pipeline
# has its own `dtype` (cqabench.retrieval.rerank).
DTYPE_FAMILIES = ("dense", "splade")


def resolve(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Settings with the family's defaults filled in and checked (`type` kept)."""
    module = family(settings)
    if settings.get("dtype") is not None and settings["type"] not in DTYPE_FAMILIES:
        raise ConfigError(
            f"{settings['type']} retriever: setting dtype applies to the {' and '.join(DTYPE_FAMILIES)} retrievers "
            "(and rerank pipelines) only: this family runs no model in a precision of ours"
        )
    resolver = getattr(module, "resolve", None)
    resolved = dict(resolver(dict(settings))) if resolver else dict(settings)
    resolved["type"] = settings["type"]
    return resolved


def recorded(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What a result row records beyond a retriever's config: the `dtype` its model ran in, which
    depends on the device when the config does not say (float16 on a GPU, float32 on the CPU)."""
    if settings.get("type") not in DTYPE_FAMILIES:
        return {}
    return {"dtype": resolve(settings)["dtype"]}


def signature(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that decide an index's content (what the index rule should rerun on)."""
    return index_signature(resolve(settings), _search_only(family(settings)))


def build_index(docs: Iterable[Doc], index_dir: str | Path, settings: Mapping[str, Any]) -> None:
    """Build into a temporary sibling, record settings.json, then rename: no half-built index."""
    module = family(settings)
    settings = resolve(settings)
    with atomic_dir(index_dir) as tmp:
        module.build_index(docs, tmp, settings)
        write_settings(tmp, settings)


def search(index_dir: str | Path, queries: list[QueryText], k: int, settings: Mapping[str, Any]) -> Results:
    """Search an index after checking it was built with these settings."""
    module = family(settings)
    settings = resolve(settings)
    if k < 1:
        raise ConfigError(f"retrieval depth k must be at least 1, got {k}")
    check_index(Path(index_dir), settings, _search_only(module))
    return module.search(Path(index_dir), queries, k, settings)
