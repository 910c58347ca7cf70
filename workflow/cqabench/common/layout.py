"""Where a config's outputs and the shared caches live on disk.

Each config writes only under its own results tree, `results/<name>/` (its `name:` key), so
the sample, config/dexter.yaml and config/tanq.yaml never plan or overwrite each other's files.
What is worth keeping across configs and across `make clean` lies outside every results tree
and is keyed so that sharing it is safe: the LLM item cache (`cache/llm/`, keyed by model
identity, backend, dtype, sampling and the full prompt: cqabench.generation.llm.cache.item_key) and the
ONNX export cache (`cache/onnx/`, keyed by the model's files and the exporter's versions:
cqabench.retrieval.encoders.export_cache_entry).
"""

from __future__ import annotations

import re

RESULTS_ROOT = "results"  # every config's results tree lies below it; `make clean` removes it
DEFAULT_NAME = "sample"  # config/config.yaml's name: the defaults of the standalone commands
ONNX_CACHE_DIR = "cache/onnx"  # CQABENCH_EXPORT_CACHE's default
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"  # one path component: no "/", "..", or hidden folder
# A folder name may be 255 bytes (`getconf NAME_MAX` on ext4, xfs, tmpfs); a 300-character name
# failed at the first mkdir with "File name too long". 64 is far inside that and any name a user
# reads in a path.
NAME_MAX = 64


def name_problem(name: object) -> str:
    """Why `name` cannot name a results tree ("" if it can)."""
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        return f"name: {name!r} must be one folder name (letters, digits, '_' and '-'): it is the results tree results/<name>/"
    if len(name) > NAME_MAX:
        return (
            f"name: {len(name)} characters ({name[:20]}...), at most {NAME_MAX}: it is the results tree "
            "results/<name>/, one folder name"
        )
    return ""


def results_dir(name: str) -> str:
    """The results tree of the config named `name`."""
    return f"{RESULTS_ROOT}/{name}"


DEFAULT_RESULTS = results_dir(DEFAULT_NAME)
