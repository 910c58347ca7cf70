"""Issue 36 item 4: an empty run is refused by name wherever a run is read (import, evaluation,
fusion, rerank, a RAG cell's input), as `prepare` refuses a raw file without questions; a run
file whose bytes are not UTF-8 or whose JSON holds a lone surrogate is one named error too.

Before: a 0-byte or blank `.trec` imported with rc 0, evaluated to nDCG@10 0.0 without a reason,
gave a RAG k=1 cell 0 documents while its rows said k 1, and two of them fused with rc 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.common.errors import DataError
from cqabench.data.schema import CanonicalData, Document, Qrel, Query
from cqabench.generation.cell_inputs import retrieved_docids
from cqabench.retrieval.runs import read_run, write_parquet_run

EMPTY_RUNS = {
    "zero_bytes.trec": b"",
    "blank.trec": b"\n   \n\t\n",
    "empty.json": b"{}",
    "no_docs.json": b'{"q1": {}, "q2": {}}',
}


@pytest.fixture
def split(tmp_path: Path) -> dict[str, Path]:
    tables = CanonicalData(
        queries=[Query("q1", "which tower?"), Query("q2", "which river?")],
        corpus=[Document("d1", "Tower", "The tower."), Document("d2", "River", "The river.")],
        qrels=[Qrel("q1", "d1"), Qrel("q2", "d2")],
    ).tables()
    paths = {}
    for name in ("queries", "corpus", "qrels"):
        paths[name] = tmp_path / f"{name}.parquet"
        pq.write_table(tables[name], paths[name])
    return paths


def _empty(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_bytes(EMPTY_RUNS[name])
    return path


def _refused(rc: int, capsys: pytest.CaptureFixture, path: Path, *outputs: Path) -> None:
    """rc 1, one error line naming the file, no traceback, no output file left."""
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert f"{path}: " in err and "the run ranks no document" in err
    assert not [p for p in outputs if p.exists()]


@pytest.mark.parametrize("name", sorted(EMPTY_RUNS))
def test_import_refuses_an_empty_run(name: str, split: dict[str, Path], tmp_path: Path, capsys) -> None:
    run = _empty(tmp_path, name)
    out = tmp_path / "out"
    rc = main(
        [
            "import-run",
            "--run",
            str(run),
            "--queries",
            str(split["queries"]),
            "--tag",
            "ext",
            "--out-trec",
            str(out / "run.trec"),
            "--out-parquet",
            str(out / "run.parquet"),
        ]
    )
    _refused(rc, capsys, run, out / "run.trec", out / "run.parquet")


def test_eval_refuses_an_empty_run(split: dict[str, Path], tmp_path: Path, capsys) -> None:
    """Before: nDCG@10 0.0 written to metrics.json with no reason."""
    run = _empty(tmp_path, "zero_bytes.trec")
    out = tmp_path / "eval"
    cell = {"dataset": "musique", "split": "dev", "serialization": "pipe", "run": "ext"}
    rc = main(
        [
            "evaluate-retrieval",
            "--run",
            str(run),
            "--qrels",
            str(split["qrels"]),
            "--queries",
            str(split["queries"]),
            "--cell",
            json.dumps(cell),
            "--out-json",
            str(out / "metrics.json"),
            "--out-per-query",
            str(out / "per_query.parquet"),
        ]
    )
    _refused(rc, capsys, run, out / "metrics.json", out / "per_query.parquet")


def test_fusion_refuses_an_empty_input(split: dict[str, Path], tmp_path: Path, capsys) -> None:
    """Before: fusing two empty runs exited 0 with an empty fused run. One empty input of two is
    refused as well: a fusion with a silent missing half is not the fusion configured."""
    good = tmp_path / "good.parquet"
    write_parquet_run({"q1": [("d1", 1.0)]}, good)
    empty = _empty(tmp_path, "blank.trec")
    settings = {"type": "fusion", "fuse": ["a", "b"], "method": "rrf", "k": 60, "depth": 10}
    for inputs in ([empty, empty], [good, empty]):
        rc = main(
            [
                "fuse-runs",
                "--runs",
                *map(str, inputs),
                "--queries",
                str(split["queries"]),
                "--settings",
                json.dumps(settings),
                "--tag",
                "hybrid",
                "--out-trec",
                str(tmp_path / "f.trec"),
                "--out-parquet",
                str(tmp_path / "f.parquet"),
            ]
        )
        _refused(rc, capsys, empty, tmp_path / "f.trec", tmp_path / "f.parquet")


def test_rerank_refuses_an_empty_input(split: dict[str, Path], tmp_path: Path, capsys) -> None:
    empty = _empty(tmp_path, "zero_bytes.trec")
    settings = {"type": "rerank", "of": "bm25", "model": "cross-encoder/ms-marco-MiniLM-L-6-v2", "depth": 10}
    rc = main(
        [
            "rerank-run",
            "--run",
            str(empty),
            "--queries",
            str(split["queries"]),
            "--corpus",
            str(split["corpus"]),
            "--serialization",
            "pipe",
            "--settings",
            json.dumps(settings),
            "--tag",
            "rr",
            "--out-trec",
            str(tmp_path / "r.trec"),
            "--out-parquet",
            str(tmp_path / "r.parquet"),
        ]
    )
    _refused(rc, capsys, empty, tmp_path / "r.trec", tmp_path / "r.parquet")


def test_a_rag_cell_refuses_an_empty_run(tmp_path: Path) -> None:
    """Before: k = 1 recorded on rows that were given 0 documents."""
    empty = tmp_path / "empty.parquet"
    write_parquet_run({}, empty)  # what importing an empty run used to write
    with pytest.raises(DataError, match=r"empty\.parquet: .*the run ranks no document"):
        retrieved_docids(empty, {"q1", "q2"}, 1)


def test_a_run_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.trec"
    bad.write_bytes("q1 Q0 d1 1 2.0 t\nq1 Q0 caf\xe9 2 1.0 t\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.trec: record 'line 2', field '-': not UTF-8 text \(bytes e9"):
        read_run(bad)


def test_a_lone_surrogate_in_a_json_run_names_its_query_and_document(tmp_path: Path) -> None:
    """json.loads accepts "\\ud800"; writing the id as UTF-8 then failed with a traceback."""
    bad = tmp_path / "run.json"
    bad.write_text('{"q1": {"d1": 2.0, "d\\ud800": 1.0}}', encoding="ascii")
    with pytest.raises(DataError, match=r"record 'q1', field 'd\\\\ud800': holds a lone UTF-16 surrogate"):
        read_run(bad)
    ok = tmp_path / "emoji.json"
    ok.write_text('{"q1": {"d\\ud83d\\ude00": 1.0}}', encoding="ascii")  # a pair is one character
    assert read_run(ok) == {"q1": {"d\U0001f600": 1.0}}
