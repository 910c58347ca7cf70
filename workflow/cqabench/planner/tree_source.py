"""Which config file a results tree belongs to, so that two configs with one `name` are named.

Each config writes under `results/<name>/`. Two config files that set the same `name` (a copy
of config/config.yaml edited into another experiment) used to share one tree without a word:
each run reran the jobs whose settings differ and overwrote the other's files and fact table.

Why a warning and not a refusal: sharing a tree on purpose is the documented way to add a
setting (`--configfile config/config.yaml extra.yaml`, a second file without `name`), and a
config file renamed or moved keeps its tree rightly. So the tree's *source* is the config file
that sets `name` (the last one that does, as later files override earlier ones); a real run
records it in `results/<name>/.config_source`, and a plan whose source is another file prints
one warning naming both. Paths are kept relative to the working directory (a moved checkout
keeps its record).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from cqabench.planner.config_files import load_file

SOURCE_FILE = ".config_source"


def name_source(configfiles: Iterable[str | Path]) -> str | None:
    """The last of `configfiles` that sets `name`, relative to the working directory; None if none does."""
    source = None
    for path in configfiles:
        if Path(path).is_file():
            loaded = load_file(path)
            if isinstance(loaded, dict) and "name" in loaded:
                source = path
    return None if source is None else os.path.relpath(os.path.abspath(source))


def recorded_source(results: str | Path) -> str | None:
    """The config file the tree's last real run took its `name` from (None: no run recorded one)."""
    try:
        return (Path(results) / SOURCE_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def source_warning(results: str | Path, configfiles: Iterable[str | Path]) -> str | None:
    """One line when this plan's `name` comes from another config file than the tree's last run's."""
    recorded, current = recorded_source(results), name_source(configfiles)
    if recorded is None or current is None or recorded == current:
        return None
    return (
        f"warning: {results}/ was last run from {recorded}, and {current} sets the same name: both configs "
        f"write this one tree (jobs whose settings differ are rerun over the other's files); give one of them "
        f"its own `name`, or delete {Path(results) / SOURCE_FILE} if {current} replaces {recorded}"
    )


def record_source(results: str | Path, configfiles: Iterable[str | Path]) -> None:
    """Write the tree's source (a real run's start; a dry run records nothing)."""
    current = name_source(configfiles)
    if current is None:
        return
    from cqabench.common.io import write_text

    Path(results).mkdir(parents=True, exist_ok=True)
    write_text(current + "\n", Path(results) / SOURCE_FILE)
