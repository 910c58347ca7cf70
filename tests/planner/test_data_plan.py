"""cqabench.planner.data: the data stage's decisions, each asserted on a computed value: which raw
files a split is prepared from, with which question selection, and which files are its targets."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from cqabench.planner import Environment
from plan_helpers import ROOT, load_config, plan_of


def test_a_raw_file_with_a_url_or_a_downloaded_copy_plans(tmp_path: Path) -> None:
    config = load_config()
    spec = config["datasets"]["finqa"]["files"]["dev"]["questions"]
    spec.update(path="finqa/elsewhere.json", url="https://example.org/finqa/dev.json")
    plan = plan_of(config)
    assert plan.raw_input("finqa/elsewhere.json") == "results/sample/raw/finqa/elsewhere.json"
    assert plan.raw_specs_by_path()["finqa/elsewhere.json"]["url"] == "https://example.org/finqa/dev.json"
    spec["url"] = None  # a copy already downloaded into results/sample/raw is as good as a URL
    (tmp_path / "resources").symlink_to(ROOT / "resources")
    (tmp_path / "config").symlink_to(ROOT / "config")
    (tmp_path / "results/sample/raw/finqa").mkdir(parents=True)
    (tmp_path / "results/sample/raw/finqa/elsewhere.json").write_text("[]")
    plan_of(config, Environment(root=tmp_path, vllm_python=sys.executable))


def test_corpus_only_splits_get_their_download_spec() -> None:
    """Before the planner, a raw file of a corpus-only split (dexter.yaml: MuSiQue train) was
    planned for download with an empty spec, i.e. no URL: it could only fail at run time."""
    plan = plan_of(load_config("dexter.yaml"))
    spec = plan.raw_specs_by_path()["musique/musique_ans_v1.0_train.jsonl"]
    assert spec["url"].startswith("https://")


def test_export_beir_false_drops_only_the_exports() -> None:
    """`export_beir: false` skips the BEIR / Pyserini copies of each corpus (docs/data.md); the
    canonical tables and retrieval corpora stay targets."""
    config = load_config()
    default = plan_of(config).data_targets()
    skipped = plan_of({**config, "export_beir": False}).data_targets()
    beir = [t for t in default if t.startswith("results/sample/beir/")]
    assert len(beir) == sum(len(plan_of(config).splits(ds)) for ds in config["datasets"]) * len(
        config["serializations"]
    )
    assert skipped == [t for t in default if t not in beir] and beir
    assert plan_of({**config, "export_beir": True}).data_targets() == default


def test_question_selection_reaches_prepare_for_the_evaluated_splits_only() -> None:
    """dexter.yaml: MuSiQue's answerable 2-hop questions and 1,200 2WikiMultihopQA questions, on the evaluated
    dev splits; their corpus-only train splits are prepared whole."""
    plan = plan_of(load_config("dexter.yaml"))
    assert plan.question_selection_args("musique", "dev") == "--hops 2 --answerable-only"
    assert plan.question_selection_args("2wikimultihopqa", "dev") == "--limit 1200"
    assert plan.question_selection_args("musique", "train") == ""
    assert plan.question_selection_args("tatqa", "dev") == ""
    config = load_config()
    config["datasets"]["musique"].update(limit=5, hops=[2, 3], answerable_only=True)
    assert plan_of(config).question_selection_args("musique", "train") == "--limit 5 --hops 2 3 --answerable-only"


def test_prepare_reads_each_raw_file_by_its_role_with_the_relevance_mode() -> None:
    plan = plan_of(load_config())
    w = SimpleNamespace(dataset="tatqa", split="dev")
    inputs = plan.prepare_inputs(w)
    assert inputs == {"questions": "resources/raw/tatqa/tatqa_dataset_dev.sample.json"}
    assert plan.prepare_file_args(w, inputs) == "--file questions=resources/raw/tatqa/tatqa_dataset_dev.sample.json"
    assert plan.prepare_file_args(w, {"a b": "x y"}) == "--file 'a b=x y'"
    assert plan.relevance_arg("tatqa") == "--relevance paper"
