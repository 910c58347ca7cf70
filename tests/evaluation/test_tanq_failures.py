"""TANQ's failure taxonomy (Table 10): one test per category on hand-built tables, the rules
underneath (labels, values, cells), the shares a cell's scoring writes, and hand labels on
model outputs for the ten real TANQ sample questions (tests/fixtures/tanq_failures_10.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cqabench.data.datasets.tanq import parse_answer_table
from cqabench.evaluation.metrics.tanq_failures import (
    CATEGORIES,
    COMPUTED,
    NOT_COMPUTED,
    classify,
    classify_cell,
    header_similarity,
    value_match,
)
from cqabench.evaluation.scoring import score_predictions
from cqabench.generation.extraction import ParsedTable, extract_answer, parse_table

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "resources" / "raw" / "tanq" / "test_questions_10.jsonl"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "tanq_failures_10.yaml"

# A gold table as TANQ writes them: the entity column, then the requested relations.
HEADER = ["entity", "director", "publication date", "genre"]
ROWS = [
    ["Alien (film)", "Ridley Scott", "1979-05-25", "science fiction film, horror film"],
    ["Blade Runner", "Ridley Scott", "1982-06-25", "science fiction film"],
    ["Gladiator", "Ridley Scott", "2000", "epic film"],
]
CORRECT = """| Film | Director | Publication date | Genre |
|---|---|---|---|
| Alien | Ridley Scott | 1979-05-25 | horror film, science fiction film |
| Blade Runner | Ridley Scott | 1982-06-25 | science fiction film |
| Gladiator | Ridley Scott | 2000 | epic film |
"""


def names(text: str | None) -> set[str]:
    table = None if text is None else parse_table(text)
    return classify(HEADER, ROWS, table).names()


def test_a_correct_table_has_no_failure() -> None:
    # Entities without the gold's "(film)", genres in another order, the labels capitalized.
    assert names(CORRECT) == set()


def test_non_table() -> None:
    assert names("Alien, Blade Runner and Gladiator were all directed by Ridley Scott.") == {"non_table"}
    assert classify(HEADER, ROWS, None).names() == {"non_table"}
    assert classify(HEADER, ROWS, ParsedTable()).names() == {"non_table"}  # what a failed extraction scores


def test_relation_missing() -> None:
    text = (
        "| Film | Director | Genre |\n| Alien | Ridley Scott | science fiction film, horror film |\n"
        "| Blade Runner | Ridley Scott | science fiction film |\n| Gladiator | Ridley Scott | epic film |"
    )
    f = classify(HEADER, ROWS, parse_table(text))
    assert f.names() == {"relation_missing"} and f.missing_relations == ("publication date",)


def test_hallucinated_relations() -> None:
    text = CORRECT.replace("| Genre |", "| Genre | Box office |").replace("|---|---|---|---|", "|---|---|---|---|---|")
    text = text.replace("science fiction film |\n", "science fiction film | $33 million |\n", 1)
    f = classify(HEADER, ROWS, parse_table(text))
    assert f.names() == {"hallucinated_relations"} and f.extra_relations == ("box office",)


def test_no_header() -> None:
    # The first line is already a film: read as data, columns aligned by content.
    text = (
        "| Alien | Ridley Scott | 1979-05-25 | science fiction film, horror film |\n"
        "| Blade Runner | Ridley Scott | 1982-06-25 | science fiction film |\n"
        "| Gladiator | Ridley Scott | 2000 | epic film |"
    )
    assert names(text) == {"no_header"}
    # A first row of values that are no gold entity still reads as data (a date is no label).
    assert "no_header" in names(
        "| Prometheus | Ridley Scott | 2012-06-08 | science fiction film |\n"
        "| Alien | Ridley Scott | 1979-05-25 | horror film, science fiction film |"
    )


def test_missing_entity() -> None:
    text = CORRECT.replace("| Gladiator | Ridley Scott | 2000 | epic film |\n", "")
    f = classify(HEADER, ROWS, parse_table(text))
    assert f.names() == {"missing_entity"} and f.missing_entities == ("gladiator",)
    # A row whose entity is not in the gold is no missing entity of its own (filter issue or
    # other hallucination: not computed), and it takes no gold row's place.
    extra = CORRECT + "| Prometheus | Ridley Scott | 2012 | science fiction film |\n"
    assert names(extra) == set()


def test_wrong_answer() -> None:
    f = classify(HEADER, ROWS, parse_table(CORRECT.replace("1982-06-25", "1982-06-26")))
    assert f.names() == {"wrong_answer"} and f.wrong_cells == (("blade runner", "publication date"),)
    assert names(CORRECT.replace("| Gladiator | Ridley Scott |", "| Gladiator | James Cameron |")) == {"wrong_answer"}
    # A value beyond the gold's (superset) is wrong, not partial.
    assert names(CORRECT.replace("| epic film |", "| epic film, comedy film |")) == {"wrong_answer"}


def test_partial_answer() -> None:
    f = classify(HEADER, ROWS, parse_table(CORRECT.replace("horror film, science fiction film", "horror film")))
    assert f.names() == {"partial_answer"} and f.partial_cells == (("alien (film)", "genre"),)


def test_an_empty_cell_is_an_omission_not_a_wrong_answer() -> None:
    assert names(CORRECT.replace("| 2000 |", "| n/a |")) == set()
    assert names(CORRECT.replace("| 2000 |", "|  |")) == set()


def test_a_transposed_table_is_read_as_rms_reads_it() -> None:
    text = (
        "| Film | Alien | Blade Runner | Gladiator |\n| Director | Ridley Scott | Ridley Scott | Ridley Scott |\n"
        "| Publication date | 1979-05-25 | 1982-06-25 | 2000 |\n"
        "| Genre | science fiction film, horror film | science fiction film | epic film |"
    )
    f = classify(HEADER, ROWS, parse_table(text))
    assert f.transposed and f.names() == set()


def test_categories_combine() -> None:
    text = "| Film | Director | Budget |\n| Alien | Tony Scott | $11 million |"
    f = classify(HEADER, ROWS, parse_table(text))
    assert f.names() == {"relation_missing", "hallucinated_relations", "missing_entity", "wrong_answer"}
    assert f.missing_relations == ("publication date", "genre") and f.extra_relations == ("budget",)


def test_header_labels() -> None:
    assert header_similarity("country of origin", "country") == 1.0  # a word of the longer label
    assert header_similarity("distributed by", "distributor") == 1.0  # same first five letters
    assert header_similarity("original language", "language") == 1.0
    assert header_similarity("start time", "start date") == pytest.approx(0.7)  # ANLS: time -> date is 3 edits of 10
    assert header_similarity("publication date", "release year") == 0.0
    assert header_similarity("date of birth", "birth year") == 0.0


def test_values() -> None:
    assert value_match("united states of america", "united states")  # 2 of its 3 content words
    assert value_match("united states fish and wildlife service", "u.s. fish and wildlife service")  # initials
    assert value_match("alex north", "alex nort")  # a typo: distance 1 of 10
    assert not value_match("ridley scott", "tony scott")  # RMS's ANLS (0.58) would take it
    assert not value_match("john morris", "morris john smith")  # "smith" is no gold word
    assert not value_match("1998-01-20", "1998-01-21")  # distance 1 of 10, but another day
    assert value_match("1975-06-04", "1975") and value_match("december 1956", "1956")  # the year of the date
    assert not value_match("1975-06-04", "1976")
    assert value_match("128", "128.0") and not value_match("128", "130")  # integers: equal only
    assert value_match("3.14", "3.13") and not value_match("3.14", "3.0")  # 1 % relative
    assert value_match("8,336,817", "8336817")
    assert not value_match("john morris", "john barry")  # Levenshtein 5 / 10: not below 0.5


def test_cells() -> None:
    assert classify_cell("comedy film, parody film", "parody film, comedy film") == "correct"
    assert classify_cell("comedy film, parody film", "parody film") == "partial"
    assert classify_cell("comedy film, parody film", "parody film, drama film") == "wrong"
    assert classify_cell("warner bros., netflix", "warner bros.") == "partial"  # not ANLS-close as a whole
    assert classify_cell("english", "french") == "wrong"
    assert classify_cell("english", "unknown") == "empty"


def test_every_category_of_table_10_is_decided_or_marked_not_computed() -> None:
    assert [label for _, label, _ in CATEGORIES] == list(
        yaml.safe_load(
            "[relation missing, no header, filter issues, hallucinated relations, hallucination other, "
            "missing entity, non-table, partial answers, wrong answer]"
        )
    )
    assert set(COMPUTED) | set(NOT_COMPUTED) == {m for m, _, _ in CATEGORIES}
    assert set(NOT_COMPUTED) == {"failure_filter_issues", "failure_hallucination_other"}


def test_scoring_writes_the_share_of_predictions_per_category() -> None:
    queries = [{"qid": q, "question": "?", "question_type": "wikidata_comp", "skills": []} for q in "abcd"]
    answers = [{"qid": q, "answer_type": "table", "table_header": HEADER, "table_rows": ROWS} for q in "abcd"]
    preds = [
        {"qid": "a", "prediction": CORRECT},
        {"qid": "b", "prediction": CORRECT.replace("horror film, science fiction film", "horror film")},
        {"qid": "c", "prediction": "Ridley Scott directed them all."},
    ]  # d: no prediction
    summary, per_q = score_predictions("tanq", queries, answers, preds)
    s = {r["metric"]: r for r in summary if r["variant"] == "tanq"}
    assert s["failure_partial_answer"]["value"] == pytest.approx(0.25) and s["failure_partial_answer"]["n"] == 4
    assert s["failure_non_table"]["value"] == pytest.approx(0.5)  # c, and d (nothing to score)
    assert s["failure_wrong_answer"]["value"] == 0.0 and s["failure_wrong_answer"]["unit"] == "fraction"
    for metric, reason in NOT_COMPUTED.items():
        assert s[metric]["value"] is None and s[metric]["n"] == 0 and s[metric]["reason"] == reason
    rows = per_q[per_q["metric"].str.startswith("failure_")]
    assert len(rows) == 4 * len(COMPUTED) and set(rows["value"]) <= {0.0, 1.0}
    assert not set(NOT_COMPUTED) & set(per_q["metric"])


# --- the ten real sample questions ------------------------------------------------------------


def _gold() -> dict[str, tuple[list[str], list[list[str]]]]:
    out = {}
    for line in SAMPLE.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        out[rec["init_qid"]] = parse_answer_table(rec["answer_table"], SAMPLE, rec["init_qid"])
    return out


@pytest.mark.parametrize("source", ["smollm2", "written"])
def test_hand_labels_on_the_ten_sample_questions(source: str) -> None:
    """Outputs for the ten questions, through generation's extraction and the scorer, against
    the labels assigned by reading each output beside its gold table."""
    gold = _gold()
    cases = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))[source]
    assert sorted(c["qid"] for c in cases) == sorted(gold)
    preds = []
    for case in cases:  # what generation stores: the final answer and whether it was extracted
        ext = extract_answer("tanq", case["raw_output"], "few-shot")
        preds.append({"qid": case["qid"], "prediction": ext.answer, "parse_ok": ext.ok, "parse_reason": ext.reason})
    answers = [{"qid": q, "answer_type": "table", "table_header": h, "table_rows": r} for q, (h, r) in gold.items()]
    queries = [{"qid": q, "question": "?"} for q in gold]
    summary, per_q = score_predictions("tanq", queries, answers, preds)
    got = {
        qid: {
            m.removeprefix("failure_") for m, v in zip(g["metric"], g["value"]) if m.startswith("failure_") and v == 1
        }
        for qid, g in per_q.groupby("qid")
    }
    assert got == {c["qid"]: set(c["labels"]) for c in cases}
    shares = {r["metric"]: r["value"] for r in summary if r["metric"].startswith("failure_")}
    expected = {m: sum(m.removeprefix("failure_") in c["labels"] for c in cases) / 10 for m in COMPUTED}
    assert {m: shares[m] for m in COMPUTED} == pytest.approx(expected)
    if source == "smollm2":  # the recorded outputs' shares, as docs/metrics.md quotes them (not a fresh run's)
        assert expected["failure_relation_missing"] == 1.0 and expected["failure_hallucinated_relations"] == 0.9
        assert expected["failure_missing_entity"] == 1.0
        assert all(
            expected[m] == 0
            for m in COMPUTED
            if m not in ("failure_relation_missing", "failure_hallucinated_relations", "failure_missing_entity")
        )


def test_table_10_puts_our_shares_beside_the_papers() -> None:
    """A cell's scored shares, as aggregate writes them into metrics.parquet, in the report's Table 10."""
    import pandas as pd

    from cqabench.report.aggregate import split_breakdown
    from cqabench.report.expected import load_expected
    from cqabench.report.tables import build_grid, to_markdown

    spec = {s.id: s for s in load_expected(REPO / "config" / "expected" / "tanq.yaml")}["tanq_table10_failures"]
    queries = [{"qid": q, "question": "?"} for q in "ab"]
    answers = [{"qid": q, "answer_type": "table", "table_header": HEADER, "table_rows": ROWS} for q in "ab"]
    summary, _ = score_predictions("tanq", queries, answers, [{"qid": "a", "prediction": CORRECT}])
    cell = {
        "cell_id": "metrics/tanq/c",
        "stage": "generation",
        "dataset": "tanq",
        "split": "test",
        "setting": "oracle",
        "llm": "gpt4",
        "prompt": "few-shot",
    }
    rows = []
    for r in summary:
        metric, breakdown, bucket = split_breakdown(r["metric"])
        rows.append({**cell, **r, "metric": metric, "breakdown": breakdown, "breakdown_value": bucket})
    grid = build_grid(pd.DataFrame(rows), None, spec)
    ours = ("oracle", "gpt4", "few-shot")
    non_table = grid.cells[(("failure_non_table",), ours)]
    assert non_table.ours == pytest.approx(0.5) and non_table.paper == 0.0  # b: no prediction
    assert non_table.status(spec.tolerance) == "FAIL"  # |0.5 - 0| > 0.10
    missing = grid.cells[(("failure_missing_entity",), ours)]
    assert missing.ours == 0.0 and missing.paper == pytest.approx(0.275) and missing.status(spec.tolerance) == "FAIL"
    judged = grid.cells[(("failure_filter_issues",), ours)]
    assert judged.not_available and judged.reason == NOT_COMPUTED["failure_filter_issues"]
    md = to_markdown(grid)
    assert "| non-table |" in md and "n/a [1] / 0.040 (n/a)" in md and "open book / Tool LM / tools" in md


def test_tanq_failures_command_lists_each_question_and_why(tmp_path: Path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cqabench.cli import main

    answers = tmp_path / "answers.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [{"qid": q, "answer_type": "table", "table_header": HEADER, "table_rows": ROWS} for q in ("a", "b", "c")]
        ),
        answers,
    )
    preds = tmp_path / "predictions.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "qid": "a",
                    "prediction": CORRECT.replace("horror film, science fiction film", "horror film"),
                    "parse_ok": True,
                    "parse_reason": "",
                },
                {"qid": "b", "prediction": "", "parse_ok": False, "parse_reason": "no table"},
            ]
        ),
        preds,
    )  # c: not asked
    out = tmp_path / "f" / "failures.jsonl"
    assert main(["tanq-failures", "--predictions", str(preds), "--answers", str(answers), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split("\t")[:2] == ["a", "partial_answer"] and "alien (film)" in printed[0]
    assert printed[1].split("\t")[:2] == ["b", "non_table"] and len(printed) == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[0]["partial_cells"] == [["alien (film)", "genre"]] and records[1]["parse_reason"] == "no table"
    # Bad input: a clear error naming the file, no output written.
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{"qid": "a", "text": "x"}]), bad)
    out2 = tmp_path / "g" / "failures.jsonl"
    assert main(["tanq-failures", "--predictions", str(bad), "--answers", str(answers), "--out", str(out2)]) == 1
    assert "bad.parquet" in capsys.readouterr().err and not out2.exists()
