"""Fetch Hugging Face checkpoints into `models/<org>/<name>/`, on a node with network.

Jobs run offline (`HF_HUB_OFFLINE=1`) and read hub models only from that folder
(`cqabench.models.store`). This is the one place that talks to the hub, through the real
`huggingface_hub` client (`snapshot_download`); `HF_ENDPOINT` or `endpoint=` points it at a
mirror (the tests use a loopback server).

Per model: the configured `revision` (a commit, or a branch / tag such as `main`) is resolved
to a commit by the hub's model-info call; the files are downloaded *at that commit* into a
hidden sibling `.<name>.partial/` (an interrupted download resumes there), their sizes are
checked against the hub's listing, `MANIFEST.json` and then `REVISION` (the commit) are
written, and the folder is renamed into place. A folder with a `REVISION` is complete; a
branch-revision model already fetched is kept at its locked commit unless `update=True`.

The token of a gated model (Llama-2) comes from `$HF_TOKEN` only (no token file is read), is
registered with `cqabench.common.redact` before any request, and appears in no message or file.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import posixpath
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cqabench.common import redact
from cqabench.common.errors import CqaError
from cqabench.models.store import COMMIT, MANIFEST_FILE, REVISION_FILE, fetched_revision, model_folder, read_manifest

log = logging.getLogger(__name__)

TOKEN_ENV = "HF_TOKEN"
# Files of other frameworks that no cqabench job loads (TF, Flax, Rust, ONNX / OpenVINO exports:
# the dense encoder exports its own ONNX graph from the torch weights).
UNUSED_FILES = ("*.h5", "*.msgpack", "*.ot", "*.tflite", "*.onnx", "*.onnx_data", "onnx/*", "openvino/*", "coreml/*")
# Torch pickles that duplicate a folder's safetensors (Llama-2 and Mistral ship both: twice the
# download); transformers loads the safetensors when both are there.
DUPLICATE_WEIGHTS = ("pytorch_model*.bin", "consolidated*.pth")


class FetchError(CqaError):
    """A model could not be fetched: the hub refused it, the revision or repository is unknown, ..."""


@dataclass(frozen=True)
class ModelRequest:
    """One hub repository a config needs, at the revision the config gives, and who names it."""

    repo_id: str
    revision: str
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class FetchResult:
    repo_id: str
    commit: str
    folder: Path
    status: str  # "fetched" | "present"
    files: int
    bytes: int


def select_files(names: Sequence[str]) -> list[str]:
    """The repository files worth fetching: no other framework's weights, and no torch pickle
    in a folder that has safetensors (per folder: sentence-transformers keep modules in subfolders)."""
    keep = [n for n in names if not any(fnmatch.fnmatch(n, p) for p in UNUSED_FILES)]
    with_safetensors = {posixpath.dirname(n) for n in keep if n.endswith(".safetensors")}
    return sorted(
        n for n in keep
        if not (posixpath.dirname(n) in with_safetensors
                and any(fnmatch.fnmatch(posixpath.basename(n), p) for p in DUPLICATE_WEIGHTS))
    )  # fmt: skip


def hub_token(environ: Mapping[str, str] | None = None) -> str | None:
    """The token from $HF_TOKEN (registered for redaction), else None: no token file is read."""
    token = (os.environ if environ is None else environ).get(TOKEN_ENV) or None
    redact.register_key(token)
    return token


def _describe(exc: Exception, repo_id: str, revision: str, token: str | None) -> str:
    """What the hub said, redacted, with what to do about it."""
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    status = getattr(getattr(exc, "response", None), "status_code", None)
    said = redact.redact(" ".join(str(exc).split()))[:300]
    if isinstance(exc, RevisionNotFoundError):
        return f"revision {revision!r} does not exist on the hub ({said})"
    if isinstance(exc, GatedRepoError) or status in (401, 403):
        how = (
            f"the token in ${TOKEN_ENV} was refused: has its account accepted the model's licence?"
            if token
            else f"set ${TOKEN_ENV} to a token of an account that accepted it (https://huggingface.co/settings/tokens)"
        )
        return (
            f"the hub refused access (HTTP {status}): a gated or private model; accept its licence at "
            f"https://huggingface.co/{repo_id}, then {how} ({said})"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return f"no such repository on the hub ({said})"
    if isinstance(exc, HfHubHTTPError):
        return f"the hub answered HTTP {status} ({said})"
    return f"{type(exc).__name__}: {said}"


def _check_online() -> None:
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise FetchError(
            "HF_HUB_OFFLINE is set: fetching needs the network; run `cqabench fetch-models` "
            "without it, on a node that has network (a login node)"
        )


def _publish(partial: Path, folder: Path) -> None:
    """Rename the complete download into place; an older fetch of the repository is replaced."""
    old = folder.parent / f".{folder.name}.old.{os.getpid()}"
    if folder.exists():
        folder.rename(old)
    partial.rename(folder)
    if old.exists():
        shutil.rmtree(old)


def fetch_model(
    request: ModelRequest,
    directory: str | Path,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    update: bool = False,
    max_workers: int = 4,
) -> FetchResult:
    """Fetch one repository into `<directory>/<repo_id>` at the configured revision (see module doc)."""
    from huggingface_hub import HfApi, snapshot_download

    folder = model_folder(request.repo_id, directory)
    present = fetched_revision(folder)
    pinned = bool(COMMIT.match(request.revision))
    if present and (present == request.revision or (not pinned and not update)):
        return _present(request, folder, present)
    _check_online()
    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        info = api.model_info(request.repo_id, revision=request.revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 (every hub failure becomes one message naming the model)
        raise FetchError(
            f"{request.repo_id}@{request.revision}: {_describe(exc, request.repo_id, request.revision, token)}"
        ) from None
    commit = str(info.sha or "")
    if not COMMIT.match(commit):
        raise FetchError(
            f"{request.repo_id}@{request.revision}: the hub gave no commit for the revision (got {commit!r})"
        )
    if present == commit:
        return _present(request, folder, present)
    sizes = {s.rfilename: s.size for s in info.siblings or []}
    files = select_files(list(sizes))
    if not files:
        raise FetchError(f"{request.repo_id}@{commit}: the repository lists no files")
    partial = folder.parent / f".{folder.name}.partial"
    partial.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    log.info("fetching %s at %s (%s): %d files", request.repo_id, commit, request.revision, len(files))
    try:
        snapshot_download(
            request.repo_id,
            revision=commit,
            local_dir=str(partial),
            allow_patterns=files,
            endpoint=endpoint,
            token=token or False,
            max_workers=max_workers,
        )
    except Exception as exc:  # noqa: BLE001
        raise FetchError(
            f"{request.repo_id}@{commit}: download failed: {_describe(exc, request.repo_id, commit, token)}; "
            f"rerun to resume ({partial} keeps what arrived)"
        ) from None
    got = {}
    for name in files:
        path = partial / name
        if not path.is_file():
            raise FetchError(f"{request.repo_id}@{commit}: {name} is missing after the download; rerun to resume")
        got[name] = path.stat().st_size
        if sizes.get(name) is not None and got[name] != sizes[name]:
            raise FetchError(
                f"{request.repo_id}@{commit}: {name} has {got[name]} bytes, the hub lists {sizes[name]}; "
                "rerun to fetch it again"
            )
    shutil.rmtree(partial / ".cache", ignore_errors=True)  # the client's per-file download metadata
    # An interrupted fetch of another commit may have left files this commit does not have.
    for path in sorted(partial.rglob("*"), reverse=True):
        if path.is_file() and path.relative_to(partial).as_posix() not in got:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    manifest = {"repo_id": request.repo_id, "revision": request.revision, "commit": commit, "config_keys": list(request.keys),
                "files": got, "skipped": sorted(set(sizes) - set(files)), "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "huggingface_hub": _hub_version()}  # fmt: skip
    (partial / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (partial / REVISION_FILE).write_text(commit + "\n", encoding="utf-8")  # last: marks the folder complete
    _publish(partial, folder)
    log.info(
        "fetched %s at %s into %s: %d files, %d bytes, %.1f s",
        request.repo_id,
        commit,
        folder,
        len(got),
        sum(got.values()),
        time.monotonic() - began,
    )
    return FetchResult(request.repo_id, commit, folder, "fetched", len(got), sum(got.values()))


def _present(request: ModelRequest, folder: Path, commit: str) -> FetchResult:
    files = read_manifest(folder).get("files") or {}
    log.info("%s: already in %s at %s", request.repo_id, folder, commit)
    return FetchResult(request.repo_id, commit, folder, "present", len(files), int(sum(files.values())))


def _hub_version() -> str:
    import huggingface_hub

    return str(huggingface_hub.__version__)


def fetch_all(
    requests: Sequence[ModelRequest],
    directory: str | Path,
    *,
    endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
    update: bool = False,
) -> list[FetchResult]:
    """Fetch every request; one failure does not stop the others, and all failures are raised together."""
    token = hub_token(environ)
    results, failures = [], []
    for request in requests:
        try:
            results.append(fetch_model(request, directory, endpoint=endpoint, token=token, update=update))
        except FetchError as exc:
            failures.append(f"{exc} (config: {', '.join(request.keys) or '?'})")
    if failures:
        raise FetchError(f"{len(failures)} of {len(requests)} models could not be fetched:\n  " + "\n  ".join(failures))
    return results


def summary(results: Sequence[FetchResult]) -> dict[str, Any]:
    return {r.repo_id: {"commit": r.commit, "folder": str(r.folder), "status": r.status, "files": r.files,
                        "bytes": r.bytes} for r in results}  # fmt: skip
