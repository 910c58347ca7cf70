"""The run's resolved configuration, `results/<name>/config.json`: written while Snakemake reads
the Snakefile, checked by every job that reads it.

Jobs that need more than their files and wildcards (a cell's settings, its metrics record, the
report's setup) rebuild the plan from this file (`cqabench ... --config`, `commands.plan_of`).
It used to be the output of a rule rewritten on every config change, and every job listed it as
an `ancient()` input. That lost targets (issue 36): Snakemake masks the jobs downstream of a job
that must run, then skips every masked job it reaches only through an ancient input, so after a
config change `snakemake <target>` ran the config rule alone and exited 0 without the target.

So the main Snakemake process writes the file before the DAG exists (`refresh`, atomically,
only when its text differs: an unchanged config leaves the file and its mtime alone, a moved
checkout plans nothing). No job makes it; jobs keep it `ancient()`, so a config change reruns
a job only through its own params. What a job reads is the config Snakemake planned:
`refresh` rewrites a stale or hand-edited file at every start, and each job's shell carries the
sha256 of the text written (`ENV_FILE`, `ENV_SHA256`, exported by the rules' shell prefix, which
is no rerun trigger), so `verify` refuses a file edited or rewritten by another config of the
same `name` after this run was planned.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.common.io import write_text

# Set for every job by the workflow's shell prefix: the file this run wrote and the sha256 of its text.
ENV_FILE = "CQABENCH_CONFIG_FILE"
ENV_SHA256 = "CQABENCH_CONFIG_SHA256"


def text_of(config: Mapping[str, Any]) -> str:
    """The file's text: indented JSON in the config's own key order (the datasets' order is the
    order of every table)."""
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def refresh(path: str | Path, config: Mapping[str, Any]) -> bool:
    """Make `path` hold `config`'s text; True when it was (re)written. Atomic, and a file that
    already holds the text is not touched (its mtime is what `ancient()` inputs compare)."""
    path = Path(path)
    text = text_of(config)
    try:
        if path.read_bytes() == text.encode("utf-8"):
            return False
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the resolved config ({exc.strerror})") from None
    try:
        write_text(text, path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the resolved config ({exc.strerror})") from None
    return True


def verify(path: str | Path, text: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse `path` (read as `text`) in a workflow job when it is not the config this run
    planned; outside the workflow (no `ENV_FILE`, or another file) there is nothing to compare."""
    env = os.environ if environ is None else environ
    planned_file, planned_sha = env.get(ENV_FILE), env.get(ENV_SHA256)
    if not planned_file or not planned_sha:
        return
    if os.path.realpath(planned_file) != os.path.realpath(path):
        return
    found = sha256_of(text)
    if found != planned_sha:
        raise ConfigError(
            f"{path}: is not the config this run planned (sha256 {found[:12]}, planned "
            f"{planned_sha[:12]}): it was edited, or rewritten by another config with the same "
            "name, after Snakemake started; run snakemake again (it rewrites the file from the "
            "config), and never edit this file: edit the config file instead"
        )
