"""Jobs read the run's resolved configuration (`--config results/<name>/config.json`) instead of
JSON on their command lines: what each job rebuilds from that file must be what the planner
decided for it when Snakemake planned the run.

For the three shipped configs, validated as the workflow validates them (the schema's defaults
filled in), the plan rebuilt from the JSON file gives every job the same settings, cell records,
batch members and not-planned list as the plan built from the config in memory.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "workflow"))

from cqabench.commands import config_arg, is_json_text, plan_of  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.common.io import write_json  # noqa: E402
from cqabench.planner import Cell, Environment, Plan  # noqa: E402


def _validated(name: str) -> dict:
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config" / name).read_text())
    validate(config, schema=str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return config


@pytest.mark.parametrize("name", ["config.yaml", "dexter.yaml", "tanq.yaml"])
def test_a_plan_rebuilt_from_the_written_config_decides_every_job_alike(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    config = _validated(name)
    planned = Plan(config, Environment(root=Path(".")))
    path = tmp_path / "config.json"
    write_json(config, path, sort_keys=False)  # as rule resolved_config writes it
    rebuilt = plan_of(config_arg(str(path)))
    cells = planned.generation_cells()
    assert cells == rebuilt.generation_cells() and cells  # every config plans answer cells
    for c in cells:
        assert rebuilt.generation_settings(c) == planned.generation_settings(c)
        assert rebuilt.generation_cell(c) == planned.generation_cell(c)
    for ds, sp, ser, run in planned.retrieval_cells():
        assert rebuilt.retrieval_cell(ds, sp, ser, run) == planned.retrieval_cell(ds, sp, ser, run)
    for llm in planned.gen_batch_llms:
        assert rebuilt.batch_member_docs(llm) == planned.batch_member_docs(llm)
        assert rebuilt.batch_shared_settings(llm) == planned.batch_shared_settings(llm)
    assert rebuilt.not_planned_cells() == planned.not_planned_cells()
    assert rebuilt.metric_files() == planned.metric_files()
    for table in planned.expected_table_ids():
        assert rebuilt.table_inputs(table) == planned.table_inputs(table)


def test_the_config_flag_takes_a_file_or_the_json_itself(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"name": "x"}')
    assert config_arg(str(path)) == config_arg(' {"name": "x"}') == {"name": "x"}
    assert is_json_text("[1]") and not is_json_text("results/x/config.json")
    with pytest.raises(ConfigError, match="is not a file"):
        config_arg(str(tmp_path / "absent.json"))
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        config_arg(str(path))


def test_cell_labels_need_the_config_and_name_what_they_expect(monkeypatch: pytest.MonkeyPatch) -> None:
    from cqabench.commands.evaluation import _generation_cell
    from cqabench.commands.retrieval import _retrieval_cell

    monkeypatch.chdir(REPO)
    assert _generation_cell('{"llm": "m"}', None) == {"llm": "m"}  # JSON as before, for use by hand
    with pytest.raises(ConfigError, match="needs --config"):
        _generation_cell("musique/train/pipe/none/smollm2-135m/few-shot/closed-k0", None)
    config = json.dumps(_validated("config.yaml"))
    with pytest.raises(ConfigError, match="<setting>-k<k>"):
        _generation_cell("musique/train/pipe", config)
    got = _generation_cell("musique/train/pipe/none/smollm2-135m/few-shot/closed-k0", config)
    assert (
        got["dataset"] == "musique"
        and got["setting"] == "closed"
        and got["k"] == 0
        and got["corpus"] == "wiki-multihop"
    )
    run = _retrieval_cell("musique/train/pipe/bm25", config)
    assert run == {
        "dataset": "musique",
        "split": "train",
        "corpus": "wiki-multihop",
        "relevance": "paper",
        "serialization": "pipe",
        "retriever": "bm25",
        "retriever_settings": run["retriever_settings"],
    }
    assert run["retriever_settings"]["type"] == "bm25" and run["retriever_settings"]["k"] == 100
    with pytest.raises(ConfigError, match="<dataset>/<split>/<serialization>/<run>"):
        _retrieval_cell("musique/train/pipe", config)


def test_generate_takes_its_settings_from_one_source(monkeypatch: pytest.MonkeyPatch) -> None:
    from cqabench.commands.generation import _batch_of, _cell_settings

    monkeypatch.chdir(REPO)
    config = _validated("config.yaml")
    cell = dict(
        dataset="tatqa",
        split="dev",
        serialization="pipe",
        retriever="bm25",
        llm="smollm2-135m",
        prompt="few-shot",
        setting="rag",
        k=3,
    )
    args = argparse.Namespace(**cell, config=json.dumps(config), settings=None)
    plan = Plan(config, Environment(root=Path(".")))
    assert _cell_settings(args) == plan.generation_settings(Cell(**cell))
    assert _cell_settings(argparse.Namespace(**cell, config=None, settings='{"llm": {}}')) == {"llm": {}}
    with pytest.raises(ConfigError, match="one of them"):
        _cell_settings(argparse.Namespace(**cell, config=None, settings=None))
    shared, members = _batch_of(
        argparse.Namespace(llm="smollm2-135m", config=json.dumps(config), settings=None, cells=None)
    )
    assert shared == plan.batch_shared_settings("smollm2-135m") and len(members) == len(
        plan.batch_cells("smollm2-135m")
    )
    with pytest.raises(ConfigError, match="not both"):
        _batch_of(argparse.Namespace(llm="smollm2-135m", config="c.json", settings="{}", cells=None))
