"""TANQ RMS: values computed by hand from the definition in google-deepmind/tanq tanq_utils.py."""

from __future__ import annotations

import json

import pytest

from conftest import RAW
from cqabench.evaluation.metrics.tables import (
    OfficialTable,
    RmsScore,
    anls,
    datapoints_prf,
    gold_text,
    normalize_cell,
    official_datapoints,
    read_table_official,
    rms,
    rms_official,
    table_datapoints,
    to_number,
    transpose,
    value_similarity,
)
from cqabench.generation.extraction import format_table, parse_table

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


def test_real_tanq_gold_tables_score_perfectly_through_both_readers():
    """The 10 real TANQ test tables: gold as markdown, and transposed, parse back to F1 = 1."""
    lines = (RAW / "tanq" / "test_questions_10.jsonl").read_text(encoding="utf-8").splitlines()
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
        # the official reading of the released answer_table string gives the datapoints that
        # our gold (the loader's header and rows, re-joined by gold_text) gives
        assert official_datapoints(read_table_official(rec["answer_table"])) == official_datapoints(
            read_table_official(gold_text(header, rows))
        )
        # and the prompt's format (one line per row, " | " between cells) scores 1 officially
        prompt_format = "\n".join(" | ".join(r) for r in [header, *rows])
        assert rms_official(header, rows, prompt_format).f1 == pytest.approx(1.0)


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


# --- the two readers of a predicted table, side by side ------------------------------------------
# Gold: Film | Studio / Up | Pixar / Cars | Pixar -> datapoints "up studio" -> pixar,
# "cars studio" -> pixar (lower-cased). Each output below is read by TANQ's official reading
# (read_table_official: every line a row, split at "|", nothing dropped) and by ours
# (extraction.parse_table), and scored; every value is worked out by hand in the comments.

FILM_H, FILM_R = ["Film", "Studio"], [["Up", "Pixar"], ["Cars", "Pixar"]]
CLEAN = (("film", "studio"), (("up", "pixar"), ("cars", "pixar")))

# (case, output, the official reading's (header, rows), official RMS (P, R, F1), ours (P, R, F1))
READER_CASES = [
    # both read the same table: perfect
    ("clean pipe table", "film | studio\nup | pixar\ncars | pixar", CLEAN, (1, 1, 1), (1, 1, 1)),
    # "|" spacing does not matter to either: every "|" splits, cells are stripped
    ("pipe spacing variants", "film|studio\nup |pixar\ncars|  pixar", CLEAN, (1, 1, 1), (1, 1, 1)),
    # official: outer pipes give every row an empty first cell, so every row's keys are " film",
    # " studio", " " and the last row overwrites the others: 3 datapoints (" film" -> cars,
    # " studio" -> pixar, " " -> ""). Only " studio" has a key like a gold key: "up studio" (2
    # edits / 9 -> ANLS 7/9) beats "cars studio" (4/11 -> 7/11); value pixar = pixar. Score 7/9:
    # P 7/27, R 7/18, F1 2*(7/9)/(3+2) = 14/45. Transposed: keys "film ", "studio ", " "; "up studio"
    # vs "studio " 4 edits / 9 -> 5/9, F1 2*(5/9)/5 = 2/9 < 14/45. The separator row adds nothing
    # (its keys are overwritten too). Ours drops the outer pipes and the separator: perfect.
    (
        "markdown: outer pipes and separator row",
        "| Film | Studio |\n|---|---|\n| Up | Pixar |\n| Cars | Pixar |",
        (("", "film", "studio", ""), (("", "---", "---", ""), ("", "up", "pixar", ""), ("", "cars", "pixar", ""))),
        (7 / 27, 7 / 18, 14 / 45),
        (1, 1, 1),
    ),
    (
        "outer pipes, no separator",
        "| film | studio |\n| up | pixar |\n| cars | pixar |",
        (("", "film", "studio", ""), (("", "up", "pixar", ""), ("", "cars", "pixar", ""))),
        (7 / 27, 7 / 18, 14 / 45),
        (1, 1, 1),
    ),
    # official: the separator line is a data row "--- studio" -> "---": one extra datapoint,
    # score 2 of 3 predicted -> P 2/3, R 1, F1 0.8 (transposed keys "studio up"...: ANLS 0)
    (
        "separator row without outer pipes",
        "film | studio\n--- | ---\nup | pixar\ncars | pixar",
        (("film", "studio"), (("---", "---"), ("up", "pixar"), ("cars", "pixar"))),
        (2 / 3, 1, 0.8),
        (1, 1, 1),
    ),
    # official: the fence is the header, one cell -> no datapoints (1, 0, 0); transposed: header
    # ("```", film, up, cars, "```"), keys " film", " up"... all ANLS 0 -> (0, 0, 0); both F1 0,
    # the transposed reading comes first and wins the tie -> (0, 0, 0). Ours skips fences.
    (
        "fenced",
        "```\nfilm | studio\nup | pixar\ncars | pixar\n```",
        (("```",), (("film", "studio"), ("up", "pixar"), ("cars", "pixar"), ("```",))),
        (0, 0, 0),
        (1, 1, 1),
    ),
    # official: the prose line is the header (one cell): as for the fence -> (0, 0, 0)
    (
        "prose before and after",
        "Here is the table:\nfilm | studio\nup | pixar\ncars | pixar\nHope this helps.",
        (("here is the table:",), (("film", "studio"), ("up", "pixar"), ("cars", "pixar"), ("hope this helps.",))),
        (0, 0, 0),
        (1, 1, 1),
    ),
    # prose after the table is harmless to both: one-cell rows have no datapoints
    (
        "prose after only",
        "film | studio\nup | pixar\ncars | pixar\n\nHope this helps.",
        (("film", "studio"), (("up", "pixar"), ("cars", "pixar"), ("",), ("hope this helps.",))),
        (1, 1, 1),
        (1, 1, 1),
    ),
    # where ours is lower: two prose lines end our table (MAX_STRAY_LINES = 1), so we score the
    # rows above them only (P 1, R 1/2, F1 2/3); the official reading keeps every line -> perfect
    (
        "two prose lines inside the table",
        "film | studio\nup | pixar\nBoth are Pixar films.\nSee above.\ncars | pixar",
        (("film", "studio"), (("up", "pixar"), ("both are pixar films.",), ("see above.",), ("cars", "pixar"))),
        (1, 1, 1),
        (1, 0.5, 2 / 3),
    ),
]


@pytest.mark.parametrize(
    ("case", "output", "official_table", "official", "ours"), READER_CASES, ids=[c[0] for c in READER_CASES]
)
def test_both_readers_on_the_same_output(case, output, official_table, official, ours):
    header, rows = official_table
    assert read_table_official(output) == OfficialTable(None, header, rows), case
    approx(rms_official(FILM_H, FILM_R, output), *official)
    parsed = parse_table(output)
    if ours == (1, 1, 1):  # our parser found exactly the gold table (case kept as written)
        assert [c.lower() for c in parsed.header] == ["film", "studio"]
        assert [[c.lower() for c in r] for r in parsed.rows] == [["up", "pixar"], ["cars", "pixar"]]
    approx(rms(FILM_H, FILM_R, parsed.header, parsed.rows), *ours)


def test_official_reading_is_a_split_at_every_pipe():
    # "|" is respaced to " | " before the split at " | ": the same as splitting at "|" and stripping
    assert read_table_official("A|B\n c | d |e") == OfficialTable(None, ("a", "b"), (("c", "d", "e"),))
    # an escaped pipe is a pipe too (ours keeps "\|" inside a cell)
    assert read_table_official("a | b\\|c") == OfficialTable(None, ("a", "b\\", "c"), ())
    # transposed: columns become rows, ragged lines padded with ""
    assert read_table_official("h | x | y\nr | 1", transposed=True) == OfficialTable(
        None, ("h", "r"), (("x", "1"), ("y", ""))
    )
    assert read_table_official("") == OfficialTable()


def test_official_title_line_needs_title_then_a_pipe():
    text = "Title|Pixar films\nfilm | studio\nup | pixar\ncars | pixar"
    # an original "title|" becomes "title | " and is the title: a datapoint of its own
    t = read_table_official(text)
    assert t == OfficialTable("pixar films", *CLEAN)
    assert official_datapoints(t) == {"title": "pixar films", "up studio": "pixar", "cars studio": "pixar"}
    # the title datapoint matches no gold key ("title" vs "up studio": ANLS 0): score 2 of 3 predicted
    approx(rms_official(FILM_H, FILM_R, text), 2 / 3, 1, 0.8)
    # "title | x" (a space before the pipe) becomes "title  |  x": not the prefix "title |", a row
    assert read_table_official("title | x\na | b").title is None
    assert read_table_official("title|only") == OfficialTable("only")


def test_official_reading_of_non_tables():
    # a prediction without datapoints scores (1, 0, 0) (tanq_utils.py:246-247): prose, a one-column
    # list, an empty string
    for text in ("I do not know.", "Up\nCars", ""):
        approx(rms_official(FILM_H, FILM_R, text), 1, 0, 0)
    # cells are not cleaned of markdown officially: key "**up** studio" is 4 edits from
    # "up studio" (4/13 -> ANLS 9/13), value "**pixar**" 4 edits from "pixar" (4/9 -> 5/9):
    # score (9/13)(5/9) + 1 = 18/13 over 2 predicted and 2 gold -> P = R = F1 = 9/13
    approx(rms_official(FILM_H, FILM_R, "film | studio\n**up** | **pixar**\ncars | pixar"), 9 / 13, 9 / 13, 9 / 13)


def test_percent_numbers_drop_every_trailing_percent_sign():
    # TANQ's _to_float: float(text.rstrip("%")) / 100
    assert to_number("5%") == pytest.approx(0.05) and to_number("5%%") == pytest.approx(0.05)
    assert to_number("nan") is None
