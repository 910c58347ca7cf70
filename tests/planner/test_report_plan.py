"""cqabench.planner.report: the report stage's decisions, each asserted on a computed value: which
expected-number files the report compares with, and where a paper table's files go."""

from __future__ import annotations

from plan_helpers import ROOT, load_config, plan_of


def test_every_expected_file_is_compared_unless_the_config_names_some() -> None:
    config = load_config()
    assert plan_of(config).expected_files == sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "config" / "expected").glob("*.yaml")
    )
    config.setdefault("report", {})["expected"] = ["config/expected/dexter.yaml"]
    assert plan_of(config).expected_files == ["config/expected/dexter.yaml"]


def test_a_paper_tables_files_sit_in_the_reports_tables_folder() -> None:
    plan = plan_of(load_config())
    assert plan.table_file("dexter_table2_ndcg10") == "results/sample/report/tables/dexter_table2_ndcg10.md"
    assert (
        plan.table_file("dexter_table2_ndcg10", "caption.rst")
        == "results/sample/report/tables/dexter_table2_ndcg10.caption.rst"
    )


def test_the_paper_table_ids_are_read_once_in_file_order() -> None:
    """config/expected/: dexter.yaml's four tables, strategyqa.yaml's one, tanq.yaml's six (their
    `- id:` lines). The rules ask for the ids several times per parse: the files are read once,
    and a caller changing the list it got changes nothing."""
    plan = plan_of(load_config())
    ids = plan.expected_table_ids()
    assert ids[:5] == [
        "dexter_table2_ndcg10",
        "dexter_table7_recall100",
        "dexter_table3_answers",
        "dexter_table8_open_models",
        "strategyqa_recall10",
    ]
    assert len(ids) == 11 and ids[-1] == "tanq_table10_failures"
    ids.clear()
    plan.expected_files = []  # not read again
    assert len(plan.expected_table_ids()) == 11
