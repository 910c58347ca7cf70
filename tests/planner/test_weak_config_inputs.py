"""Issue 36 item 6, the config cases: each a one-line error naming its key, or a warning naming
both files.

- a 300-character `name` failed at the first folder with "File name too long" (now: a planning
  error naming `name` and the limit, 64; a folder name may be 255 bytes, `getconf NAME_MAX`);
- a retriever, external run or pipeline named `none` planned, and its RAG rows were read as
  cells without retrieval and lost their retriever settings (now: the name is reserved);
- two config files with one `name` shared a results tree without a word (now: the plan warns,
  naming both files; cqabench.planner.tree_source says why a warning and not a refusal).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner import Environment, Plan, tree_source

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)


def _config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def _refused(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        Plan(config, ENV)
    return str(err.value)


def test_a_name_longer_than_64_characters_is_refused() -> None:
    config = _config()
    config["name"] = "r" * 300
    assert f"name: 300 characters ({'r' * 20}...), at most 64: it is the results tree results/<name>/" in _refused(
        config
    )
    config["name"] = "r" * 64
    assert Plan(config, ENV).results == f"results/{'r' * 64}"


def _bm25_named_none(config: dict[str, Any]) -> None:
    config["retrievers"]["none"] = dict(config["retrievers"]["bm25"])
    config["retrieval"]["retrievers"].append("none")


def _external_named_none(config: dict[str, Any]) -> None:
    config["external_runs"] = {
        "none": {"path": "config/config.yaml", "format": "trec", "dataset": "tatqa", "split": "dev"}
    }


def _pipeline_named_none(config: dict[str, Any]) -> None:
    config["retrieval"]["pipelines"] = {"none": {"type": "fusion", "fuse": ["bm25", "minilm"]}}
    config["generation"]["rag_retrievers"] = ["bm25", "none"]


@pytest.mark.parametrize(("edit", "key"), [(_bm25_named_none, "retrievers"), (_external_named_none, "external_runs"),
                                           (_pipeline_named_none, "retrieval.pipelines")])  # fmt: skip
def test_a_run_named_none_is_refused(edit, key: str) -> None:
    config = _config()
    edit(config)
    assert f"{key}.none: the name 'none' is reserved: it is the retriever of every cell without retrieval" in _refused(
        config
    )


def test_the_tree_source_is_the_last_file_that_sets_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("a.yaml").write_text("name: exp\nraw_dir: raw\n")
    Path("extra.yaml").write_text("retrieval: {k: 50}\n")  # adds a setting, keeps the tree's source
    Path("b.yaml").write_text("name: exp\n")
    assert tree_source.name_source(["a.yaml", "extra.yaml"]) == "a.yaml"
    assert tree_source.name_source([str(tmp_path / "a.yaml"), "b.yaml"]) == "b.yaml"
    assert tree_source.name_source(["extra.yaml"]) is None
    results = Path("results/exp")
    assert tree_source.source_warning(results, ["a.yaml"]) is None  # no run recorded yet
    tree_source.record_source(results, ["a.yaml", "extra.yaml"])
    assert (results / ".config_source").read_text() == "a.yaml\n"
    assert tree_source.source_warning(results, [str(tmp_path / "a.yaml"), "extra.yaml"]) is None
    warning = tree_source.source_warning(results, ["b.yaml"])
    assert warning is not None and warning.startswith(
        "warning: results/exp/ was last run from a.yaml, and b.yaml "
        "sets the same name: both configs write this one tree"
    )


@pytest.mark.snakemake
def test_snakemake_n_names_both_config_files(tmp_path: Path) -> None:
    """A dry run of a second config with the default's name, after a run of the default: one
    warning naming both; the dry run records nothing."""
    from conftest import workflow_workdir

    work = workflow_workdir(tmp_path)
    (work / "other.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    (work / "results" / "sample").mkdir(parents=True)
    (work / "results" / "sample" / ".config_source").write_text("config/config.yaml\n")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "other.yaml"], cwd=work,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("cqabench: warning: results/sample/")]
    assert len(lines) == 1 and "last run from config/config.yaml, and other.yaml sets the same name" in lines[0]
    assert (work / "results" / "sample" / ".config_source").read_text() == "config/config.yaml\n"
