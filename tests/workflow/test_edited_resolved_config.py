"""Issue 36, item 2: a hand-edited `results/<name>/config.json` is never trusted.

Jobs rebuild their settings from that file (`--config`). Every rule lists it as `ancient()`, so
an edited file used to plan "Nothing to be done" and a forced rerun answered 2 questions where
the config says 5. Now Snakemake's main process rewrites it from the config before it plans
(cqabench.planner.resolved_config.refresh), and a job refuses, by the file's name, a file that
is not the text its run planned (edited, or rewritten by another config of the same name after
the run started: `verify`, against the sha256 the rules' shell prefix exports).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))

from cqabench.commands import config_arg  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.planner import resolved_config  # noqa: E402

CONFIG_JSON = "results/sample/config.json"


def _dry_run(work: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", "config/config.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _edit(path: Path) -> None:
    """The issue's edit: 2 questions per dataset, BM25's k1 5.0."""
    edited = json.loads(path.read_text())
    edited["generation"]["max_questions"] = 2
    edited["retrievers"]["bm25"]["k1"] = 5.0
    path.write_text(json.dumps(edited, indent=2))


@pytest.mark.snakemake
def test_edited_resolved_config_is_rewritten_before_planning(workdir: Path) -> None:
    first = _dry_run(workdir)
    assert first.returncode == 0, first.stderr[-3000:]
    path = workdir / CONFIG_JSON
    written = path.read_text()
    config = json.loads(written)
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert config["generation"]["max_questions"] == default["generation"]["max_questions"] != 2
    assert config["retrievers"]["bm25"]["k1"] == default["retrievers"]["bm25"]["k1"] == 0.9

    _edit(path)
    second = _dry_run(workdir)
    assert second.returncode == 0, second.stderr[-3000:]
    assert path.read_text() == written  # the config's own text again, byte for byte
    assert f"cqabench: {CONFIG_JSON} rewritten from this run's config" in second.stderr


def test_resolved_config_unchanged_is_not_rewritten(tmp_path: Path) -> None:
    """An unchanged config leaves the file and its mtime alone (a moved checkout plans nothing)."""
    path = tmp_path / "results" / "x" / "config.json"
    config = {"name": "x", "datasets": {"b": {}, "a": {}}}
    assert resolved_config.refresh(path, config) is True
    assert list(json.loads(path.read_text())["datasets"]) == ["b", "a"]  # the config's order: the tables'
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert resolved_config.refresh(path, config) is False
    assert path.stat().st_mtime_ns == 1_000_000_000
    assert resolved_config.refresh(path, {**config, "name": "y"}) is True
    assert json.loads(path.read_text())["name"] == "y"
    assert [p.name for p in path.parent.iterdir()] == ["config.json"]  # no temporary left beside it


def _planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A resolved config written as the workflow writes it, with the job environment of its run."""
    path = tmp_path / "config.json"
    config = {"name": "x", "generation": {"max_questions": 5}, "retrievers": {"bm25": {"k1": 0.9}}}
    resolved_config.refresh(path, config)
    monkeypatch.setenv(resolved_config.ENV_FILE, str(path))
    monkeypatch.setenv(resolved_config.ENV_SHA256, resolved_config.sha256_of(resolved_config.text_of(config)))
    return path


def test_edited_resolved_config_is_refused_by_a_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _planned(tmp_path, monkeypatch)
    assert config_arg(str(path))["generation"]["max_questions"] == 5  # the planned text is read
    _edit(path)
    with pytest.raises(ConfigError, match=f"^{path}: is not the config this run planned .*never edit this file"):
        config_arg(str(path))
    # outside a workflow job (no planned sha256) the file is read as given, as by hand
    monkeypatch.delenv(resolved_config.ENV_SHA256)
    assert config_arg(str(path))["generation"]["max_questions"] == 2


def test_edited_resolved_config_stops_the_command_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's command exits 1 naming the file, without a traceback and without an output."""
    path = _planned(tmp_path, monkeypatch)
    _edit(path)
    out = tmp_path / "estimate"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    done = subprocess.run(
        [sys.executable, "-m", "cqabench", "estimate", "--config", str(path), "--out-dir", str(out), "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{path}: is not the config this run planned" in done.stderr
    assert not out.exists()
