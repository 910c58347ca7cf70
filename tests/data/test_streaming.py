"""The streaming data stage: same tables as the in-memory path, bounded readers, named errors.

The in-memory path is what `prepare` did before: the loader's records gathered into one
`CanonicalData` (`collect`), `CanonicalData.tables()`, `pq.write_table` of each table. Every
sample dataset must give byte-identical files both ways, and row-identical ones when the corpus
is cut into many row groups.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cqabench.common.io as cio
from cqabench.common.errors import DataError
from cqabench.data import corpora
from cqabench.data.datasets import common, loader, strategyqa
from cqabench.data.datasets.common import IdDigests, iter_json_object
from cqabench.data.prepare import prepare
from cqabench.data.schema import CORPUS_SCHEMA, CanonicalData, Document

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "resources" / "raw"

SAMPLE = {
    "musique": ("train", {"questions": "musique/musique_train_100.jsonl"}),
    "2wikimultihopqa": ("dev", {"questions": "2wikimultihopqa/dev.json"}),
    "strategyqa": (
        "dev",
        {"questions": "strategyqa/dev.json", "decompositions": "strategyqa/bart_decomp_dev_predictions.jsonl"},
    ),
    "ambigqa": ("dev", {"questions": "ambigqa/dev_light_40.json", "passages": "ambigqa/psgs_w100_sample.tsv"}),
    "ottqa": (
        "dev",
        {
            "questions": "ottqa/dev.traced.sample.json",
            "tables": "ottqa/dev_tables.sample.json",
            "passages": "ottqa/dev_passages.sample.json",
        },
    ),
    "tatqa": ("dev", {"questions": "tatqa/tatqa_dataset_dev.sample.json"}),
    "finqa": ("dev", {"questions": "finqa/dev.json"}),
    "tanq": ("test", {"questions": "tanq/test_questions_10.jsonl"}),
}


def _in_memory(dataset: str, split: str, files: dict[str, Path], out: Path) -> None:
    """The pre-streaming prepare, for comparison: gather everything, then write each table whole."""
    data = common.collect(loader(dataset).records(files, split))
    out.mkdir(parents=True)
    for name, table in data.tables().items():
        pq.write_table(table, out / f"{name}.parquet")


@pytest.mark.parametrize("dataset", sorted(SAMPLE))
def test_streaming_prepare_writes_the_in_memory_tables(dataset: str, tmp_path: Path, monkeypatch) -> None:
    split, rel = SAMPLE[dataset]
    files = {role: RAW / p for role, p in rel.items()}
    prepare(dataset, split, files, tmp_path / "stream")
    _in_memory(dataset, split, files, tmp_path / "memory")
    for name in ("queries", "corpus", "qrels", "answers"):
        a, b = (tmp_path / d / f"{name}.parquet" for d in ("stream", "memory"))
        assert a.read_bytes() == b.read_bytes(), name
    # Cut into row groups of 7 documents: other bytes, the same rows in the same order.
    monkeypatch.setattr(cio, "ROWS_PER_GROUP", 7)
    prepare(dataset, split, files, tmp_path / "groups")
    corpus = pq.ParquetFile(tmp_path / "groups" / "corpus.parquet")
    n = corpus.metadata.num_rows
    assert corpus.metadata.num_row_groups == max(1, -(-n // 7))
    assert corpus.read().equals(pq.read_table(tmp_path / "memory" / "corpus.parquet"))


def _paragraphs(n: int) -> dict[str, dict]:
    return {
        f"Page {i}-{i % 3}": {
            "title": f"Page {i}",
            "section": "",
            "headers": [],
            "para_index": i % 3,
            "content": f"paragraph {i} " + "word " * (i % 50),
        }
        for i in range(n)
    }


def test_json_object_reader_matches_json_load_across_window_edges(tmp_path: Path, monkeypatch) -> None:
    """Members, numbers and escapes cut by every possible window boundary come out as json.load reads them."""
    monkeypatch.setattr(common, "_READ_CHARS", 13)
    obj = {**_paragraphs(40), "n": 1234567890, "x": [1.5, None, True, {"é": '"q"\n'}], "last": -0.25}
    for indent in (None, 1):
        path = tmp_path / f"p{indent}.json"
        path.write_text(json.dumps(obj, indent=indent, ensure_ascii=indent is None), encoding="utf-8")
        assert [(k, v) for _, k, v in iter_json_object(path, "paragraphs")] == list(obj.items())
    lines = [line for line, _, _ in iter_json_object(tmp_path / "p1.json", "paragraphs")]
    text = (tmp_path / "p1.json").read_text(encoding="utf-8").splitlines()
    assert all(text[line - 1].startswith(f" {json.dumps(k)}:") for line, k in zip(lines, obj))


def test_a_malformed_member_in_the_middle_of_a_large_file_names_its_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(common, "_READ_CHARS", 4096)  # 2,000 members span many windows
    pars = _paragraphs(2000)
    text = json.dumps(pars, indent=1)
    lines = text.splitlines()
    bad = next(i for i, line in enumerate(lines) if line.startswith(' "Page 1234-1"'))
    lines[bad + 2] = lines[bad + 2].rstrip(",")  # drop the comma after "section": ""
    path = tmp_path / "strategyqa_train_paragraphs.json"
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DataError) as err:
        list(iter_json_object(path, "paragraphs"))
    assert err.value.path == str(path) and err.value.record == f"line {bad + 4}"  # where the parser stops
    assert "Expecting ',' delimiter" in err.value.problem and "'Page 1233-0'" in err.value.problem


def test_streamed_paragraphs_name_file_record_and_field(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(common, "_READ_CHARS", 4096)
    questions = RAW / "strategyqa" / "dev.json"
    raw = json.loads(questions.read_text(encoding="utf-8"))
    ids = sorted(
        {
            p
            for r in raw
            for ann in r["evidence"]
            for step in ann
            for item in step
            if isinstance(item, list)
            for p in item
        }
    )
    pars = {**_paragraphs(1500), **{pid: {"title": pid.rsplit("-", 1)[0], "content": f"text of {pid}"} for pid in ids}}
    path = tmp_path / "paragraphs.json"
    path.write_text(json.dumps(pars), encoding="utf-8")  # one line, as the official file
    data = strategyqa.load({"questions": questions, "paragraphs": path}, "dev", relevance="paragraphs")
    assert [d.docid for d in data.corpus] == list(pars)
    assert len(data.qrels) == 1492  # as the in-memory loader counted on this file (test_loaders_text)
    del pars["Page 700-1"]["content"]
    path.write_text(json.dumps(pars), encoding="utf-8")
    with pytest.raises(DataError) as err:
        strategyqa.load({"questions": questions, "paragraphs": path}, "dev")
    assert (err.value.path, err.value.record, err.value.field) == (str(path), "Page 700-1", "content")
    pars["Page 700-1"]["content"] = "back"
    del pars[ids[5]]
    path.write_text(json.dumps(pars), encoding="utf-8")
    with pytest.raises(DataError, match=f"paragraph id {ids[5]!r}.*is absent from"):
        strategyqa.load({"questions": questions, "paragraphs": path}, "dev")


def test_repeated_member_and_wrong_top_level_are_named(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"a": 1,\n "b": 2,\n "a": 3}', encoding="utf-8")
    with pytest.raises(DataError, match=r"member name repeated \(lines 1 and 3\)") as err:
        list(iter_json_object(path, "paragraphs"))
    assert err.value.record == "a"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(DataError, match="expected a JSON object of paragraphs, got list"):
        list(iter_json_object(path, "paragraphs"))


def test_duplicate_passage_id_found_after_streaming_leaves_no_output(tmp_path: Path) -> None:
    rows = (RAW / "ambigqa" / "psgs_w100_sample.tsv").read_text(encoding="utf-8").splitlines()
    dup_id = rows[3].split("\t", 1)[0]
    rows.insert(500, rows[3])  # the same id again at line 501
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(DataError) as err:
        prepare("ambigqa", "dev", {"questions": RAW / "ambigqa/dev_light_40.json", "passages": tsv}, out)
    assert (err.value.path, err.value.record, err.value.field) == (str(tsv), dup_id, "id")
    assert "line 501" in err.value.problem
    assert not out.exists()


def test_id_digests_find_repeats_and_absent_ids() -> None:
    d = IdDigests()
    for v in ("a", "b", "c", "b"):
        d.add(v)
    assert d.repeated() == {IdDigests.digest("b")}
    assert d.missing(["c", "z", "a", "y"]) == ["z", "y"]
    assert IdDigests().repeated() == set() and IdDigests().missing(["x"]) == ["x"]


def test_id_digests_spilled_to_buckets_answer_as_in_memory() -> None:
    """Past `buffer` digests go to bucket files on disk (flat memory); the answers do not change.
    Real ids: the bundled psgs_w100 sample's passage ids, with every 7th one added twice."""
    ids = [
        line.split("\t", 1)[0]
        for line in (RAW / "ambigqa/psgs_w100_sample.tsv").read_text(encoding="utf-8").splitlines()[1:]
    ]
    stream = ids + ids[::7]
    memory, spilled = IdDigests(), IdDigests(buffer=50)
    for v in stream:
        memory.add(v)
        spilled.add(v)
    assert spilled._spill is not None and len(list(spilled._spill.iterdir())) > 100  # ~250 buckets on disk
    assert len(spilled) == len(memory) == len(stream)
    assert spilled.repeated() == memory.repeated() == {IdDigests.digest(v) for v in ids[::7]}
    probe = ["no-such-id", ids[0], ids[-1], "another", ids[500]]
    assert spilled.missing(probe) == memory.missing(probe) == ["no-such-id", "another"]
    folder = spilled._spill
    del spilled
    assert not folder.exists()  # the temporary buckets go with the object


def _corpus(path: Path, docs: list[tuple[str, str, str]]) -> Path:
    table = CanonicalData(corpus=[Document(i, t, x) for i, t, x in docs]).tables()["corpus"]
    pq.write_table(table, path)
    return path


def test_pool_in_merge_levels_equals_its_definition(tmp_path: Path, monkeypatch) -> None:
    """Runs of 3 rows merged 2 at a time (several levels): sorted by docid, first copy kept."""
    monkeypatch.setattr(corpora, "FAN_IN", 2)
    monkeypatch.setattr(corpora, "GROUP_ROWS", 2)
    a = _corpus(tmp_path / "a.parquet", [(f"d{i:02d}", "T", f"text {i}") for i in (5, 3, 9, 1, 7, 3, 11)])
    b = _corpus(tmp_path / "b.parquet", [(f"d{i:02d}", "T", f"text {i}") for i in (2, 9, 4, 1, 12, 0)])
    out = tmp_path / "pooled.parquet"
    assert corpora.pool([a, b, a], out, run_rows=3) == 10
    table = pq.read_table(out)
    assert table.column("docid").to_pylist() == [f"d{i:02d}" for i in (0, 1, 2, 3, 4, 5, 7, 9, 11, 12)]
    assert table.column("text").to_pylist()[:3] == ["text 0", "text 1", "text 2"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pooled")]  # runs removed
    c = _corpus(tmp_path / "c.parquet", [("d09", "T", "another text")])
    with pytest.raises(DataError, match="two different documents share this id"):
        corpora.pool([a, b, c], tmp_path / "bad.parquet", run_rows=3)
    assert not (tmp_path / "bad.parquet").exists()


def test_a_single_member_corpus_is_the_prepared_file_itself(tmp_path: Path) -> None:
    prepare("tatqa", "dev", {"questions": RAW / "tatqa/tatqa_dataset_dev.sample.json"}, tmp_path / "data")
    src = tmp_path / "data" / "corpus.parquet"
    out = tmp_path / "corpora" / "tatqa" / "corpus.parquet"
    assert corpora.pool([src], out) == pq.ParquetFile(src).metadata.num_rows
    assert os.stat(out).st_ino == os.stat(src).st_ino  # a hard link: stored once
    # A file that repeats a docid (not one prepare wrote) is pooled like several files.
    dup = _corpus(tmp_path / "dup.parquet", [("b", "T", "x"), ("a", "T", "y"), ("b", "T", "x")])
    assert corpora.pool([dup], tmp_path / "dup_pooled.parquet") == 2
    assert pq.read_table(tmp_path / "dup_pooled.parquet").column("docid").to_pylist() == ["a", "b"]


def test_row_group_writer_holds_one_group(tmp_path: Path) -> None:
    rows = [
        {"docid": str(i), "title": "", "text": "x" * i, "kind": "text", "table_header": [], "table_rows": []}
        for i in range(10)
    ]
    with cio.RowGroupWriter(tmp_path / "c.parquet", CORPUS_SCHEMA, rows_per_group=4, chars_per_group=10**9) as w:
        for row in rows:
            w.add(row)
            assert len(w._buffer) < 4
    meta = pq.ParquetFile(tmp_path / "c.parquet").metadata
    assert (meta.num_rows, meta.num_row_groups) == (10, 3)
    assert pq.read_table(tmp_path / "c.parquet").equals(pa.Table.from_pylist(rows, schema=CORPUS_SCHEMA))


def test_the_corpus_reader_names_a_repeated_docid_after_the_last_document(tmp_path: Path) -> None:
    from cqabench.data.documents import iter_documents

    path = _corpus(tmp_path / "c.parquet", [("a", "T", "x"), ("b", "T", "y"), ("a", "T", "x")])
    seen = []
    with pytest.raises(DataError) as err:
        for doc in iter_documents(path, "pipe"):
            seen.append(doc[0])
    assert seen == ["a", "b", "a"] and (err.value.record, err.value.field) == ("a", "docid")
    assert "duplicate document id" in err.value.problem


def test_a_bad_row_deep_in_a_streamed_tsv_names_its_line(tmp_path: Path) -> None:
    """Line 1,001 of a 3,300-passage psgs_w100 file lacks its title column."""
    rows = (RAW / "ambigqa" / "psgs_w100_sample.tsv").read_text(encoding="utf-8").splitlines()
    body = [f"{i + 1}\t{r.split(chr(9), 1)[1]}" for i, r in enumerate(rows[1:] * 3)]
    body[999] = body[999].rsplit("\t", 1)[0]
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("\n".join([rows[0], *body]) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        prepare("ambigqa", "dev", {"questions": RAW / "ambigqa/dev_light_40.json", "passages": tsv}, tmp_path / "out")
    assert (err.value.path, err.value.record) == (str(tsv), "line 1001")
    assert "expected 3 tab-separated columns, got 2" in err.value.problem
    assert not (tmp_path / "out").exists()
