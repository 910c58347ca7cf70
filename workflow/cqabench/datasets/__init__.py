"""Registry of dataset loaders: one module per dataset, raw files → `CanonicalData`.

Each module defines `RAW_FILES` (role → required?) and
`load(files: Mapping[str, Path], split: str, limit: int | None = None) -> CanonicalData`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

LOADERS: dict[str, str] = {
    "musique": "musique",
    "2wikimultihopqa": "twowiki",
    "strategyqa": "strategyqa",
    "ambigqa": "ambigqa",
    "ottqa": "ottqa",
    "tatqa": "tatqa",
    "finqa": "finqa",
    "tanq": "tanq",
}
DATASETS = tuple(LOADERS)


def loader(dataset: str) -> ModuleType:
    from cqabench.errors import ConfigError

    if dataset not in LOADERS:
        raise ConfigError(f"unknown dataset {dataset!r}; valid: {', '.join(DATASETS)}")
    return importlib.import_module(f"cqabench.datasets.{LOADERS[dataset]}")
