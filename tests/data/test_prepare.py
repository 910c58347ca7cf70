"""The prepare stage: canonical Parquet for every sample dataset, checks, pooling, BEIR export."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.common.errors import ConfigError, DataError
from cqabench.data.beir import export
from cqabench.data.corpora import pool
from cqabench.data.datasets import has_gold_evidence
from cqabench.data.prepare import prepare, validate
from cqabench.data.schema import SCHEMAS, CanonicalData, Document, Qrel, Query

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "resources" / "raw"

SAMPLE = {
    # dataset: (split, {role: file}, queries, corpus documents)
    "musique": ("train", {"questions": "musique/musique_train_100.jsonl"}, 100, 1890),
    "2wikimultihopqa": ("dev", {"questions": "2wikimultihopqa/dev.json"}, 2, 20),
    "strategyqa": (
        "dev",
        {"questions": "strategyqa/dev.json", "decompositions": "strategyqa/bart_decomp_dev_predictions.jsonl"},
        229,
        0,
    ),
    "ambigqa": (
        "dev",
        {"questions": "ambigqa/dev_light_40.json", "passages": "ambigqa/psgs_w100_sample.tsv"},
        40,
        1100,
    ),
    "ottqa": (
        "dev",
        {
            "questions": "ottqa/dev.traced.sample.json",
            "tables": "ottqa/dev_tables.sample.json",
            "passages": "ottqa/dev_passages.sample.json",
        },
        40,
        80 + 1844,
    ),
    "tatqa": ("dev", {"questions": "tatqa/tatqa_dataset_dev.sample.json"}, 240, None),
    "finqa": ("dev", {"questions": "finqa/dev.json"}, 1, None),
    "tanq": ("test", {"questions": "tanq/test_questions_10.jsonl"}, 10, 0),
}


@pytest.mark.parametrize("dataset", sorted(SAMPLE))
def test_prepare_writes_the_four_canonical_tables(dataset: str, tmp_path: Path) -> None:
    split, files, n_queries, n_docs = SAMPLE[dataset]
    args = ["prepare", "--dataset", dataset, "--split", split, "--out-dir", str(tmp_path)]
    for role, rel in files.items():
        args += ["--file", f"{role}={RAW / rel}"]
    assert main(args) == 0
    tables = {name: pq.read_table(tmp_path / f"{name}.parquet") for name in SCHEMAS}
    for name, table in tables.items():
        assert table.schema.equals(SCHEMAS[name]), name
    assert tables["queries"].num_rows == n_queries
    assert tables["answers"].num_rows == n_queries
    if n_docs is not None:
        assert tables["corpus"].num_rows == n_docs
    docids = set(tables["corpus"].column("docid").to_pylist())
    assert set(tables["qrels"].column("docid").to_pylist()) <= docids


def test_tatqa_sample_counts_tables_and_paragraphs(tmp_path: Path) -> None:
    raw = json.loads((RAW / "tatqa/tatqa_dataset_dev.sample.json").read_text())
    prepare("tatqa", "dev", {"questions": RAW / "tatqa/tatqa_dataset_dev.sample.json"}, tmp_path)
    kinds = pq.read_table(tmp_path / "corpus.parquet").column("kind").to_pylist()
    assert kinds.count("table") == len(raw) == 40
    assert kinds.count("text") == sum(len(c["paragraphs"]) for c in raw)


def test_limit_is_explicit_and_exact(tmp_path: Path) -> None:
    prepare("musique", "train", {"questions": RAW / "musique/musique_train_100.jsonl"}, tmp_path, limit=7)
    assert pq.read_table(tmp_path / "queries.parquet").num_rows == 7


def test_gold_document_absent_from_corpus_fails_and_writes_nothing(tmp_path: Path) -> None:
    data = CanonicalData(
        queries=[Query("q1", "Who?")],
        corpus=[Document("d1", "T", "text")],
        qrels=[Qrel("q1", "d2")],
    )
    with pytest.raises(DataError) as err:
        validate(data, Path("raw/q.json"))
    assert "raw/q.json" in str(err.value) and "'q1'" in str(err.value) and "qrels.docid" in str(err.value)


def test_malformed_raw_file_exits_nonzero_with_named_record_and_no_output(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "musique.jsonl"
    lines = (RAW / "musique/musique_train_100.jsonl").read_text().splitlines()[:3]
    record = json.loads(lines[1])
    del record["paragraphs"][0]["paragraph_text"]
    bad.write_text("\n".join([lines[0], json.dumps(record), lines[2]]) + "\n")
    out = tmp_path / "out"
    code = main(
        ["prepare", "--dataset", "musique", "--split", "train", "--file", f"questions={bad}", "--out-dir", str(out)]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert str(bad) in err and record["id"] in err and "paragraph_text" in err
    assert not out.exists() or not any(out.iterdir())


def test_unknown_dataset_and_role_are_rejected_with_valid_values(tmp_path: Path, capsys) -> None:
    assert main(["prepare", "--dataset", "hotpotqa", "--split", "dev", "--out-dir", str(tmp_path)]) == 1
    assert "valid: musique, 2wikimultihopqa" in capsys.readouterr().err
    code = main(
        [
            "prepare",
            "--dataset",
            "finqa",
            "--split",
            "dev",
            "--file",
            f"tables={RAW / 'finqa/dev.json'}",
            "--out-dir",
            str(tmp_path),
        ]
    )
    assert code == 1
    assert "valid roles" in capsys.readouterr().err


def test_pooled_corpus_deduplicates_shared_paragraphs(tmp_path: Path) -> None:
    prepare("musique", "train", {"questions": RAW / "musique/musique_train_100.jsonl"}, tmp_path / "m")
    prepare("2wikimultihopqa", "dev", {"questions": RAW / "2wikimultihopqa/dev.json"}, tmp_path / "w")
    m = set(pq.read_table(tmp_path / "m/corpus.parquet").column("docid").to_pylist())
    w = set(pq.read_table(tmp_path / "w/corpus.parquet").column("docid").to_pylist())
    # MuSiQue listed twice (two splits of one corpus, say): its paragraphs count once.
    parts = [tmp_path / "m/corpus.parquet", tmp_path / "w/corpus.parquet", tmp_path / "m/corpus.parquet"]
    assert pool(parts, tmp_path / "pooled.parquet") == len(m | w) == 1890 + 20
    assert pq.read_table(tmp_path / "pooled.parquet").column("docid").to_pylist() == sorted(m | w)


def test_pooling_refuses_two_documents_with_one_id(tmp_path: Path) -> None:
    for name, text in (("a", "one text"), ("b", "another text")):
        table = CanonicalData(corpus=[Document("d1", "T", text)]).tables()["corpus"]
        pq.write_table(table, tmp_path / f"{name}.parquet")
    with pytest.raises(DataError, match="two different documents share this id"):
        pool([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


def test_beir_export_is_plain_beir(tmp_path: Path) -> None:
    data = CanonicalData(
        queries=[Query("q1", "Which team?")],
        corpus=[
            Document("d1", "Club", "A football club."),
            Document(
                "t1", "Results", "", kind="table", table_header=["Year", "Team"], table_rows=[["1911", "Notre Dame"]]
            ),
        ],
        qrels=[Qrel("q1", "t1", 1, "0"), Qrel("q1", "t1", 1, "1")],
    )
    tables = data.tables()
    for name in ("queries", "corpus", "qrels"):
        pq.write_table(tables[name], tmp_path / f"{name}.parquet")
    export(
        tmp_path / "corpus.parquet",
        tmp_path / "queries.parquet",
        tmp_path / "qrels.parquet",
        "dev",
        "pipe",
        tmp_path / "beir",
    )
    corpus = [json.loads(line) for line in (tmp_path / "beir/corpus.jsonl").read_text().splitlines()]
    assert corpus[1] == {
        "_id": "t1",
        "title": "Results",
        "text": "Year|Team\n1911|Notre Dame",
        "metadata": {"kind": "table"},
    }
    assert (tmp_path / "beir/queries.jsonl").read_text() == '{"_id": "q1", "text": "Which team?"}\n'
    # two annotators naming the same document give one BEIR qrel, and the same TREC qrel beside it
    assert (tmp_path / "beir/qrels/dev.tsv").read_text() == "query-id\tcorpus-id\tscore\nq1\tt1\t1\n"
    assert (tmp_path / "beir/qrels/dev.trec").read_text() == "q1 0 t1 1\n"
    # the Pyserini collection holds what our BM25 indexes: id, contents (the serialized table), title
    pyserini = [json.loads(line) for line in (tmp_path / "beir/pyserini/corpus.jsonl").read_text().splitlines()]
    assert pyserini[1] == {"id": "t1", "contents": "Year|Team\n1911|Notre Dame", "title": "Results"}
    assert (tmp_path / "beir/pyserini/topics.tsv").read_text() == "q1\tWhich team?\n"


# --- bad raw input: empty files, folders, non-UTF-8 bytes, bad limits, a killed prepare -------------


def _prepare_args(dataset: str, files: dict[str, Path], out: Path) -> list[str]:
    split = SAMPLE[dataset][0]
    args = ["prepare", "--dataset", dataset, "--split", split, "--out-dir", str(out)]
    for role, path in files.items():
        args += ["--file", f"{role}={path}"]
    return args


def _real_files(dataset: str) -> dict[str, Path]:
    return {role: RAW / rel for role, rel in SAMPLE[dataset][1].items()}


EMPTY_CONTENT = {
    "zero bytes": b"",
    "an empty JSON list": b"[]\n",
    "only blank lines": b"\n\n  \n",
}


@pytest.mark.parametrize("dataset", sorted(SAMPLE))
@pytest.mark.parametrize("kind", sorted(EMPTY_CONTENT))
def test_an_empty_question_file_is_an_error_not_four_empty_tables(
    dataset: str, kind: str, tmp_path: Path, capsys
) -> None:
    files = _real_files(dataset)
    empty = tmp_path / Path(files["questions"]).name
    empty.write_bytes(EMPTY_CONTENT[kind])
    files["questions"] = empty
    out = tmp_path / "out"
    assert main(_prepare_args(dataset, files, out)) == 1
    err = capsys.readouterr().err
    assert str(empty) in err
    assert (
        ("empty (0 bytes)" in err)
        if kind == "zero bytes"
        else ("no questions" in err or "expected a JSON" in err or "empty file" in err)
    )
    assert not out.exists() or not any(out.iterdir())


def test_an_empty_second_raw_file_names_its_role(tmp_path: Path, capsys) -> None:
    files = _real_files("ambigqa")
    files["passages"] = tmp_path / "psgs.tsv"
    files["passages"].write_bytes(b"")
    assert main(_prepare_args("ambigqa", files, tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert str(files["passages"]) in err and "'passages'" in err and "0 bytes" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dataset", ["tatqa", "musique", "tanq"])
def test_a_folder_as_raw_file_is_named(dataset: str, tmp_path: Path, capsys) -> None:
    files = _real_files(dataset)
    files["questions"] = tmp_path / "a_folder.json"
    files["questions"].mkdir()
    assert main(_prepare_args(dataset, files, tmp_path / "out")) == 1
    err = capsys.readouterr().err
    assert str(files["questions"]) in err and "is a directory" in err and "Traceback" not in err
    # planning (snakemake -n) does not trip over the folder either: prepare is where it is reported
    assert has_gold_evidence(dataset, {role: str(p) for role, p in files.items()})[0] is True


# (dataset, role, line to corrupt (1-based)): JSON over many lines, JSONL, TSV.
NON_UTF8 = [
    ("tatqa", "questions", 40),
    ("musique", "questions", 3),
    ("tanq", "questions", 5),
    ("ambigqa", "passages", 7),
    ("strategyqa", "decompositions", 2),
]


@pytest.mark.parametrize("dataset, role, line", NON_UTF8)
def test_non_utf8_bytes_name_the_file_and_line(dataset: str, role: str, line: int, tmp_path: Path, capsys) -> None:
    files = _real_files(dataset)
    lines = files[role].read_bytes().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].replace(b"e", b"\xe9", 1)  # Latin-1 "é": not UTF-8
    assert b"\xe9" in lines[line - 1]
    bad = tmp_path / files[role].name
    bad.write_bytes(b"".join(lines))
    files[role] = bad
    out = tmp_path / "out"
    assert main(_prepare_args(dataset, files, out)) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and f"record 'line {line}'" in err and "not UTF-8" in err and "e9" in err
    assert not out.exists()


@pytest.mark.parametrize("limit", ["-1", "0", "two"])
def test_limit_below_one_is_refused_by_the_command(limit: str, tmp_path: Path, capsys) -> None:
    args = _prepare_args("musique", _real_files("musique"), tmp_path / "out") + ["--limit", limit]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--limit" in err and "expected a whole number >= 1" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("limit", [-1, 0])
def test_limit_below_one_is_refused_by_the_function(limit: int, tmp_path: Path) -> None:
    # -1 used to keep all but the last question ([:-1]) and 0 none of them, both with exit 0.
    with pytest.raises(ConfigError, match="limit must be a whole number of questions >= 1"):
        prepare("musique", "train", _real_files("musique"), tmp_path / "out", limit=limit)
    assert not (tmp_path / "out").exists()


def test_a_selection_that_keeps_no_question_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="keeps none of the 100 questions"):
        prepare("musique", "train", _real_files("musique"), tmp_path / "out", hops=[9])


_KILL_BETWEEN_TABLES = """
import os, signal, sys
import pyarrow.parquet as pq
from cqabench.cli import main
real_write, written = pq.write_table, []
def write_then_die(table, where, *a, **kw):
    real_write(table, where, *a, **kw)
    written.append(where)
    if len(written) == 2:  # two tables on disk, two to go: the worst moment to be killed
        os.kill(os.getpid(), signal.SIGKILL)
pq.write_table = write_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_prepare_killed_between_tables_leaves_no_table_and_the_rerun_sweeps_its_temporaries(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = _prepare_args("tatqa", _real_files("tatqa"), out)
    killed = subprocess.run(
        [sys.executable, "-c", _KILL_BETWEEN_TABLES, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = sorted(p.name for p in out.iterdir())
    assert not any(name.endswith(".parquet") for name in left)  # all or nothing: nothing
    assert len(left) == 4 and all(name.endswith(".tmp") for name in left)  # the killed job's temporaries
    assert main(args) == 0  # the next run of the rule
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{t}.parquet" for t in ("queries", "corpus", "qrels", "answers")
    )
