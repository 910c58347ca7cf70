"""Issue 36, item 7: a copied or moved checkout with its results plans "Nothing to be done".

After `cp -a` of a finished clone, 36 `generate` jobs (and the 36 evaluations after them) used to
rerun: their params held the absolute path of vLLM's interpreter beside the checkout, and
`estimate` took the rates file by its absolute path. Params now name an interpreter's role (its
path is exported by the rules' shell prefix, which is no rerun trigger) and every input is
relative, so where the checkout lives changes no job.

A checkout is copied whole into a temporary folder (the data, `resources/`, is linked: a path
outside the checkout, the same in both copies); every output of the default config is made as an
empty stand-in, up to date with `snakemake --touch` (test_rebuild's helpers), the folder is
copied to another path as `cp -a` copies it (times kept), and the copy plans nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dry_runs import dry_run
from test_rebuild import REPO, _n, _stand_ins

# what a clone holds that the workflow reads (the venvs and results/ of the real one aside)
CHECKOUT = ("Snakefile", "workflow", "config", "profiles", "envs", "benchmarks")


def _checkout(root: Path) -> Path:
    root.mkdir()
    for name in CHECKOUT:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, root / name)
    (root / "resources").symlink_to(REPO / "resources")
    return root


@pytest.mark.snakemake
def test_moved_checkout_plans_nothing(tmp_path: Path) -> None:
    first = _checkout(tmp_path / "first")
    forced = dry_run("config.yaml")  # `-n --forceall`: the same plan in any copy of the checkout
    assert sum(forced.counts.values()) > 200  # the whole default plan, generation included
    assert forced.counts["generate"] > 0 and forced.counts["estimate"] == 1
    _stand_ins(first, forced)  # also asserts that the first checkout itself plans nothing

    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.copytree(first, moved, symlinks=True)  # `cp -a`: links kept, modification times kept
    plan = _n(moved)
    assert plan.counts == {}, plan.text[-3000:]
    assert "Nothing to be done" in plan.text
