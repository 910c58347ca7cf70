"""A config file (or the config Snakemake holds) -> its plan -> its estimate, in seconds.

The config is read as Snakemake reads it: strict YAML (`cqabench.planner.config_files`, duplicated keys
and tabs named with their line), then validated against the workflow's schema with its defaults
filled in, then planned by `cqabench.planner.Plan` with the checks every `snakemake -n` makes; its
jobs are Snakemake's own DAG of the same config (`cqabench.estimate.dag`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cqabench.common.config_defaults import SCHEMA
from cqabench.common.errors import ConfigError
from cqabench.estimate.dag import Job
from cqabench.estimate.model import GPU_CLASS, JobCosts
from cqabench.estimate.rates import load_rates
from cqabench.estimate.tables import Estimate, build


def load_config(path: str | Path) -> dict[str, Any]:
    from cqabench.planner.config_files import load_file

    if not Path(path).is_file():
        raise ConfigError(f"{path}: config file not found (or not a file)")
    config = load_file(path)
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: a config file holds a mapping, got {type(config).__name__}")
    return config


def validated(config: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The config with the schema's defaults, as the workflow sees it (snakemake.utils.validate)."""
    from snakemake.utils import validate

    config = dict(config)
    try:
        validate(config, schema=str(SCHEMA))
    except Exception as exc:  # snakemake's WorkflowError names the failing key
        raise ConfigError(f"the config does not match {SCHEMA}: {exc}") from None
    return config


def plan_costs(
    config: Mapping[str, Any],
    root: str | Path = ".",
    rates_file: str | Path | None = None,
    gpu_class: str = GPU_CLASS,
    validate: bool = True,
    jobs: list[Job] | None = None,
) -> JobCosts:
    """`validate`: fill the schema's defaults (false for a config the workflow already validated,
    as the estimate rule passes it: its job's environment need not have Snakemake)."""
    from cqabench.planner import Environment, Plan

    root = Path(root)
    plan = Plan(validated(config, root) if validate else dict(config), Environment(root=root))
    rates = load_rates(rates_file) if rates_file else load_rates()
    # Snakemake plans the jobs from the config as given (its own validation fills the defaults)
    return JobCosts(plan, rates, gpu_class=gpu_class, config=config, jobs=jobs)


def estimate(
    config: Mapping[str, Any],
    gpus: int,
    cores: int,
    root: str | Path = ".",
    rates_file: str | Path | None = None,
    gpu_class: str = GPU_CLASS,
    validate: bool = True,
    jobs: list[Job] | None = None,
    prices: dict[str, tuple[float, float]] | None = None,
) -> Estimate:
    """`jobs`: Snakemake's jobs of this config when already known (else asked of Snakemake);
    `prices`: API model -> USD per million (input, output) tokens (cqabench.estimate.spread)."""
    return build(plan_costs(config, root, rates_file, gpu_class, validate, jobs), gpus, cores, prices)


def write_estimate(
    config_file: str | Path, rates_file: str | Path, out_dir: str | Path, gpus: int, cores: int, log: str | Path
) -> None:
    """The `estimate` rule's job: the run's resolved config (results/<name>/config.json, validated
    already) estimated on `gpus` and `cores`, its tables written to `out_dir`, the printed text to
    `log`. A localrule: Snakemake's DAG needs Snakemake, which the rules' conda envs lack."""
    import json

    from cqabench.common.io import write_text
    from cqabench.estimate.tables import render_text, write

    config = json.loads(Path(config_file).read_text(encoding="utf-8"))
    est = estimate(config, gpus, cores, root=".", rates_file=rates_file, validate=False)
    write(est, out_dir)
    write_text(render_text(est), log)
