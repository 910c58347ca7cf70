"""Which workflow profile a Snakemake run applies, for the SLURM guard of workflow/rules/common.smk.

A workflow profile wins over `--profile` key by key, so on SLURM any workflow profile (the
workstation's profiles/default above all) would replace profiles/slurm's account, GPU model and
sizes (docs/cluster.md). The guard used to look for the `--workflow-profile` flag only, so naming
profiles/default explicitly passed it; it now asks what Snakemake applies, however it is spelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def workflow_profile_flag(argv: Sequence[str]) -> str | None:
    """The `--workflow-profile` value as Snakemake's own parser reads it (abbreviations, `=`, the
    last of several), or None when it is not given."""
    from snakemake.cli import get_argument_parser

    args, _ = get_argument_parser().parse_known_args(list(argv))
    return args.workflow_profile


def workflow_profile_in_effect(flag: str | None, snakefile: Path, cwds: Sequence[Path]) -> Path | None:
    """The profile Snakemake applies as the workflow profile, or None (`none`, or nothing found).

    The same search as `snakemake.cli.parse_args` (Snakemake 9): a file path as given; else the
    path, then profiles/<value>, then profiles/<value> beside the Snakefile, `default` when no
    flag is given. Snakemake takes relative paths from the directory it was started in, which
    `--directory` has left by the time the Snakefile runs: `cwds` are the candidates for it (the
    current one and the launching shell's $PWD); a profile under either counts.
    """
    if flag == "none":
        return None
    given = Path(flag) if flag else None
    for cwd in cwds:
        if given is not None and (cwd / given).is_file():
            return cwd / given
    name = given or Path("default")
    candidates = [c for cwd in cwds for c in (cwd / name, cwd / "profiles" / name)] + [
        snakefile.parent / "profiles" / name
    ]
    return next((c for c in candidates if c.exists()), None)


def cluster_profile_problem(argv: Sequence[str], snakefile: Path, cwds: Sequence[Path]) -> str | None:
    """The refusal a SLURM run prints when a workflow profile is in effect, naming it; else None."""
    profile = workflow_profile_in_effect(workflow_profile_flag(argv), snakefile, cwds)
    if profile is None:
        return None
    return (
        f"the SLURM executor runs with {profile} applied as Snakemake's workflow profile, whose values "
        "(default-resources, resources, latency-wait) override profiles/slurm's key by key; "
        "run: snakemake --workflow-profile none --profile profiles/slurm ..."
    )
