"""A dataset is named in few places (docs/add_dataset.md), and those places agree.

The config schema used to repeat the eight dataset names in nine enums; it now names them once,
`$defs.dataset_name`, and every key or value that names a dataset refers to it. These tests
keep that list equal to the loader registry and to the code's per-dataset tables, and check
that adding one name to the list is all the schema needs for a new dataset to be accepted in
every place a config can name it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from cqabench.data.datasets import LOADERS
from cqabench.evaluation import scoring
from cqabench.generation import prompts

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
GUIDE = "docs/add_dataset.md"
REF = {"$ref": "#/$defs/dataset_name"}


def _schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))


def _config(name: str = "config.yaml") -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config" / name).read_text(encoding="utf-8"))


def _walk(node: Any, path: str = ""):
    """(path, node) for every mapping in the schema."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}/{i}")


def test_the_schema_lists_the_registrys_datasets_once() -> None:
    schema = _schema()
    assert schema["$defs"]["dataset_name"]["enum"] == list(LOADERS), f"keep $defs.dataset_name = LOADERS ({GUIDE})"
    repeats = [
        path
        for path, node in _walk(schema)
        if path != "/$defs/dataset_name" and isinstance(node.get("enum"), list) and set(node["enum"]) & set(LOADERS)
    ]
    assert not repeats, f"dataset names listed again at {repeats}; refer to #/$defs/dataset_name ({GUIDE})"
    refs = [path for path, node in _walk(schema) if node == REF]
    assert len(refs) == 10  # corpora members, datasets keys, retrieval / decomposition / external runs,
    # max_questions_by_dataset, oracle_distractors, oracle_context, open_book datasets and corpus datasets


def test_every_dataset_has_a_scorer_and_a_template_family() -> None:
    names = set(LOADERS)
    for table, what in (
        (scoring.METRICS, "scoring.METRICS"),
        (scoring.PRIMARY, "scoring.PRIMARY"),
        (scoring._SCORERS, "scoring._SCORERS"),
        (prompts.DATASET_FAMILY, "prompts.DATASET_FAMILY"),
    ):
        assert set(table) == names, f"{what} covers {sorted(set(table))}, the registry {sorted(names)} ({GUIDE})"


@pytest.mark.parametrize("name", ["config.yaml", "dexter.yaml", "tanq.yaml"])
def test_the_shipped_configs_still_validate(name: str) -> None:
    validate(_config(name), str(SCHEMA))


def _name_everywhere(config: dict[str, Any], new: str) -> dict[str, Any]:
    """The sample config with `new` in each of the nine places a dataset can be named."""
    c = copy.deepcopy(config)
    c["datasets"][new] = copy.deepcopy(c["datasets"]["tatqa"])
    c["corpora"][f"{new}-pool"] = [new]
    c["retrieval"]["datasets"].append(new)
    c["retrieval"]["decomposition"]["datasets"].append(new)
    c["external_runs"] = {"ext": {"path": "runs/x.trec", "dataset": new, "split": "dev"}}
    g = c["generation"]
    g["max_questions_by_dataset"] = {new: 5}
    g["oracle_distractors"] = {new: 1}
    g["open_book"]["datasets"].append(new)
    g["open_book"]["corpus"]["datasets"].append(new)
    return c


PLACES = {
    "datasets": lambda c, bad: c["datasets"].__setitem__(bad, c["datasets"].pop("tatqa")),
    "corpora": lambda c, bad: c["corpora"]["wiki-multihop"].append(bad),
    "retrieval.datasets": lambda c, bad: c["retrieval"]["datasets"].append(bad),
    "retrieval.decomposition.datasets": lambda c, bad: c["retrieval"]["decomposition"]["datasets"].append(bad),
    "external_runs.*.dataset": lambda c, bad: c.__setitem__(
        "external_runs", {"ext": {"path": "x.trec", "dataset": bad, "split": "dev"}}
    ),
    "generation.max_questions_by_dataset": lambda c, bad: c["generation"].__setitem__(
        "max_questions_by_dataset", {bad: 3}
    ),
    "generation.oracle_distractors": lambda c, bad: c["generation"].__setitem__("oracle_distractors", {bad: 1}),
    "generation.open_book.datasets": lambda c, bad: c["generation"]["open_book"]["datasets"].append(bad),
    "generation.open_book.corpus.datasets": lambda c, bad: c["generation"]["open_book"]["corpus"]["datasets"].append(
        bad
    ),
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_an_unknown_dataset_is_refused_in_every_place(place: str) -> None:
    config = _config()
    PLACES[place](config, "hotpotqa")
    with pytest.raises(WorkflowError) as err:
        validate(config, str(SCHEMA))
    assert "'hotpotqa' is not one of ['musique', '2wikimultihopqa', 'strategyqa'" in str(err.value)


def test_one_name_in_the_list_admits_a_new_dataset_everywhere(tmp_path: Path) -> None:
    config = _name_everywhere(_config(), "hotpotqa")
    with pytest.raises(WorkflowError):
        validate(copy.deepcopy(config), str(SCHEMA))
    schema = _schema()
    schema["$defs"]["dataset_name"]["enum"].append("hotpotqa")
    extended = tmp_path / "config.schema.yaml"
    extended.write_text(yaml.safe_dump(schema, sort_keys=False), encoding="utf-8")
    validate(config, str(extended))
