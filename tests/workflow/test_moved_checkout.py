"""Issue 36, item 7: a copied or moved checkout with its results plans "Nothing to be done".

After `cp -a` of a finished clone, 36 `generate` jobs (and the 36 evaluations after them) used to
rerun: their params held the absolute path of vLLM's interpreter beside the checkout, and
`estimate` took the rates file by its absolute path. Params now name an interpreter's role (its
path is exported by the rules' shell prefix, which is no rerun trigger) and every input is
relative, so where the checkout lives changes no job.

A checkout is copied whole into a temporary folder (the data in `resources/` are linked: a path
outside the checkout, the same in both copies); every output of the default config is made as an
empty stand-in, up to date with `snakemake --touch` (the session fixture `sample_stand_ins`,
shared with test_rebuild), the folder is copied to another path as `cp -a` copies it (times
kept), and the copy plans nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dry_runs import DryRun
from test_rebuild import _n


@pytest.mark.snakemake
def test_moved_checkout_plans_nothing(sample_stand_ins: tuple[Path, DryRun], tmp_path: Path) -> None:
    first, forced = sample_stand_ins  # conftest.copied_checkout, its stand-ins up to date
    assert sum(forced.counts.values()) > 200  # the whole default plan, generation included
    assert forced.counts["generate"] > 0 and forced.counts["estimate"] == 1

    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.copytree(first, moved, symlinks=True)  # `cp -a`: links kept, modification times kept
    plan = _n(moved)
    assert plan.counts == {}, plan.text[-3000:]
    assert "Nothing to be done" in plan.text
