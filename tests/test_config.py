"""Config validation and planning: unknown values are rejected with the valid ones listed."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "workflow/schemas/config.schema.yaml")
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _config(name: str = "config.yaml") -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


@pytest.mark.parametrize("name", ["config.yaml", "dexter.yaml"])
def test_shipped_configs_are_valid(name: str) -> None:
    validate(_config(name), SCHEMA)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda c: c["datasets"].__setitem__("hotpotqa", copy.deepcopy(c["datasets"]["musique"])),
         "'hotpotqa' is not one of ['musique', '2wikimultihopqa', 'strategyqa', 'ambigqa', 'ottqa', 'tatqa', 'finqa', 'tanq']"),
        (lambda c: c["datasets"]["tatqa"].__setitem__("splits", ["validation"]),
         "'validation' is not one of ['train', 'dev', 'test']"),
        (lambda c: c.__setitem__("serializations", ["html"]),
         "'html' is not one of ['pipe', 'markdown', 'linear']"),
    ],
)
def test_unknown_values_are_rejected_with_the_valid_ones(edit, expected: str) -> None:
    config = _config()
    edit(config)
    with pytest.raises(WorkflowError) as err:
        validate(config, SCHEMA)
    assert expected in str(err.value)


def test_unknown_value_stops_snakemake_before_any_job(tmp_path: Path) -> None:
    config = _config()
    config["serializations"] = ["html"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(SNAKEMAKE + ["-n", "--configfile", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "'html' is not one of ['pipe', 'markdown', 'linear']" in proc.stdout + proc.stderr


def test_full_reproduction_plans_the_data_stage_of_every_dataset() -> None:
    proc = subprocess.run(
        SNAKEMAKE + ["-n", "--quiet", "rules", "--configfile", "config/dexter.yaml"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    for rule in ("download", "prepare", "pool_corpus", "export_beir"):
        assert rule in out
    plan = subprocess.run(
        SNAKEMAKE + ["-n", "--configfile", "config/dexter.yaml"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    for ds in ("musique", "2wikimultihopqa", "strategyqa", "ambigqa", "ottqa", "tatqa", "finqa", "tanq"):
        assert f"results/data/{ds}/" in plan, ds


def test_workflow_lints_clean() -> None:
    proc = subprocess.run(SNAKEMAKE + ["--lint"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Lints for" not in proc.stdout + proc.stderr


def test_bad_retriever_setting_stops_planning_with_its_name(tmp_path: Path) -> None:
    config = _config()
    config["retrievers"]["minilm"]["similarity"] = "cosin"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(SNAKEMAKE + ["-n", "--configfile", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "retrievers.minilm: similarity 'cosin' is unknown; valid: dot, cosine" in proc.stdout + proc.stderr
