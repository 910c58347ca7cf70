"""Where fetched Hugging Face checkpoints live, and how an offline job finds one.

Compute nodes have no network and every job runs with `HF_HUB_OFFLINE=1`, so a hub name in
the config (`facebook/contriever`, `meta-llama/Llama-2-7b-hf`) is never looked up on the hub
or in a per-user cache: it names the folder `<models_dir>/<org>/<name>/` that
`cqabench fetch-models` filled on a node with network (`cqabench.models.fetch`). A folder
counts as fetched only when its `REVISION` file exists: the fetch writes it last, holding the
commit the files came from, so a half-finished download is never loaded and every result row
can say which commit it used.

`models_dir` is the config key (default `models`, beside `results/`, shared by every config);
jobs get it through `CQABENCH_MODELS_DIR`, set by the workflow's shell prefix. This module
imports nothing heavy: encoders, LLM backends and the report all use it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError

MODELS_DIR_ENV = "CQABENCH_MODELS_DIR"
DEFAULT_MODELS_DIR = "models"
REVISION_FILE = "REVISION"  # the commit the folder's files came from; written last by the fetch
MANIFEST_FILE = "MANIFEST.json"  # repo, requested revision, commit, files and sizes
# A hub repository id: "name" or "org/name" (the hub's own rule: letters, digits, "-", "_", ".").
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
# Sources that are not hub ids: models inside PyPI packages, GGUF files (converted by a rule).
LOCAL_PREFIXES = ("package:", "gguf-package:", "gguf:")
FETCH_COMMAND = "cqabench fetch-models --configfile {config}"


def models_dir(explicit: str | Path | None = None) -> Path:
    """The fetched-models folder: `explicit`, else $CQABENCH_MODELS_DIR, else `models`."""
    return Path(explicit or os.environ.get(MODELS_DIR_ENV) or DEFAULT_MODELS_DIR)


def is_hub_id(spec: object, root: Path = Path(".")) -> bool:
    """Whether a model setting names a hub repository (rather than a package, GGUF or folder).

    An existing folder wins over the hub reading of the same text, as transformers does.
    """
    if not isinstance(spec, str) or not spec or spec.startswith(LOCAL_PREFIXES):
        return False
    if Path(spec).is_absolute() or (root / spec).is_dir():
        return False
    return bool(_HUB_ID.match(spec)) and ".." not in spec


def model_folder(repo_id: str, directory: str | Path | None = None) -> Path:
    """`<models_dir>/<org>/<name>`: where the fetch puts a repository, and where jobs load it from."""
    return models_dir(directory) / repo_id


def fetched_revision(folder: str | Path) -> str | None:
    """The commit in a fetched folder's REVISION file; None when the fetch has not completed or a
    file it fetched is gone or changed since (`damage`)."""
    path = Path(folder) / REVISION_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text if COMMIT.match(text) and damage(folder) is None else None


def damage(folder: str | Path) -> str | None:
    """Why a fetched folder no longer holds what its fetch wrote, or None: the first file its
    MANIFEST lists that is missing or has another size.

    Why: REVISION marks a fetch complete, but a weights file deleted (or cut short) afterwards
    left a folder that `fetch-models` kept and `list-models --check` passed, and a job then
    failed inside transformers. A size check costs one stat per file, no read.
    """
    files = read_manifest(folder).get("files")
    if not isinstance(files, dict):
        return None  # no manifest: nothing to compare with
    for name, size in sorted(files.items()):
        try:
            got = (Path(folder) / name).stat().st_size
        except OSError:
            return f"{name} is missing from {folder} (its {MANIFEST_FILE} lists it)"
        if isinstance(size, int) and got != size:
            return f"{name} in {folder} has {got} bytes, its {MANIFEST_FILE} lists {size}"
    return None


def read_manifest(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / MANIFEST_FILE
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (FileNotFoundError, ValueError):
        return {}


def fetch_hint(config: str = "<your config>") -> str:
    return (
        f"fetch it on a node with network (a login node): `{FETCH_COMMAND.format(config=config)}` "
        f'or `snakemake fetch_models --configfile {config}` (docs/cluster.md, "Getting models onto offline nodes")'
    )


def locate(spec: str, what: str = "model", revision: str | None = None, directory: str | Path | None = None) -> str:
    """The folder a job loads `spec` from: itself unless it is a hub id, else its fetched folder.

    A hub id whose folder is missing or incomplete is a ConfigError naming the model and the
    command that fetches it, never a lookup on the hub or in a user cache. A configured commit
    (`revision`: 40 hex digits) must be the one the folder was fetched at; a branch or tag name
    (e.g. `main`) accepts whatever commit the fetch locked into REVISION.
    """
    if not is_hub_id(spec):
        return spec
    folder = model_folder(spec, directory)
    commit = fetched_revision(folder)
    if commit is None:
        why = damage(folder) if (folder / REVISION_FILE).is_file() else None
        raise ConfigError(
            f"{what}: model {spec!r} is not in {models_dir(directory)}/ "
            f"({why or f'{folder / REVISION_FILE} is missing'}); {fetch_hint()}"
        )
    if revision and COMMIT.match(revision) and commit != revision:
        raise ConfigError(
            f"{what}: model {spec!r} in {folder} is commit {commit}, the config pins {revision}; {fetch_hint()}"
        )
    return str(folder.absolute())  # absolute: a worker that changes directory (colbert-ai) still finds it


# The revision key that goes with each model key of a retriever's settings; `revision` is also
# the fallback of the other two (a DPR pair at one revision, a recipe re-resolved without `model`).
REVISION_KEYS = {"model": "revision", "query_model": "query_revision", "doc_model": "doc_revision"}


def revision_of(settings: Mapping[str, Any], model_key: str) -> str | None:
    """The revision that pins a retriever's `model_key`: its own key, else `revision`."""
    value = settings.get(REVISION_KEYS[model_key]) or settings.get("revision")
    return str(value) if value else None


def revision_settings(settings: Mapping[str, Any], model_keys: tuple[str, ...], family: str) -> dict[str, str]:
    """The revision keys of a retriever's settings, checked, for its resolved recipe (a changed
    revision is other weights: it rebuilds the index).

    `query_revision` / `doc_revision` pin `query_model` / `doc_model`, `revision` every model key
    without its own; one that pins nothing would be recorded in every result row while changing
    nothing, so it is refused.
    """
    out = {}
    for model_key in model_keys:
        key = REVISION_KEYS[model_key]
        value = settings.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise ConfigError(
                f"{family} retriever: {key} must be a non-empty string (a commit or a branch), got {value!r}"
            )
        pinned = model_keys if key == "revision" else (model_key,)
        if not any(settings.get(k) for k in pinned):
            raise ConfigError(f"{family} retriever: {key} is set but {' / '.join(pinned)} is not (it pins {model_key})")
        if not any(is_hub_id(settings.get(k)) for k in pinned):
            # A revision picks a hub commit; a package: model is pinned by its package's version, a
            # folder by its fingerprint. Kept, it would replace that pin as every row's
            # model_revision while the weights stayed what they were.
            models = ", ".join(f"{k} {settings[k]!r}" for k in pinned if settings.get(k))
            raise ConfigError(
                f"{family} retriever: {key} {value!r} pins a hub model, but {models} is none (a package: "
                "model is pinned by its package's version, a folder by its files); drop it"
            )
        out[key] = value
    return out
