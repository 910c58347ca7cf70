"""Which model a retriever's job used, pinned how: the model columns of its runs and metrics.

A `package:NAME` model is pinned by the package's version and its files, a local folder by its
fingerprint, a hub name by the commit its fetched folder holds (cqabench.models.store).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from cqabench.common.provenance import NOT_INSTALLED, distribution_version, folder_fingerprint
from cqabench.models import store as model_store

MODEL_KEYS = ("model", "doc_model", "query_model", "checkpoint")
NO_MODEL = "none (no model: {type})"


def retriever_model(settings: Mapping[str, Any] | None) -> dict[str, str]:
    """model_source / model_hash / model_revision of a retriever, as its job's environment sees it.

    BM25 has no model and says so. A `package:NAME` model is pinned by the package's version
    and its files; a local folder by its fingerprint; a hub name by the commit its fetched
    folder `models/<org>/<name>` holds (its REVISION file, `cqabench.models.store`) and that
    folder's fingerprint, else only by a configured `revision` ("unpinned" otherwise).
    """
    settings = settings or {}
    spec = next((settings[k] for k in MODEL_KEYS if isinstance(settings.get(k), str) and settings[k]), None)
    if spec is None:
        what = NO_MODEL.format(type=settings.get("type") or "unknown retriever")
        return {"model_source": what, "model_hash": what, "model_revision": what}
    revision = str(settings.get("revision") or "")
    folder: Path | None = None
    if spec.startswith("package:"):
        name = spec.removeprefix("package:")
        found = importlib.util.find_spec(name)
        if found is not None and found.submodule_search_locations:
            folder = Path(next(iter(found.submodule_search_locations)))
        dists = metadata.packages_distributions().get(name, [name])
        version = distribution_version(dists)
        revision = revision or (f"{dists[0]} {version}" if version else f"{name} {NOT_INSTALLED}")
    elif Path(spec).is_dir():
        folder = Path(spec)
        revision = revision or "local folder (pinned by model_hash)"
    elif model_store.is_hub_id(spec) and model_store.fetched_revision(model_store.model_folder(spec)):
        folder = model_store.model_folder(spec)
        revision = str(model_store.fetched_revision(folder))
    if folder is not None and folder.is_dir():
        digest = folder_fingerprint(folder)
    else:
        digest = hashlib.sha256(json.dumps({"source": spec, "revision": revision}).encode()).hexdigest()
    return {"model_source": spec, "model_hash": digest, "model_revision": revision or "unpinned"}
