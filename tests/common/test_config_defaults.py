"""The config's defaults have one home, the schema (issue 39, item 3): `cqabench.common.config_defaults`
reads them there, and a plan of a config that leaves a key out is the plan of the config
`snakemake.utils.validate` filled in, whether the key's section is present or not."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from snakemake.utils import validate

from cqabench.common.config_defaults import SCHEMA, configured, default
from cqabench.generation.agent.loop import Limits
from cqabench.planner import Environment, Plan

ROOT = Path(__file__).resolve().parents[2]


def _config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))


def _defaults(node: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every `default:` under `properties` of the schema, by its config key (the test's own walk)."""
    out = {}
    for key, sub in (node.get("properties") or {}).items():
        if "default" in sub:
            out[path + (key,)] = sub["default"]
        out.update(_defaults(sub, path + (key,)))
    return out


def test_the_schema_is_the_workflows_schema_and_every_default_is_read() -> None:
    assert SCHEMA == ROOT / "workflow/schemas/config.schema.yaml"
    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    found = _defaults(schema) | {("datasets", "*") + p: v for p, v in _defaults(schema["$defs"]["dataset"]).items()}
    # the keys the code reads a default of (checked by hand against workflow/schemas/config.schema.yaml)
    assert found[("generation", "threads")] == 2 and found[("retrieval", "decomposition", "k")] == 10
    assert found[("generation", "open_book", "max_steps")] == 4 and found[("datasets", "*", "relevance")] == "paper"
    for path, value in found.items():
        assert default(*path) == value, path


def test_configured_takes_the_configs_value_else_the_schemas_default() -> None:
    config = {"generation": {"threads": 8, "seed": None}, "retrieval": {}}
    assert configured(config, "generation", "threads") == 8
    assert configured(config, "generation", "seed") == 0  # null: the default, as the schema allows no null
    assert configured(config, "retrieval", "k") == 100  # the section without the key
    assert configured(config, "retrieval", "decomposition", "k") == 10  # no section on the way
    assert configured(None, "report", "paper_data") is False
    assert configured({"export_beir": False}, "export_beir") is False  # a false value is the config's, not absent
    assert configured({"datasets": {"tatqa": {"relevance": "rows"}}}, "datasets", "tatqa", "relevance") == "rows"
    assert configured({"datasets": {"tatqa": {}}}, "datasets", "tatqa", "relevance") == "paper"


def test_a_key_without_a_default_or_unknown_is_named() -> None:
    with pytest.raises(LookupError, match=r"^generation\.k: .* gives this config key no default$"):
        default("generation", "k")
    with pytest.raises(LookupError, match=r"^generation\.thread: no such config key in "):
        default("generation", "thread")


def test_open_book_limits_default_to_the_schemas() -> None:
    assert Limits() == Limits.from_config({}) == Limits(max_steps=4, max_tool_chars=600, max_total_tokens=4096)
    assert Limits.from_config({"max_steps": 2}).max_steps == 2


def _planned(plan: Plan) -> dict[str, Any]:
    """What the plan read from keys the schema gives a default."""
    w = SimpleNamespace(
        dataset="tanq",
        split="test",
        serialization="pipe",
        retriever="bm25",
        llm="smollm2-135m",
        prompt="few-shot",
        setting="open-book",
        k="1",
    )
    return {
        "retrieval_k": plan.retrieval_k,
        "decomposition_k": plan.decomposition_k,
        "threads": plan.threads,
        "seed": plan.gen_seed,
        "prompts_dir": plan.prompts_dir,
        "cache_dir": plan.llm_cache_dir,
        "paper_data": plan.paper_data,
        "drop": plan.drop_identical_ids,
        "relevance": {ds: plan.relevance_of(ds) for ds in plan.datasets},
        "beir": [t for t in plan.data_targets() if "/beir/" in t],
        "open_book": {k: v for k, v in plan.open_book_settings(w).items() if k != "retriever_settings"},
    }


def test_a_plan_without_the_keys_is_the_plan_of_the_validated_config() -> None:
    """The sample's config with every defaulted key taken out (and the sections holding only
    those), planned as the estimate plans it (not validated) and as the workflow does (validated)."""
    bare = _config()
    for section, keys in (
        ("generation", ("threads", "seed", "prompts_dir", "cache_dir")),
        ("report", ("paper_data",)),
        ("retrieval", ("k", "drop_identical_ids")),
    ):
        for key in keys:
            bare.get(section, {}).pop(key, None)
    bare.get("retrieval", {}).get("decomposition", {}).pop("k", None)
    for name in ("max_steps", "max_tool_chars", "max_total_tokens"):
        bare["generation"]["open_book"].pop(name, None)
    bare.pop("export_beir", None)
    for spec in bare["datasets"].values():
        spec.pop("relevance", None)
    filled = copy.deepcopy(bare)
    validate(filled, str(SCHEMA))
    assert filled["generation"]["threads"] == 2 and "threads" not in bare["generation"]  # validate filled it
    env = Environment(root=ROOT, python="python", vllm_python=sys.executable)
    assert _planned(Plan(bare, env)) == _planned(Plan(filled, env))
    planned = _planned(Plan(bare, env))
    assert (planned["retrieval_k"], planned["decomposition_k"], planned["threads"], planned["seed"]) == (100, 10, 2, 0)
    assert planned["open_book"] == {
        "max_steps": 4,
        "max_tool_chars": 600,
        "max_total_tokens": 4096,
        "max_new_tokens": planned["open_book"]["max_new_tokens"],
    }


def test_a_left_out_flag_takes_the_config_keys_default() -> None:
    """`cqabench search` / `decompose-search` / `evaluate-retrieval` without --k or --drop-identical-ids
    (the workflow passes both): the schema's retrieval defaults, read only then."""
    from cqabench.cli import build_parser
    from cqabench.commands.retrieval import _or_default

    args = build_parser().parse_args(
        [
            "search",
            "--index",
            "i",
            "--queries",
            "q",
            "--retriever-settings",
            "{}",
            "--out-trec",
            "t",
            "--out-parquet",
            "p",
        ]
    )
    assert args.k is None and _or_default(args.k, "retrieval", "k") == 100
    assert _or_default(3, "retrieval", "decomposition", "k") == 3
    assert _or_default(None, "retrieval", "decomposition", "k") == 10
    assert _or_default(False, "retrieval", "drop_identical_ids") is False
