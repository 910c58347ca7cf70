"""Provenance stamps: what produced a number, so two runs can be told apart later.

Evaluation jobs put these into metrics.json (`provenance`), and the report records them for the
report as a whole. Nothing here fails: a missing git or package reads as null, since a number
without a commit is still a number.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

DEFAULT_PACKAGES = ("cqabench", "snakemake", "torch", "transformers", "sentence-transformers",
                    "pyserini", "faiss-cpu", "colbert-ai", "vllm", "pytrec-eval-terrier", "openai",
                    "numpy", "pandas", "pyarrow", "scipy")


def config_hash(config: Any) -> str:
    """sha256 of the config as canonical JSON: key order and formatting do not change it."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()



def package_versions(names: tuple[str, ...] | list[str] = DEFAULT_PACKAGES) -> dict[str, str]:
    """Installed versions of the named distributions; absent ones are left out."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def git_commit(repo: str | Path = ".") -> str | None:
    """HEAD of the checkout, with '-dirty' when tracked files differ; None outside git."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def collect(config: Any = None, repo: str | Path = ".", packages=DEFAULT_PACKAGES) -> dict[str, Any]:
    """The provenance block for a metrics.json or a report."""
    return {
        "config_hash": config_hash(config) if config is not None else None,
        "git_commit": git_commit(repo),
        "package_versions": package_versions(packages),
        "python": platform.python_version(),
    }
