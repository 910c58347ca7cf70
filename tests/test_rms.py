"""TANQ RMS: values computed by hand from the definition in google-deepmind/tanq tanq_utils.py."""

from __future__ import annotations

import json

import pytest

from cqabench.extraction import format_table, parse_table
from cqabench.metrics.tables import (
    RmsScore,
    anls,
    datapoints_prf,
    normalize_cell,
    rms,
    table_datapoints,
    transpose,
    value_similarity,
)

GOLD_H = ["entity", "a", "b"]
GOLD_R = [["x", "1", "foo"], ["y", "2", "bar"]]


def approx(score: RmsScore, p: float, r: float, f: float) -> None:
    assert (score.precision, score.recall, score.f1) == pytest.approx((p, r, f))


def test_anls_threshold_is_strict():
    # "abcx" vs "abcd": 1 edit / 4 chars = 0.25 -> 0.75
    assert anls("abcd", "abcx") == pytest.approx(0.75)
    # "abxy" vs "abcd": 2 edits / 4 = 0.5, not < 0.5 -> 0
    assert anls("abcd", "abxy") == 0.0
    # "abcdef" vs "abcxyf": 2/6 = 0.333 -> 0.667
    assert anls("abcdef", "abcxyf") == pytest.approx(2 / 3)
    # pix2struct: an empty target scores 1 only against an empty prediction
    assert anls("", "") == 1.0 and anls("", "x") == 0.0


def test_key_at_exactly_half_edit_distance_scores_zero():
    # one datapoint each; key distance 2/4 = 0.5 -> key similarity 0 -> score 0 -> (0, 0, 0)
    approx(datapoints_prf({"abcd": "v"}, {"abxy": "v"}), 0, 0, 0)
    # key distance 1/4 -> 0.75; equal values -> score 0.75 over 1 pred and 1 gold
    approx(datapoints_prf({"abcd": "v"}, {"abcx": "v"}), 0.75, 0.75, 0.75)


def test_numeric_values_relative_error():
    # |100-110|/100 = 0.1, not < 0.1 -> 0
    assert value_similarity("100", "110") == 0.0
    # 5% error -> 1 - 0.05 = 0.95 (both directions)
    assert value_similarity("100", "105") == pytest.approx(0.95)
    assert value_similarity("100", "95") == pytest.approx(0.95)
    # a trailing % divides by 100: 50% == 0.5; 52% vs 50% -> 0.02/0.5 = 0.04 -> 0.96
    assert value_similarity("50%", "0.5") == pytest.approx(1.0)
    assert value_similarity("50%", "52%") == pytest.approx(0.96)
    # a zero gold is compared as a string, as TANQ does: "0" vs "0.0" -> 2 edits / 3 >= 0.5 -> 0
    assert value_similarity("0", "0.0") == 0.0
    # a numeric gold against text: not equal -> ANLS("12", "twelve") = 0
    assert value_similarity("12", "twelve") == 0.0
    # text: "english" vs "englsh": 1 edit / 7 -> 6/7
    assert value_similarity("english", "englsh") == pytest.approx(6 / 7)
    # nan/inf are text here
    assert value_similarity("nan", "nan") == 1.0


def test_datapoints_skip_row_header_column_and_keep_later_duplicate():
    # keys "<row header> <column header>" over the non-first columns, lower-cased
    assert table_datapoints(["Entity", "A", "B"], [["X", "1", "Foo"]]) == {"x a": "1", "x b": "foo"}
    # a repeated key keeps the later row
    assert table_datapoints(["entity", "a"], [["x", "1"], ["x", "2"]]) == {"x a": "2"}
    # one column or no data rows: no datapoints
    assert table_datapoints(["entity"], [["x"]]) == {}
    assert table_datapoints(["entity", "a"], []) == {}


def test_duplicate_gold_keys():
    gold_h, gold_r = ["entity", "a"], [["x", "1"], ["x", "2"]]  # one datapoint: "x a" -> "2"
    approx(rms(gold_h, gold_r, ["entity", "a"], [["x", "2"]]), 1, 1, 1)
    # "1" vs "2": |2-1|/2 = 0.5 >= 0.1 -> 0; transposed reading has keys "a x" (2 edits/3) -> 0
    approx(rms(gold_h, gold_r, ["entity", "a"], [["x", "1"]]), 0, 0, 0)


def test_identical_table_is_perfect():
    approx(rms(GOLD_H, GOLD_R, GOLD_H, GOLD_R), 1, 1, 1)


def test_case_is_ignored():
    approx(rms(GOLD_H, GOLD_R, ["ENTITY", "A", "B"], [["X", "1", "FOO"], ["Y", "2", "BAR"]]), 1, 1, 1)


def test_transposed_prediction_scores_as_transposed():
    pred_h, pred_r = transpose(GOLD_H, GOLD_R)
    assert pred_h == ["entity", "x", "y"] and pred_r == [["a", "1", "2"], ["b", "foo", "bar"]]
    # As read, keys are "a x", "a y", "b x", "b y" against gold "x a", ...: every pair is at least
    # 2 edits out of 3 -> key similarity 0 -> (0, 0, 0).
    gold = table_datapoints(GOLD_H, GOLD_R)
    approx(datapoints_prf(gold, table_datapoints(pred_h, pred_r)), 0, 0, 0)
    # Read transposed it is the gold table again.
    approx(rms(GOLD_H, GOLD_R, pred_h, pred_r), 1, 1, 1)


def test_partial_table():
    # prediction has row x only: 2 exact datapoints; score 2; P = 2/2, R = 2/4, F1 = 2*1*0.5/1.5
    approx(rms(GOLD_H, GOLD_R, GOLD_H, [["x", "1", "foo"]]), 1.0, 0.5, 2 / 3)


def test_extra_wrong_rows_lower_precision():
    # 4 gold datapoints matched exactly + 2 extra predicted ones (row z) unmatched:
    # score 4, P = 4/6, R = 4/4, F1 = 2*(2/3)*1/(5/3) = 0.8
    pred_r = GOLD_R + [["zzzz", "9", "qqq"]]
    approx(rms(GOLD_H, GOLD_R, GOLD_H, pred_r), 4 / 6, 1.0, 0.8)


def test_row_header_enters_only_through_keys():
    # gold key "x a", predicted "z a": 1 edit / 3 -> key similarity 2/3; value equal
    # -> score 2/3 over 1 datapoint each
    approx(rms(["entity", "a"], [["x", "1"]], ["entity", "a"], [["z", "1"]]), 2 / 3, 2 / 3, 2 / 3)


def test_numeric_value_error_in_table():
    # gold "x a" = 100; predicted 105 -> 0.95; predicted 110 -> 0 (error exactly 0.1)
    approx(rms(["entity", "a"], [["x", "100"]], ["entity", "a"], [["x", "105"]]), 0.95, 0.95, 0.95)
    approx(rms(["entity", "a"], [["x", "100"]], ["entity", "a"], [["x", "110"]]), 0, 0, 0)


def test_empty_prediction():
    approx(rms(GOLD_H, GOLD_R, [], []), 1, 0, 0)
    # a header without rows has no datapoints either way round
    approx(rms(GOLD_H, GOLD_R, GOLD_H, []), 1, 0, 0)


def test_ragged_rows_are_zipped():
    # the short row contributes "y a" only; the long row's extra cell has no header
    pred_r = [["x", "1", "foo", "extra"], ["y", "2"]]
    # datapoints: x a, x b, y a (3, all exact) -> P = 3/3, R = 3/4, F1 = 2*0.75/1.75
    approx(rms(GOLD_H, GOLD_R, GOLD_H, pred_r), 1.0, 0.75, 1.5 / 1.75)


def test_real_tanq_gold_tables_score_perfectly_through_the_parser(shared_data):
    """The 10 real TANQ test tables: gold as markdown, and transposed, parse back to F1 = 1."""
    lines = (shared_data / "tanq" / "test_questions_10.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 10
    for line in lines:
        rec = json.loads(line)
        grid = [[c.strip() for c in row.split("|")] for row in rec["answer_table"].strip().split("\n")]
        header, rows = grid[0], grid[1:]
        parsed = parse_table("Here is the table:\n\n" + format_table(header, rows))
        assert parsed is not None and parsed.header == header
        assert rms(header, rows, parsed.header, parsed.rows).f1 == pytest.approx(1.0)
        th, tr = transpose(header, rows)
        assert rms(header, rows, th, tr).f1 == pytest.approx(1.0)


def test_gold_and_prediction_cells_get_the_same_normalization():
    # the parser collapses spaces and drops markdown in predicted cells; gold cells get the same
    assert normalize_cell("  Mel\u00a0 Brooks ") == "mel brooks"
    assert normalize_cell("**Spaceballs**") == normalize_cell("Spaceballs") == "spaceballs"
    assert normalize_cell("comedy<br>drama") == "comedy drama"
    gold_h, gold_r = ["entity", "composer"], [["Spaceballs", "John  Morris"], ["**Life Stinks**", "John Morris"]]
    pred = parse_table("| entity | composer |\n|---|---|\n| Spaceballs | John Morris |\n| Life Stinks | John Morris |")
    # before: "john  morris" vs "john morris" = ANLS 1 - 1/12, and "**life stinks** composer" a worse key
    approx(rms(gold_h, gold_r, pred.header, pred.rows), 1, 1, 1)
    # and the other way round: decoration and spacing in raw predicted cells passed directly
    approx(rms(["entity", "a"], [["x", "1 2"]], ["*entity*", "`a`"], [["**x**", "1   2"]]), 1, 1, 1)


def test_rows_after_a_blank_line_count_as_tanq_counts_them():
    """TANQ's evaluation reads every line of the prediction; the parser keeps rows after a
    blank or stray line too, so they score (before: only the rows above the gap)."""
    text = "| entity | a | b |\n|---|---|---|\n| x | 1 | foo |\n\nthe other one:\n| y | 2 | bar |\n"
    t = parse_table(text)
    approx(rms(GOLD_H, GOLD_R, t.header, t.rows), 1, 1, 1)
