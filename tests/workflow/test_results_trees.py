"""One results tree per config, shared caches outside them (issue 20, points 2 and 7).

Every output of a config lies under `results/<name>/` (its `name:` key), so the sample
(config/config.yaml), config/dexter.yaml and config/tanq.yaml never replan or overwrite each
other's files; before, all three wrote `results/data/...`, and a dexter.yaml run replanned the
sample's prepare jobs ("Params have changed ... --limit 1200"). The item cache (`cache/llm/`) and
the ONNX exports (`cache/onnx/`) are shared by every config and survive `make clean`.

Planner level (fast): each shipped config's targets lie under its own tree. Snakemake level
(slow, one throw-away workdir): every job each config plans (`snakemake -n --forceall`) writes
its outputs, logs and benchmarks only under its own tree, so no path is written by two configs;
then, with the outputs of all three present as stand-ins that `snakemake --touch --forceall` made
up to date config after config (recording each job's params as a run does), each config's
`snakemake -n` still has nothing to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from conftest import TOUCH_CLI, workflow_workdir
from cqabench.common.errors import ConfigError
from cqabench.planner import Environment, Plan
from dry_runs import Job, dry_run

REPO = Path(__file__).resolve().parents[2]
ENV = Environment(root=REPO, python="python", vllm_python=sys.executable)
CONFIGS = {"config.yaml": "sample", "dexter.yaml": "dexter", "tanq.yaml": "tanq"}
# Written by several configs only where sharing is safe (keyed content): no rule does today; one
# that does must plan the same job in every config, or the `snakemake -n` runs below replan it.
SHARED = ("cache/", "models/")


def _config(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


def _targets(plan: Plan) -> list[str]:
    return plan.data_targets() + plan.retrieval_targets() + plan.generation_targets() + plan.evaluation_targets()


# ---- planner level ----


def test_each_shipped_config_plans_only_under_its_own_tree() -> None:
    seen: dict[str, str] = {}
    for file, name in CONFIGS.items():
        plan = Plan(_config(file), ENV)
        assert plan.results == f"results/{name}"
        assert plan.report_dir == f"results/{name}/report"
        assert plan.llm_cache_dir == "cache/llm"  # shared: the default of every shipped config
        targets = _targets(plan)
        assert targets and all(t.startswith(f"results/{name}/") for t in targets), file
        for t in targets:
            assert seen.setdefault(t, file) == file, f"{t} is planned by {seen[t]} and {file}"
    sample = Plan(_config("config.yaml"), ENV)
    assert sample.data_path("tatqa", "dev", "queries") == "results/sample/data/tatqa/dev/queries.parquet"
    assert sample.index_dir("wiki-multihop", "pipe", "bm25") == "results/sample/index/wiki-multihop/pipe/bm25"
    assert sample.batch_manifest("smollm2-135m") == "results/sample/generation/_batches/smollm2-135m.json"


@pytest.mark.parametrize("name", ["", "../sample", "a/b", ".hidden", "with space", 7])
def test_a_name_that_is_not_one_folder_is_refused_naming_the_key(name: object) -> None:
    config = _config("config.yaml")
    config["name"] = name
    with pytest.raises(ConfigError, match=r"name: .* must be one folder name .*results/<name>/"):
        Plan(config, ENV)


def test_the_item_cache_may_not_lie_under_results() -> None:
    """`make clean` removes results/: an item cache there (the old default) would go with it."""
    config = _config("config.yaml")
    config["generation"]["cache_dir"] = "results/cache/llm"
    with pytest.raises(ConfigError) as err:
        Plan(config, ENV)
    assert (
        "generation.cache_dir: 'results/cache/llm' lies inside results/, which `make clean` removes, the item "
        "cache with it; put it outside, e.g. cache/llm (a cache there now keeps its items when moved: "
        "mv results/cache/llm cache/llm)"
    ) in str(err.value)


def test_the_schema_default_of_the_item_cache_is_shared() -> None:
    from snakemake.utils import validate

    config = _config("config.yaml")
    assert "cache_dir" not in config["generation"]
    validate(config, str(REPO / "workflow/schemas/config.schema.yaml"))  # fills in the defaults
    assert config["generation"]["cache_dir"] == "cache/llm"


def _make_n(target: str) -> list[str]:
    done = subprocess.run(["make", "-n", "-s", target], cwd=REPO, capture_output=True, text=True, check=True)
    return [line.split() for line in done.stdout.splitlines() if line.strip()]


def test_make_clean_keeps_the_item_cache_and_the_models() -> None:
    assert _make_n("clean") == [["rm", "-rf", "results", ".snakemake"]]
    assert _make_n("clean-cache") == [["rm", "-rf", "cache"]]
    assert _make_n("clean-models") == [["rm", "-rf", "models"]]


# ---- Snakemake level ----


def _snakemake(work: Path, file: str, *args: str) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "CQABENCH_VLLM_PYTHON": os.environ.get("CQABENCH_VLLM_PYTHON", sys.executable),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    cli = [TOUCH_CLI] if "--touch" in args else ["-m", "snakemake"]
    done = subprocess.run(
        [sys.executable, *cli, "--configfile", f"config/{file}", "--cores", "1", *args],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout + done.stderr


def _stand_ins(work: Path, jobs: list[Job]) -> None:
    """Every output present (as plan_matrix.py makes them): directory() outputs have no suffix."""
    for job in jobs:
        for rel in job.writes:
            path = work / rel
            if not Path(rel).suffix:
                path.mkdir(parents=True, exist_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()


@pytest.mark.snakemake
def test_the_three_configs_never_write_or_replan_each_others_files(tmp_path: Path) -> None:
    work = workflow_workdir(tmp_path)
    plans = {file: dry_run(file).jobs for file in CONFIGS}  # `-n --forceall`, as in any fresh checkout
    for file, jobs in plans.items():  # the whole plan: data, retrieval, generation, metrics, report
        assert {"prepare", "generate", "evaluate_generation", "aggregate", "report_page"} <= {j.rule for j in jobs}, (
            file
        )
    writers: dict[str, set[str]] = {}  # path -> the configs that write it
    for file, jobs in plans.items():
        tree = f"results/{CONFIGS[file]}/"
        for job in jobs:
            for path in job.writes:
                assert path.startswith((tree, *SHARED)), f"{file}: rule {job.rule} writes {path}, outside {tree}"
                writers.setdefault(path, set()).add(file)
    for path, by in writers.items():
        if len(by) > 1:  # only in a shared folder (whether it is the same job: the -n runs below)
            assert path.startswith(SHARED), (path, sorted(by))
    # No written path lies inside another config's directory output (an index folder, a BEIR export).
    folders = {p for p in writers if not Path(p).suffix}
    for path, by in writers.items():
        for parent in Path(path).parents:
            owner = writers.get(str(parent)) if str(parent) in folders else None
            assert owner is None or owner == by, (path, str(parent))

    # The case: with every config's outputs up to date in one checkout, running one config
    # leaves the others with nothing to do. `--touch --forceall` records every job's metadata
    # (params, command) as a real run would; a path shared with an earlier config would then
    # read "Params have changed" there. (--no-hooks: no job runs, so no API key is asked for.)
    for file, jobs in plans.items():
        _stand_ins(work, jobs)
        _snakemake(work, file, "--touch", "--forceall", "--no-hooks")
    # Dry runs only read the folder (Snakemake writes no lock for one): the three run side by side, so
    # on two cores the sample's and tanq's run beside dexter's, the longest.
    with ThreadPoolExecutor(len(CONFIGS)) as pool:
        outs = dict(zip(CONFIGS, pool.map(lambda file: _snakemake(work, file, "-n"), CONFIGS)))
    for file, out in outs.items():
        assert "Nothing to be done" in out and "Params have changed" not in out, (file, out[-3000:])


@pytest.mark.snakemake
def test_an_item_cache_left_at_the_old_default_stops_the_workflow_with_the_move(tmp_path: Path) -> None:
    """Its answers (paid API calls too) would silently be asked again from cache/llm."""
    work = workflow_workdir(tmp_path)
    env = Environment(root=work, python="python", vllm_python=sys.executable)
    assert Plan(_config("config.yaml"), env).legacy_cache_problem() == ""
    (work / "results/cache/llm/smollm2-135m").mkdir(parents=True)
    message = (
        "generation.cache_dir: the item cache moved from results/cache/llm to cache/llm (shared by every "
        "config, kept by `make clean`); move the old one so its items are used: mv results/cache/llm "
        "cache/llm (if cache/llm exists, move the model folders inside it one by one)"
    )
    config = _config("config.yaml")
    config["generation"]["cache_dir"] = "cache/llm"  # as the schema's default fills it in
    assert Plan(config, env).legacy_cache_problem() == message
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n"],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "CQABENCH_VLLM_PYTHON": sys.executable},
        timeout=300,
        check=False,
    )
    assert done.returncode != 0 and f"cqabench: {message}" in done.stderr and "Traceback" not in done.stderr
