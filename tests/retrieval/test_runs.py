"""Run files: both written forms agree, every reader returns the same scores, bad input is named."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cqabench.common.errors import DataError
from cqabench.data.schema import QUERY_SCHEMA, Query
from cqabench.retrieval.jobs import import_run
from cqabench.retrieval.runs import RUN_SCHEMA, ranked, read_run, write_run

RESULTS = {
    "q1": [("d2", 0.5), ("d1", 1.25), ("d3", 0.5)],  # unsorted on purpose
    "q2": [("d9", 3.0)],
}


def test_write_both_forms_ranked_in_trec_eval_order(tmp_path: Path):
    write_run(RESULTS, tmp_path / "r.trec", tmp_path / "r.parquet", "bm25")
    lines = (tmp_path / "r.trec").read_text().splitlines()
    # Ties (d2, d3 at 0.5) go docid-descending, as trec_eval orders them.
    assert lines == [
        "q1 Q0 d1 1 1.25 bm25",
        "q1 Q0 d3 2 0.5 bm25",
        "q1 Q0 d2 3 0.5 bm25",
        "q2 Q0 d9 1 3.0 bm25",
    ]
    table = pq.read_table(tmp_path / "r.parquet")
    assert table.schema.equals(RUN_SCHEMA)
    assert table.to_pydict() == {
        "qid": ["q1", "q1", "q1", "q2"],
        "docid": ["d1", "d3", "d2", "d9"],
        "rank": [1, 2, 3, 1],
        "score": [1.25, 0.5, 0.5, 3.0],
    }
    expected = {"q1": {"d1": 1.25, "d3": 0.5, "d2": 0.5}, "q2": {"d9": 3.0}}
    assert read_run(tmp_path / "r.trec") == expected
    assert read_run(tmp_path / "r.parquet") == expected
    (tmp_path / "r.json").write_text(json.dumps(expected))
    assert read_run(tmp_path / "r.json") == expected


def test_scores_survive_the_text_form_exactly(tmp_path: Path):
    score = 0.1 + 0.2  # 0.30000000000000004
    write_run({"q": [("d", score)]}, tmp_path / "r.trec", None, "t")
    assert read_run(tmp_path / "r.trec")["q"]["d"] == score


def test_bad_inputs_are_named(tmp_path: Path):
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 zero tag\n")
    with pytest.raises(DataError, match="line 2"):
        read_run(bad)
    bad.write_text("q1 Q0 d1 1 0.5\n")
    with pytest.raises(DataError, match="6 columns"):
        read_run(bad)
    bad.write_text("q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n")
    with pytest.raises(DataError, match="appears twice"):
        read_run(bad)
    with pytest.raises(DataError, match="not found"):
        read_run(tmp_path / "missing.trec")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"q1": {"d1": "high"}}')
    with pytest.raises(DataError, match="must be a number"):
        read_run(bad_json)
    with pytest.raises(DataError, match="whitespace"):
        write_run({"q 1": [("d", 1.0)]}, tmp_path / "x.trec", None, "t")
    assert not (tmp_path / "x.trec").exists()
    pq.write_table(pa.table({"qid": ["q"], "docid": ["d"]}), tmp_path / "noscore.parquet")
    with pytest.raises(DataError, match="score"):
        read_run(tmp_path / "noscore.parquet")


def test_ranked_cuts_to_k():
    assert ranked({"q": {"a": 1.0, "b": 3.0, "c": 2.0}}, k=2) == {"q": [("b", 3.0), ("c", 2.0)]}


def test_import_external_json_run(tmp_path: Path):
    queries = tmp_path / "queries.parquet"
    pq.write_table(
        pa.Table.from_pylist([asdict(Query("q1", "a?")), asdict(Query("q2", "b?"))], schema=QUERY_SCHEMA), queries
    )
    external = tmp_path / "ext.json"
    external.write_text(json.dumps({"q1": {"d1": 0.2, "d2": 0.9, "d3": 0.1}}))
    import_run(external, None, queries, 2, tmp_path / "o.trec", tmp_path / "o.parquet", "colbert-ext")
    assert (tmp_path / "o.trec").read_text().splitlines() == [
        "q1 Q0 d2 1 0.9 colbert-ext",
        "q1 Q0 d1 2 0.2 colbert-ext",
    ]
    external.write_text(json.dumps({"other-split-q": {"d1": 1.0}}))
    with pytest.raises(DataError, match="not in"):
        import_run(external, "json", queries, None, tmp_path / "p.trec", None, "x")
