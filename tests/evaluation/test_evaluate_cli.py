"""`cqabench evaluate` and `cqabench evaluate-generation` end to end on small prepared splits."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.data.schema import Answer, CanonicalData, Query


def _prepare(root: Path, dataset: str, split: str, queries, answers) -> Path:
    tables = CanonicalData(queries=queries, answers=answers).tables()
    d = root / dataset / split
    d.mkdir(parents=True)
    pq.write_table(tables["queries"], d / "queries.parquet")
    pq.write_table(tables["answers"], d / "answers.parquet")
    return d


@pytest.fixture
def tanq_split(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    _prepare(
        data,
        "tanq",
        "test",
        [Query("t1", "?", "composition", skills=["filtering"]), Query("t2", "?", "intersection")],
        [
            Answer("t1", "table", table_header=["entity", "a", "b"], table_rows=[["x", "1", "foo"], ["y", "2", "bar"]]),
            Answer("t2", "table", table_header=["entity", "a"], table_rows=[["z", "100"]]),
        ],
    )
    return data


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def test_evaluate_tanq_writes_metrics_json_and_per_question(tanq_split: Path, tmp_path: Path, capsys):
    preds = _jsonl(
        tmp_path / "preds.jsonl",
        [
            {"qid": "t1", "prediction": "entity|a|b\nx|1|foo\ny|2|bar"},  # exact: 1, 1, 1
            # no table: cqabench_parse finds none -> P 0, R 0, F1 0; the official reading reads the text,
            # one one-cell line, no datapoints -> P 1, R 0, F1 0 (tanq_utils.py:246-247)
            {"qid": "t2", "prediction": "no idea"},
        ],
    )
    out, per_q = tmp_path / "m" / "metrics.json", tmp_path / "m" / "per_question.parquet"
    rc = main(
        [
            "evaluate",
            "--dataset",
            "tanq",
            "--split",
            "test",
            "--predictions",
            str(preds),
            "--data-dir",
            str(tanq_split),
            "--out",
            str(out),
            "--out-per-question",
            str(per_q),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "rms_f1" in printed
    doc = json.loads(out.read_text())
    assert doc["cell"]["dataset"] == "tanq" and doc["cell"]["split"] == "test" and doc["cell"]["stage"] == "generation"
    m = {(r["metric"], r["variant"]): r for r in doc["metrics"]}
    # Fractions (0..1), every entry saying so.
    assert {r["unit"] for r in doc["metrics"]} == {"fraction"}
    assert m[("rms_precision", "cqabench_parse")]["value"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert m[("rms_recall", "cqabench_parse")]["value"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert m[("rms_f1", "cqabench_parse")]["value"] == pytest.approx(0.5)
    assert m[("rms_precision", "official")]["value"] == pytest.approx(1.0)  # (1 + 1) / 2
    assert m[("rms_recall", "official")]["value"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert m[("rms_f1", "official")]["value"] == pytest.approx(0.5)
    assert m[("rms_f1", "official")]["n"] == m[("rms_f1", "cqabench_parse")]["n"] == 2
    assert m[("parse_ok", "default")]["value"] == pytest.approx(0.5)
    # Table 10's failure shares: t2 is no table; the two that need judgement are n/a with a reason.
    assert m[("failure_non_table", "tanq")]["value"] == pytest.approx(0.5)
    assert m[("failure_missing_entity", "tanq")]["value"] == 0.0
    assert m[("failure_filter_issues", "tanq")]["value"] is None and m[("failure_filter_issues", "tanq")]["reason"]
    assert "unit: fraction" in printed and "0.5000" in printed
    assert "provenance" in doc
    table = pq.read_table(per_q)
    assert table.schema.names == ["qid", "metric", "variant", "value"]
    assert table.num_rows == 2 * 14  # P, R, F1 of both readings, 7 failure categories, parse_ok


def test_evaluate_raw_outputs_with_prompt(tanq_split: Path, tmp_path: Path):
    preds = _jsonl(
        tmp_path / "p.jsonl",
        [
            # the prompt's format after the marker: both readings read the gold table exactly -> 1
            {"qid": "t1", "prediction": "Let me think.\n[Final Answer]:\nentity | a | b\nx | 1 | foo\ny | 2 | bar"},
            # no marker under a CoT prompt: no final answer; F1 0 in both readings, and the official one
            # hands TANQ's script "" for it, which scores (P 1, R 0, F1 0) (test_tanq_non_tables.py)
            {"qid": "t2", "prediction": "entity|a\nz|100"},
        ],
    )
    out = tmp_path / "metrics.json"
    assert (
        main(
            [
                "evaluate",
                "--dataset",
                "tanq",
                "--split",
                "test",
                "--predictions",
                str(preds),
                "--data-dir",
                str(tanq_split),
                "--prompt",
                "few-shot-cot",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    m = {(r["metric"], r["variant"]): r["value"] for r in json.loads(out.read_text())["metrics"]}
    assert m[("rms_f1", "official")] == m[("rms_f1", "cqabench_parse")] == pytest.approx(0.5)
    assert m[("rms_precision", "official")] == pytest.approx(1.0)  # (1 + 1) / 2: TANQ's convention for ""
    assert m[("rms_precision", "cqabench_parse")] == pytest.approx(0.5)  # (1 + 0) / 2


@pytest.mark.parametrize(
    "lines, where, field",
    [
        (['{"qid": "t1", "prediction": "x"}', "not json"], "line 2", "'-'"),
        (['{"prediction": "x"}'], "line 1", "'qid'"),
        (['{"qid": "t1"}'], "line 1", "'prediction'"),
        (['{"qid": "t1", "prediction": {"a": 1}}'], "line 1", "'prediction'"),
        (['{"qid": "t1", "prediction": "x"}', '{"qid": "t1", "prediction": "y"}'], "line 2", "'qid'"),
        (['{"qid": "nope", "prediction": "x"}'], "line 1", "'qid'"),
    ],
)
def test_bad_predictions_file_names_file_line_and_field(tanq_split: Path, tmp_path: Path, capsys, lines, where, field):
    preds = _jsonl(tmp_path / "bad.jsonl", lines)
    out = tmp_path / "metrics.json"
    rc = main(
        [
            "evaluate",
            "--dataset",
            "tanq",
            "--split",
            "test",
            "--predictions",
            str(preds),
            "--data-dir",
            str(tanq_split),
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1
    assert str(preds) in err and where in err and field in err
    assert not out.exists()  # nothing written on failure


def test_missing_prepared_split_is_a_data_error(tmp_path: Path, capsys):
    preds = _jsonl(tmp_path / "p.jsonl", [{"qid": "a", "prediction": "x"}])
    rc = main(
        [
            "evaluate",
            "--dataset",
            "musique",
            "--split",
            "dev",
            "--predictions",
            str(preds),
            "--data-dir",
            str(tmp_path / "none"),
        ]
    )
    assert rc == 1 and "queries.parquet" in capsys.readouterr().err


def test_evaluate_generation(tmp_path: Path):
    d = _prepare(
        tmp_path / "data",
        "finqa",
        "test",
        [Query("p", "?"), Query("y", "?"), Query("n", "?")],
        [
            Answer("p", "number", ["5.2%"], number=0.052, scale="percent"),
            Answer("y", "boolean", ["yes"], boolean=True),
            Answer("n", "number", ["10"], number=10.0),
        ],
    )
    preds = pd.DataFrame(
        {
            "qid": ["p", "y", "n"],
            "raw_output": ["... [Final Answer]: 5.2%", "[Final Answer]: yes", "I am not sure"],
            "prediction": ["5.2%", "yes", "I am not sure"],
            "parse_ok": [True, True, False],
            "parse_reason": ["", "", "no final-answer marker"],
            "prompt_tokens": [100, 120, 90],
            "output_tokens": [10, 5, 7],
        }
    )
    pred_path = tmp_path / "predictions.parquet"
    pq.write_table(pa.Table.from_pandas(preds, preserve_index=False), pred_path)
    cell = {"dataset": "finqa", "split": "test", "llm": "tiny", "prompt": "few-shot-cot", "setting": "oracle", "k": 5}
    out_json, out_pq = tmp_path / "o" / "metrics.json", tmp_path / "o" / "per_question.parquet"
    rc = main(
        [
            "evaluate-generation",
            "--dataset",
            "finqa",
            "--predictions",
            str(pred_path),
            "--queries",
            str(d / "queries.parquet"),
            "--answers",
            str(d / "answers.parquet"),
            "--cell",
            json.dumps(cell),
            "--out-json",
            str(out_json),
            "--out-per-question",
            str(out_pq),
        ]
    )
    assert rc == 0
    doc = json.loads(out_json.read_text())
    assert doc["cell"]["llm"] == "tiny" and doc["cell"]["stage"] == "generation"
    m = {(r["metric"], r["variant"]): r["value"] for r in doc["metrics"]}
    # p and y right; n failed extraction -> 2/3
    assert m[("em_tol", "default")] == pytest.approx(2 / 3)
    # dexter: p 5.2 vs 5.2 right, y right, n wrong -> 2/3
    assert m[("em_tol", "dexter")] == pytest.approx(2 / 3)
    assert doc["provenance"]["prompt_tokens"] == 310 and doc["provenance"]["output_tokens"] == 22
    assert doc["provenance"]["parse_failures"] == 1
    per_q = pq.read_table(out_pq).to_pandas()
    assert set(per_q["metric"]) == {"em_tol", "parse_ok"}

    # A cell capped by max_questions asked only p and y: n was never asked and is not scored.
    pq.write_table(pa.Table.from_pandas(preds.iloc[:2], preserve_index=False), pred_path)
    rc = main(
        [
            "evaluate-generation",
            "--dataset",
            "finqa",
            "--predictions",
            str(pred_path),
            "--queries",
            str(d / "queries.parquet"),
            "--answers",
            str(d / "answers.parquet"),
            "--cell",
            json.dumps(cell),
            "--out-json",
            str(out_json),
            "--out-per-question",
            str(out_pq),
        ]
    )
    assert rc == 0
    rows = {(r["metric"], r["variant"]): r for r in json.loads(out_json.read_text())["metrics"]}
    assert rows[("em_tol", "default")]["n"] == 2 and rows[("em_tol", "default")]["value"] == pytest.approx(1.0)

    # A cell that asked no question: every metric is null with the reason, never 0.
    pq.write_table(pa.Table.from_pandas(preds.iloc[:0], preserve_index=False), pred_path)
    rc = main(
        [
            "evaluate-generation",
            "--dataset",
            "finqa",
            "--predictions",
            str(pred_path),
            "--queries",
            str(d / "queries.parquet"),
            "--answers",
            str(d / "answers.parquet"),
            "--cell",
            json.dumps(cell),
            "--out-json",
            str(out_json),
            "--out-per-question",
            str(out_pq),
        ]
    )
    assert rc == 0
    entries = json.loads(out_json.read_text())["metrics"]
    assert [(r["metric"], r["variant"]) for r in entries] == [
        ("em_tol", "default"),
        ("em_tol", "dexter"),
        ("em_tol", "exe_ans"),
        ("parse_ok", "default"),
    ]
    assert all(
        r["value"] is None and r["n"] == 0 and r["unit"] == "fraction" and "no question" in r["reason"] for r in entries
    )
    assert pq.read_table(out_pq).num_rows == 0


def test_evaluate_ambigqa_without_multi_answer_questions_is_na(tmp_path: Path, capsys):
    from cqabench.data.schema import Annotation

    d = _prepare(
        tmp_path / "data",
        "ambigqa",
        "dev",
        [Query("a", "?")],
        [
            Answer(
                "a",
                "interpretations",
                ["x"],
                annotations=[Annotation("singleAnswer", [{"question": "", "aliases": ["x"]}])],
            )
        ],
    )
    preds = _jsonl(tmp_path / "p.jsonl", [{"qid": "a", "prediction": "x"}])
    out = tmp_path / "m.json"
    assert (
        main(
            [
                "evaluate",
                "--dataset",
                "ambigqa",
                "--split",
                "dev",
                "--predictions",
                str(preds),
                "--data-dir",
                str(d.parent.parent),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    m = {(r["metric"], r["variant"]): r for r in json.loads(out.read_text())["metrics"]}
    assert m[("f1_ans", "official")]["value"] == pytest.approx(1.0)
    # f1_ans_multi averages only multi-answer questions; there are none: null + reason, not 0.
    multi = m[("f1_ans_multi", "official")]
    assert multi["value"] is None and multi["n"] == 0 and "multi-answer" in multi["reason"]
    printed = capsys.readouterr().out
    assert "n/a" in printed and "multi-answer" in printed


def test_evaluate_generation_bad_cell(tmp_path: Path, capsys):
    rc = main(
        [
            "evaluate-generation",
            "--dataset",
            "finqa",
            "--predictions",
            "x",
            "--queries",
            "q",
            "--answers",
            "a",
            "--cell",
            "{not json",
            "--out-json",
            "o",
            "--out-per-question",
            "p",
        ]
    )
    assert rc == 1 and "--cell" in capsys.readouterr().err


# --- bad predictions / prepared files on the real TANQ sample --------------------------------------

RAW = Path(__file__).resolve().parents[2] / "resources" / "raw"


@pytest.fixture
def real_tanq(tmp_path: Path) -> tuple[Path, list[str]]:
    """The bundled TANQ sample (10 real questions) prepared; returns the data dir and its qids."""
    from cqabench.data.prepare import prepare

    data = tmp_path / "data"
    prepared = prepare("tanq", "test", {"questions": RAW / "tanq" / "test_questions_10.jsonl"}, data / "tanq" / "test")
    return data, [q.qid for q in prepared.queries]


def _evaluate(data: Path, preds: Path, out: Path) -> int:
    return main(
        [
            "evaluate",
            "--dataset",
            "tanq",
            "--split",
            "test",
            "--predictions",
            str(preds),
            "--data-dir",
            str(data),
            "--out",
            str(out),
            "--out-per-question",
            str(out.with_suffix(".parquet")),
        ]
    )


@pytest.mark.parametrize("content", [b"", b"\n   \n"])
def test_an_empty_predictions_file_is_refused(real_tanq, tmp_path: Path, capsys, content: bytes):
    data, _ = real_tanq
    preds = tmp_path / "preds.jsonl"
    preds.write_bytes(content)
    out = tmp_path / "m" / "metrics.json"
    assert _evaluate(data, preds, out) == 1
    err = capsys.readouterr().err
    assert str(preds) in err and "no predictions" in err
    assert not out.parent.exists() or not any(out.parent.iterdir())


def test_non_utf8_predictions_name_the_line(real_tanq, tmp_path: Path, capsys):
    data, qids = real_tanq
    lines = [json.dumps({"qid": q, "prediction": "entity|x\nParis|1"}).encode() for q in qids[:3]]
    lines[1] = lines[1].replace(b"Paris", b"P\xe2ris")  # a Latin-1 byte
    preds = tmp_path / "preds.jsonl"
    preds.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "m" / "metrics.json"
    assert _evaluate(data, preds, out) == 1
    err = capsys.readouterr().err
    assert str(preds) in err and "record 'line 2'" in err and "not UTF-8" in err and "Traceback" not in err
    assert not out.exists()


def test_a_folder_as_predictions_or_as_a_prepared_table_is_named(real_tanq, tmp_path: Path, capsys):
    data, qids = real_tanq
    folder = tmp_path / "preds.jsonl"
    folder.mkdir()
    assert _evaluate(data, folder, tmp_path / "metrics.json") == 1
    err = capsys.readouterr().err
    assert str(folder) in err and "is a directory" in err

    preds = _jsonl(tmp_path / "p.jsonl", [{"qid": qids[0], "prediction": "x"}])
    answers = data / "tanq" / "test" / "answers.parquet"
    answers.write_bytes(b"not parquet at all")  # a cut-short copy
    assert _evaluate(data, preds, tmp_path / "metrics.json") == 1
    err = capsys.readouterr().err
    assert str(answers) in err and "not a readable Parquet file" in err
    answers.unlink()
    answers.mkdir()
    assert _evaluate(data, preds, tmp_path / "metrics.json") == 1
    assert str(answers) in capsys.readouterr().err
    assert not (tmp_path / "metrics.json").exists()


def test_missing_predictions_are_warned_about_and_counted(real_tanq, tmp_path: Path, caplog):
    data, qids = real_tanq
    assert len(qids) == 10
    preds = _jsonl(tmp_path / "p.jsonl", [{"qid": q, "prediction": "no table"} for q in qids[:7]])
    out = tmp_path / "metrics.json"
    with caplog.at_level("WARNING", logger="cqabench.evaluation.evaluate"):
        assert _evaluate(data, preds, out) == 0
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert str(preds) in warning and "3 of 10 questions" in warning and repr(qids[7]) in warning
    doc = json.loads(out.read_text())
    assert doc["provenance"]["n_predictions"] == 7 and doc["provenance"]["n_missing_predictions"] == 3
    m = {(r["metric"], r["variant"]): r for r in doc["metrics"]}
    assert m[("rms_f1", "official")]["n"] == m[("rms_f1", "cqabench_parse")]["n"] == 10  # the missing three count
    # as wrong: 0 in both readings; the seven prose answers get the official reading's precision 1
    assert m[("rms_precision", "official")]["value"] == pytest.approx(0.7)
    assert m[("rms_precision", "cqabench_parse")]["value"] == 0.0


def test_a_bad_generation_summary_is_named(tmp_path: Path, capsys):
    d = _prepare(tmp_path / "data", "finqa", "test", [Query("p", "?")], [Answer("p", "number", ["10"], number=10.0)])
    pred_path = tmp_path / "predictions.parquet"
    pq.write_table(pa.table({"qid": ["p"], "prediction": ["10"]}), pred_path)
    summary = tmp_path / "summary.json"
    summary.write_bytes(b'{"backend": "vllm", "model": "caf\xe9"}')  # Latin-1, not UTF-8
    out_json = tmp_path / "o" / "metrics.json"
    rc = main(
        [
            "evaluate-generation",
            "--dataset",
            "finqa",
            "--predictions",
            str(pred_path),
            "--queries",
            str(d / "queries.parquet"),
            "--answers",
            str(d / "answers.parquet"),
            "--summary",
            str(summary),
            "--out-json",
            str(out_json),
            "--out-per-question",
            str(tmp_path / "o" / "per_question.parquet"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and str(summary) in err and "not UTF-8" in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
