"""Answer metrics and scoring, each value computed by hand (the computation is in the comments)."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import RAW
from cqabench.data.schema import Annotation, Answer, CanonicalData, Query
from cqabench.evaluation.metrics.answers import (
    boolean_accuracy,
    boolean_cover_em,
    cover_em,
    cover_em_all,
    dexter_gold_value,
    em_tol,
    em_tol_dexter,
    exact_match,
    exe_ans_golds,
    f1_ans,
    f1_ans_dexter,
    greedy_f1,
    is_multi_answer,
    multispan_em,
    multispan_f1,
    normalize_answer,
    number_readings,
    squad_cover_em,
    token_f1,
)
from cqabench.evaluation.scoring import score_predictions, tanq_groups
from cqabench.generation.extraction import ParsedNumber, parse_answer

# --- normalization and cover-EM ----------------------------------------------------------------


def test_normalize_answer_squad():
    # lower -> delete punctuation -> drop a/an/the as words -> collapse spaces
    assert normalize_answer("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("U.S.A.") == "usa"  # dots deleted, not turned into spaces
    assert normalize_answer("Anthem of a banana") == "anthem of banana"  # "an" inside words stays
    assert normalize_answer("Eiffel-Tower") == "eiffeltower"


def test_cover_em_punctuation_and_articles():
    # "The answer: Eiffel Tower, Paris." -> "answer eiffel tower paris" contains "eiffel tower"
    assert cover_em("The answer: Eiffel Tower, Paris.", ["Eiffel Tower"]) == 1.0
    # the hyphen is deleted, so "eiffel tower" is not in "it is eiffeltower"
    assert cover_em("It is the Eiffel-Tower.", ["Eiffel Tower"]) == 0.0
    # articles are dropped on both sides: gold "The Beatles" -> "beatles"
    assert cover_em("beatles", ["The Beatles"]) == 1.0
    # any alias suffices
    assert cover_em("JFK", ["John F. Kennedy", "JFK"]) == 1.0
    # a gold of three or fewer characters matches whole words only: "no" is not inside "not"
    assert cover_em("I do not know", ["no"]) == 0.0
    # a longer gold keeps the toolkit's character substring test
    assert cover_em("thebeatles", ["The Beatles"]) == 1.0


# StrategyQA cover-EM: (case name, final answer, gold, expected). Each checked by hand: normalize
# (lower-case, delete string.punctuation, drop a/an/the), then look for yes/true (gold True) or
# no/false (gold False) as a whole word.
BOOLEAN_COVER_CASES = [
    ("issue 19's example: 'not' is no 'no'", "Yes, though he did not", False, 0.0),
    ("issue 19's example, gold yes", "Yes, though he did not", True, 1.0),
    ("bare no", "no", False, 1.0),
    ("No. with punctuation and capitals", "No.", False, 1.0),
    ("'know' and 'not' hold no 'no'", "I do not know", False, 0.0),
    ("unknown", "Unknown", False, 0.0),
    ("cannot", "It cannot be determined", False, 0.0),
    ("nothing / none / notably", "Nothing, none, notably", False, 0.0),
    ("yesterday is not yes", "Yesterday", True, 0.0),
    ("truest / untrue are not true", "the truest and untrue", True, 0.0),
    ("falsely is not false", "falsely", False, 0.0),
    ("true/false form: False for gold no", "False", False, 1.0),
    ("true/false form: TRUE for gold yes", "TRUE", True, 1.0),
    ("yes for gold no", "Yes", False, 0.0),
    ("both polarities: covered for gold yes (toolkit-faithful)", "yes and no", True, 1.0),
    ("both polarities: covered for gold no (toolkit-faithful)", "yes and no", False, 1.0),
    ("'not true' holds 'true': covered for gold yes", "No, that is not true.", True, 1.0),
    ("'yes/no': the slash is deleted -> 'yesno', one word", "Yes/No", True, 0.0),
    ("'no-one': the hyphen is deleted -> 'noone'", "No-one knows", False, 0.0),
    ("curly quotes are kept by normalization but bound the word", "\u201cNo\u201d", False, 1.0),
    ("a marker phrase left in the answer", "The answer is: NO", False, 1.0),
    ("empty answer", "", True, 0.0),
]


@pytest.mark.parametrize(
    ("case", "answer", "gold", "expected"), BOOLEAN_COVER_CASES, ids=[c[0] for c in BOOLEAN_COVER_CASES]
)
def test_boolean_cover_em_matches_the_gold_as_a_whole_word(case: str, answer: str, gold: bool, expected: float):
    assert boolean_cover_em(answer, gold) == expected, case


def test_boolean_cover_em_fixes_the_substring_inflation_of_no():
    # the old StrategyQA scoring (SQuAD cover-EM on the alias "no", the toolkit's CoverExactMatch)
    # counted these as right
    for answer in ("Yes, though he did not", "I do not know", "unknown", "It cannot be said", "nothing"):
        assert squad_cover_em(answer, ["no"]) == 1.0 and boolean_cover_em(answer, False) == 0.0


def test_exact_match_and_token_f1():
    assert exact_match("The Beatles.", ["beatles"]) == 1.0
    assert exact_match("the beatles band", ["beatles"]) == 0.0
    # pred tokens [big, red, dog], gold [red, dog]: common 2, P = 2/3, R = 1, F1 = 0.8
    assert token_f1("the big red dog", ["red dog"]) == pytest.approx(0.8)
    # max over aliases: vs "dog" -> P = 1/3, R = 1 -> 0.5; vs "red dog" -> 0.8
    assert token_f1("the big red dog", ["dog", "red dog"]) == pytest.approx(0.8)
    assert token_f1("", ["x"]) == 0.0


def test_tatqa_multi_span():
    spans = ["2019", "2018"]
    # every span must be covered
    assert cover_em_all("2019 and 2018", spans) == 1.0
    assert cover_em_all("2019", spans) == 0.0
    # EM: take each span out once; only connectors may remain ("2018 2019" / "2018 and 2019")
    assert multispan_em("2018, 2019", spans) == 1.0
    assert multispan_em("2018 and 2019.", spans) == 1.0
    assert multispan_em("2018, 2019, 2017", spans) == 0.0  # "2017" remains
    assert multispan_em("2019", spans) == 0.0
    # spans may contain "and" and commas themselves
    assert multispan_em("Interest received and paid; Taxation", ["Taxation", "Interest received and paid"]) == 1.0
    assert multispan_em("5,092 and 4,000", ["5,092", "4,000"]) == 1.0
    # an empty gold span is ignored
    assert multispan_em("a\nb", ["a", "b", ""]) == 1.0
    # F1 over pooled tokens without "and": pred [2019] vs gold [2019, 2018] -> P 1, R 0.5 -> 2/3
    assert multispan_f1("2019 and", spans) == pytest.approx(2 / 3)
    # pred [2019, 2018, 2017] vs gold [2019, 2018] -> P 2/3, R 1 -> 0.8
    assert multispan_f1("2019, 2018 and 2017", spans) == pytest.approx(0.8)


def test_boolean_accuracy():
    assert boolean_accuracy(True, True) == 1.0
    assert boolean_accuracy(False, True) == 0.0
    assert boolean_accuracy(None, False) == 0.0


# --- AmbigQA F1_ans ----------------------------------------------------------------------------

MULTI = {
    "type": "multipleQAs",
    "answers": [
        {"question": "who played ike", "aliases": ["Laurence Fishburne", "Fishburne"]},
        {"question": "who sings", "aliases": ["Tina Turner"]},
    ],
}
SINGLE = {"type": "singleAnswer", "answers": [{"question": "", "aliases": ["Tina Turner"]}]}


def test_f1_ans_takes_the_best_annotation():
    preds = ["Tina Turner", "Fishburne", "Angela Bassett"]
    # MULTI: both golds matched -> R = 2/2; 2 of 3 predictions used -> P = 2/3; F1 = 2*1*(2/3)/(5/3) = 0.8
    # SINGLE: R = 1/1, P = 1/3 -> F1 = 2*(1/3)/(4/3) = 0.5; the question scores max = 0.8
    assert f1_ans([MULTI], preds) == pytest.approx(0.8)
    assert f1_ans([SINGLE], preds) == pytest.approx(0.5)
    assert f1_ans([SINGLE, MULTI], preds) == pytest.approx(0.8)
    # exact match after normalization, not substring: "Tina Turner sings" does not match
    assert f1_ans([SINGLE], ["Tina Turner sings"]) == 0.0
    assert f1_ans([SINGLE], []) == 0.0


def test_f1_ans_matching_is_greedy_in_order():
    # gold 1 has aliases {x, y}, gold 2 only {x}; predictions [x, y].
    # Greedy: gold 1 takes the first free match, prediction "x"; gold 2 finds only "y" -> no match.
    # R = 1/2, P = 1/2 -> F1 = 0.5 (an optimal matching would give 1.0).
    ann = {"type": "multipleQAs", "answers": [{"aliases": ["x", "y"]}, {"aliases": ["x"]}]}
    assert f1_ans([ann], ["x", "y"]) == pytest.approx(0.5)
    # each prediction is used once: a repeated prediction does not match twice
    assert greedy_f1([["a"], ["a"]], ["a", "a"], lambda g, p: p in g) == 1.0
    assert greedy_f1([["a"], ["b"]], ["a", "a"], lambda g, p: p in g) == pytest.approx(0.5)


def test_is_multi_answer_follows_the_official_script():
    assert is_multi_answer([MULTI]) is True
    assert is_multi_answer([SINGLE, MULTI]) is False  # any singleAnswer annotation -> not multi
    assert is_multi_answer([]) is False


def test_f1_ans_dexter_variant_pools_aliases():
    pooled = ["Laurence Fishburne", "Fishburne", "Tina Turner"]
    preds = ["Tina Turner", "Laurence Fishburne"]
    # golds sorted: [fishburne, laurence fishburne, tina turner]; matching by cover-EM:
    # "fishburne" is in "laurence fishburne" (pred 2) -> used; "laurence fishburne" finds no free
    # prediction; "tina turner" -> pred 1. R = 2/3, P = 2/2 -> F1 = 2*(2/3)/(5/3) = 0.8
    assert f1_ans_dexter(pooled, preds) == pytest.approx(0.8)
    # the official F1 of the same answer is 1.0 (both interpretations found)
    assert f1_ans([MULTI], preds) == pytest.approx(1.0)
    # cover-EM lets a longer prediction match: official 0, dexter 1
    assert f1_ans([SINGLE], ["Tina Turner (singer)"]) == 0.0
    assert f1_ans_dexter(["Tina Turner"], ["Tina Turner (singer)"]) == 1.0


# --- FinQA EM-tol ------------------------------------------------------------------------------


def num(text: str) -> ParsedNumber:
    return parse_answer("finqa", text).value


def published(text: str) -> set[float]:
    """The gold readings of a FinQA published answer string, as scoring.finqa_gold reads it."""
    return number_readings(num(text))


def test_em_tol_percent_gold_on_either_scale():
    # exe_ans gold 0.052 with percent scale: readings {0.052, 5.2}
    assert em_tol(num("5.2%"), exe_ans_golds(0.052, True)) == 1.0  # 5.2 vs 5.2
    assert em_tol(num("5.2"), exe_ans_golds(0.052, True)) == 1.0  # bare number on the percent scale
    assert em_tol(num("0.052"), exe_ans_golds(0.052, True)) == 1.0  # fraction
    # tolerance: |5.3 - 5.2| = 0.1 <= 0.02 * 5.3 = 0.106 -> match; 5.4: 0.2 > 0.108 -> no
    assert em_tol(num("5.3%"), exe_ans_golds(0.052, True)) == 1.0
    assert em_tol(num("5.4%"), exe_ans_golds(0.052, True)) == 0.0
    # a non-percent gold still accepts "x%" as x/100: "12.5%" -> {12.5, 0.125}
    assert em_tol(num("12.5%"), exe_ans_golds(0.125)) == 1.0
    # published string "5.2%": readings {5.2, 0.052}, the same three answers match
    assert published("5.2%") == {5.2, 5.2 / 100}
    for answer in ("5.2%", "5.2", "0.052"):
        assert em_tol(num(answer), published("5.2%")) == 1.0


def test_em_tol_gold_is_the_published_answer_string():
    # real FinQA dev records (../shared/data/finqa/dev_200.json) whose exe_ans is not the
    # published answer: the answer string given back scores 1 against itself, 0 against exe_ans
    for answer, exe_ans in (("-3.2%", -16.0), ("44%", 1.25), ("73.22", 0.73215), ("$ 193 million", 85.0)):
        percent = answer.endswith("%")
        assert em_tol(num(answer), published(answer)) == 1.0, answer
        assert em_tol(num(answer), exe_ans_golds(exe_ans, percent)) == 0.0, answer
    # "73.22" (a percentage written without %): 73.22% and 0.7322 also match it, via the prediction's readings
    assert em_tol(num("73.22%"), published("73.22")) == 1.0
    assert published("$ 193 million") == {193.0, 193e6}  # the unit word read as for a prediction
    assert em_tol(num("193000000"), published("$ 193 million")) == 1.0


def test_em_tol_sign_matters_but_not_in_dexter_variant():
    assert em_tol(num("-5.2%"), exe_ans_golds(0.052, True)) == 0.0
    assert em_tol(num("3.2%"), published("-3.2%")) == 0.0  # published "-3.2%" answered without its sign
    assert em_tol(num("(127.4)"), published("-127.4")) == 1.0  # accounting negative
    # dexter: |round(5.2, 3)| vs |round(-5.2, 3)| -> equal -> 1
    assert em_tol_dexter(num("-5.2%"), dexter_gold_value("5.2%")) == 1.0


def test_em_tol_yes_no():
    assert em_tol(True, gold_boolean=True) == 1.0
    assert em_tol(False, gold_boolean=True) == 0.0
    assert em_tol(num("1"), gold_boolean=True) == 0.0  # a number never matches a yes/no gold
    assert em_tol(True, {1.0}) == 0.0  # nor a yes/no a number gold
    assert em_tol_dexter(True, gold_boolean=True) == 1.0
    assert em_tol(None, {1.0}) == 0.0
    assert em_tol(num("1"), set()) == 0.0  # no gold reading at all


def test_em_tol_units_and_currency():
    # "$1,500 million": readings {1500, 1.5e9}; gold in the table's unit (millions) 1500 -> match
    assert em_tol(num("$1,500 million"), {1500.0}) == 1.0
    assert em_tol(num("$127.40"), published("127.40")) == 1.0


def test_em_tol_dexter_rounding():
    # gold 0.04, prediction 0.01: isclose fails (0.03 > 0.02*0.04); round to 1 decimal: 0.0 == 0.0 -> 1
    assert em_tol(num("0.01"), {0.04}) == 0.0
    assert em_tol_dexter(num("0.01"), 0.04) == 1.0
    # dexter compares with the answer string's number: gold "5.2%" -> 5.2; a fraction answer fails
    assert dexter_gold_value("$1,234.5") == 1234.5
    assert dexter_gold_value("5.2%") == 5.2
    assert em_tol_dexter(num("0.052"), 5.2) == 0.0
    assert em_tol(num("0.052"), published("5.2%")) == 1.0


# --- scoring a split ---------------------------------------------------------------------------


def _tables(queries, answers):
    t = CanonicalData(queries=queries, answers=answers).tables()
    return t["queries"], t["answers"]


def _summary(summary):
    return {(r["metric"], r["variant"]): (r["value"], r["n"]) for r in summary}


def test_score_text_dataset_counts_missing_predictions_as_wrong():
    queries, answers = _tables(
        [Query("q1", "?"), Query("q2", "?"), Query("q3", "?"), Query("q4", "?")],
        [
            Answer("q1", "aliases", ["Paris"]),
            Answer("q2", "aliases", ["Rome"]),
            Answer("q3", "aliases", ["Oslo"]),
            Answer("q4", "aliases", ["Bern"]),
        ],
    )
    preds = pd.DataFrame(
        {"qid": ["q1", "q2", "q3"], "prediction": ["It is Paris.", "Rome", "Bergen"], "parse_ok": [True, False, True]}
    )
    summary, per_q = score_predictions("musique", queries, answers, preds)
    s = _summary(summary)
    # q1 covered, q2 failed extraction (scored wrong), q3 wrong, q4 missing -> 1/4
    assert s[("cover_em", "default")] == (0.25, 4)
    # EM: none exact ("it is paris" != "paris") -> 0
    assert s[("em", "default")] == (0.0, 4)
    # F1: q1 pred [it, is, paris] vs [paris] -> P 1/3, R 1 -> 0.5; others 0 -> mean 0.125
    assert s[("f1", "default")] == (pytest.approx(0.125), 4)
    assert s[("parse_ok", "default")] == (0.5, 4)
    assert set(per_q.columns) == {"qid", "metric", "variant", "value"}
    assert len(per_q) == 4 * 5  # 4 questions x (cover_em, em, f1, cover_em dexter, parse_ok)
    assert per_q.query("qid == 'q4' and metric == 'cover_em' and variant == 'default'")["value"].item() == 0.0
    assert s[("cover_em", "dexter")] == (0.25, 4)  # the scripts' "paris" in "it is paris." agrees here


def test_score_strategyqa_and_tatqa_multispan():
    queries, answers = _tables(
        [Query("a", "?"), Query("b", "?")],
        [Answer("a", "boolean", ["yes"], boolean=True), Answer("b", "boolean", ["no"], boolean=False)],
    )
    preds = pd.DataFrame({"qid": ["a", "b"], "prediction": ["Yes, it is.", "True"]})
    s = _summary(score_predictions("strategyqa", queries, answers, preds)[0])
    assert s[("accuracy", "default")] == (0.5, 2)  # a right, b wrong
    assert s[("cover_em", "default")] == (0.5, 2)  # a: "yes" a word of "yes it is"; b: "true" is gold yes's form

    # a constant "No, ..." answer: gold no is covered by the word "no"; gold yes only by "yes"/"true"
    queries, answers = _tables(
        [Query("y", "?"), Query("n", "?")],
        [Answer("y", "boolean", ["yes"], boolean=True), Answer("n", "boolean", ["no"], boolean=False)],
    )
    preds = pd.DataFrame({"qid": ["y", "n"], "prediction": ["No, he did not know it.", "No, he did not know it."]})
    s = _summary(score_predictions("strategyqa", queries, answers, preds)[0])
    assert s[("accuracy", "default")] == (0.5, 2) and s[("cover_em", "default")] == (0.5, 2)
    preds = pd.DataFrame({"qid": ["y", "n"], "prediction": ["Yes, though he did not", "Yes, though he did not"]})
    s = _summary(score_predictions("strategyqa", queries, answers, preds)[0])
    # old substring scoring: 1.0 (y: "yes"; n: "no" inside "not"); now only y
    assert s[("accuracy", "default")] == (0.5, 2) and s[("cover_em", "default")] == (0.5, 2)

    queries, answers = _tables([Query("m", "?")], [Answer("m", "aliases", ["2019", "2018"], numeric_type="multi-span")])
    s = _summary(score_predictions("tatqa", queries, answers, pd.DataFrame({"qid": ["m"], "prediction": ["2019"]}))[0])
    assert s[("cover_em", "default")] == (0.0, 1)  # one of two spans


def test_score_ambigqa_all_and_multi():
    queries, answers = _tables(
        [Query("m", "?", "multi"), Query("s", "?", "single")],
        [
            Answer(
                "m",
                "interpretations",
                ["Laurence Fishburne", "Fishburne", "Tina Turner"],
                annotations=[Annotation(MULTI["type"], MULTI["answers"])],
            ),
            Answer(
                "s", "interpretations", ["Tina Turner"], annotations=[Annotation(SINGLE["type"], SINGLE["answers"])]
            ),
        ],
    )
    preds = pd.DataFrame(
        {"qid": ["m", "s"], "prediction": ["- Tina Turner\n- Fishburne\n- Angela Bassett", "Tina Turner"]}
    )
    s = _summary(score_predictions("ambigqa", queries, answers, preds)[0])
    # m: 0.8 (see test_f1_ans_takes_the_best_annotation); s: 1.0 -> all 0.9, multi (m only) 0.8
    assert s[("f1_ans", "official")] == (pytest.approx(0.9), 2)
    assert s[("f1_ans_multi", "official")] == (pytest.approx(0.8), 1)
    # dexter m: golds [fishburne, laurence fishburne, tina turner]; preds [tina turner, fishburne,
    # angela bassett]: fishburne->pred2, laurence fishburne->none, tina turner->pred1
    # R 2/3, P 2/3 -> 2/3; s -> 1.0; mean (2/3+1)/2 = 0.8333
    assert s[("f1_ans", "dexter")] == (pytest.approx(2.5 / 3), 2)


def test_score_finqa_both_variants():
    queries, answers = _tables(
        [Query("p", "?"), Query("y", "?")],
        [Answer("p", "number", ["5.2%"], number=0.052, scale="percent"), Answer("y", "boolean", ["yes"], boolean=True)],
    )
    preds = pd.DataFrame({"qid": ["p", "y"], "prediction": ["0.052", "yes"]})
    s = _summary(score_predictions("finqa", queries, answers, preds)[0])
    assert s[("em_tol", "default")] == (1.0, 2)  # 0.052 is a reading of "5.2%"
    # dexter: 0.052 vs gold string 5.2 fails; yes matches -> 0.5
    assert s[("em_tol", "dexter")] == (0.5, 2)
    assert s[("em_tol", "exe_ans")] == (1.0, 2)  # 0.052 is exe_ans itself


def test_score_finqa_published_gold_differs_from_exe_ans():
    # FinQA dev "GIS/2019/page_37.pdf-3": answer "-3.2%", exe_ans -16.0 (the program's result)
    queries, answers = _tables([Query("g", "?")], [Answer("g", "number", ["-3.2%"], number=-16.0, scale="percent")])
    s = _summary(score_predictions("finqa", queries, answers, pd.DataFrame({"qid": ["g"], "prediction": ["-3.2%"]}))[0])
    assert s[("em_tol", "default")] == (1.0, 1)
    assert s[("em_tol", "dexter")] == (1.0, 1)  # the toolkit also reads the answer string: 3.2 vs 3.2
    assert s[("em_tol", "exe_ans")] == (0.0, 1)  # -3.2 / -0.032 vs -16 / -1600


def test_score_tanq_with_breakdowns():
    queries, answers = _tables(
        [Query("t1", "?", "composition", skills=["filtering", "date_conversion"]), Query("t2", "?", "intersection")],
        [
            Answer("t1", "table", table_header=["entity", "a", "b"], table_rows=[["x", "1", "foo"], ["y", "2", "bar"]]),
            Answer("t2", "table", table_header=["entity", "a"], table_rows=[["z", "100"]]),
        ],
    )
    preds = pd.DataFrame(
        {"qid": ["t1", "t2"], "prediction": ["entity | a | b\n---|---|---\nx | 1 | foo", "entity,a\nz,105"]}
    )
    summary, per_q = score_predictions("tanq", queries, answers, preds)
    s = _summary(summary)
    # cqabench_parse: t1 is the table [x, 1, foo] (separator dropped): P 1, R 0.5, F1 2/3
    # (test_rms.test_partial_table); t2 is read as CSV: 0.95 each
    p = "cqabench_parse"
    assert s[("rms_precision", p)] == (pytest.approx(0.975), 2)
    assert s[("rms_recall", p)] == (pytest.approx(0.725), 2)
    assert s[("rms_f1", p)] == (pytest.approx((2 / 3 + 0.95) / 2), 2)
    assert s[("rms_f1/question_type=composition", p)] == (pytest.approx(2 / 3), 1)
    # official (TANQ's reading): t1's separator line is a data row, datapoints "--- a", "--- b",
    # "x a" -> 1, "x b" -> foo; gold x a, x b, y a, y b; x a and x b match exactly (score 2),
    # y a / y b get the "---" keys (ANLS 0: 3 edits / 5) -> P 2/4, R 2/4, F1 0.5 (transposed: all
    # keys "a x"-like, ANLS 0 -> 0). t2 has no "|": one-cell rows, no datapoints -> (1, 0, 0).
    o = "official"
    assert s[("rms_precision", o)] == (pytest.approx(0.75), 2)
    assert s[("rms_recall", o)] == (pytest.approx(0.25), 2)
    assert s[("rms_f1", o)] == (pytest.approx(0.25), 2)
    # The paper's Tables 5-9 groups (metrics.tanq_breakdowns), for both readings
    assert s[("rms_f1/tanq_type=composition", p)] == (pytest.approx(2 / 3), 1)
    assert s[("rms_f1/tanq_type=composition", o)] == (pytest.approx(0.5), 1)
    assert s[("rms_f1/tanq_type=all", p)] == (pytest.approx((2 / 3 + 0.95) / 2), 2)
    assert s[("rms_f1/tanq_type=all", o)] == (pytest.approx(0.25), 2)
    assert s[("rms_f1/skill=filtering", p)] == (pytest.approx(2 / 3), 1)
    assert not any(k[0] == "rms_f1/skill=none" for k in s)  # no skill: in no skill group, as in Table 6
    assert s[("rms_f1/n_skills=2", p)][1] == 1 and ("rms_f1/n_skills=0", p) not in s
    # t1 asks for 2 relations ("3": up to three), t2 for 1; both tables are short (<= 3 rows)
    assert s[("rms_f1/n_relations=3", p)] == (pytest.approx(2 / 3), 1)
    assert s[("rms_f1/n_relations=1", p)] == (pytest.approx(0.95), 1)
    assert s[("rms_f1/n_relations=1", o)] == (pytest.approx(0.0), 1)
    assert s[("rms_f1/table_length=short", p)] == (pytest.approx((2 / 3 + 0.95) / 2), 2)
    # breakdowns are summary-only: per question P, R, F1 of both readings, the 7 computed failure
    # categories (tests/evaluation/test_tanq_failures.py) and parse_ok
    assert len(per_q) == 2 * 14


def test_tanq_no_answer_scores_what_tanqs_script_gives_and_an_empty_table_keeps_rms_convention():
    """No final answer (a dialogue cut by its step limit) is 0 for cqabench_parse and, for official,
    what TANQ's script gives the "" a pipeline hands it: (1, 0, 0), as for prose
    (test_tanq_non_tables.py). A final answer without a table our parser reads (prose) is 0 for
    cqabench_parse and (1, 0, 0) for official, which reads any text and gives a prediction
    without datapoints precision 1 (tanq_utils.py:246-247). A table the model really
    left empty keeps that convention for cqabench_parse; the official reading makes its separator
    line a data row of "---" cells, so it is (0, 0, 0) there."""
    queries, answers = _tables(
        [Query("t1", "?", "composition"), Query("t2", "?", "composition"), Query("t3", "?", "composition")],
        [Answer(q, "table", table_header=["entity", "a"], table_rows=[["z", "100"]]) for q in ("t1", "t2", "t3")],
    )
    preds = pd.DataFrame(
        {
            "qid": ["t1", "t2", "t3"],
            "prediction": ["I do not know, sorry.", "entity,a\nz,100", "| entity | a |\n|---|---|"],
            "parse_ok": [True, False, True],
            "parse_reason": ["", "open-book: step limit", ""],
        }
    )
    _, per_q = score_predictions("tanq", queries, answers, preds)
    got = {(r.qid, r.metric, r.variant): r.value for r in per_q.itertuples() if r.metric.startswith("rms_")}

    def prf(qid: str, variant: str) -> tuple[float, float, float]:
        return tuple(got[(qid, m, variant)] for m in ("rms_precision", "rms_recall", "rms_f1"))

    # t2's text would be a perfect table: parse_ok False (no final answer) wins, as documented
    assert prf("t1", "cqabench_parse") == prf("t2", "cqabench_parse") == (0.0, 0.0, 0.0)
    assert prf("t1", "official") == prf("t2", "official") == (1.0, 0.0, 0.0)
    assert prf("t3", "cqabench_parse") == (1.0, 0.0, 0.0)
    # official t3: header ["", entity, a, ""], row ["", ---, ---, ""] -> " a" -> "---" vs gold
    # "z a" -> "100": key ANLS 2/3, value ANLS 0 -> score 0 (transposed: keys "a " etc., ANLS 0)
    assert prf("t3", "official") == (0.0, 0.0, 0.0)


def test_tanq_groups_buckets():
    g = tanq_groups(
        {"question_type": "", "skills": ["a", "b", "c", "d"]},
        {"table_header": ["e"] + ["c"] * 7, "table_rows": [["r"]] * 11},
    )
    assert g == {
        "question_type": ["unknown"],
        "tanq_type": ["unknown", "all"],
        "skill": ["a", "b", "c", "d"],
        "n_skills": ["3"],
        "n_relations": ["10"],
        "table_length": ["long"],
    }
    g = tanq_groups(
        {"question_type": "wikitables_composition", "skills": []},
        {"table_header": ["e", "a", "b", "c", "d"], "table_rows": [["r"] * 5] * 6},
    )
    assert g["tanq_type"] == ["composition", "all"] and g["skill"] == [] and g["n_skills"] == []
    assert g["n_relations"] == ["5"] and g["table_length"] == ["medium"]  # 4 relations: up to five; 6 rows
    # Table 8's groups read as upper bounds, Table 9's as the paper states them
    from cqabench.evaluation.metrics.tanq_breakdowns import n_relations, table_length

    assert [n_relations(c) for c in (1, 2, 3, 4, 5, 6, 7, 11, 12)] == [None, "1", "3", "3", "5", "5", "10", "10", "11+"]
    assert [table_length(n) for n in (1, 3, 4, 6, 7, None)] == ["short", "short", "medium", "medium", "long", None]


def test_score_rejects_unknown_and_duplicate_qids():
    from cqabench.common.errors import ConfigError, DataError

    queries, answers = _tables([Query("q1", "?")], [Answer("q1", "aliases", ["x"])])
    with pytest.raises(DataError, match="not a question"):
        score_predictions("musique", queries, answers, pd.DataFrame({"qid": ["zz"], "prediction": ["x"]}))
    with pytest.raises(DataError, match="duplicate"):
        score_predictions("musique", queries, answers, pd.DataFrame({"qid": ["q1", "q1"], "prediction": ["x", "y"]}))
    with pytest.raises(ConfigError):
        score_predictions("nope", queries, answers, pd.DataFrame({"qid": [], "prediction": []}))


# --- real data: gold answers fed back as predictions score full marks --------------------------


def test_real_ambigqa_gold_answers_score_full_f1_ans():
    from cqabench.data.datasets import loader

    # the bundled first 40 AmbigNQ light dev questions (resources/README.md)
    data = loader("ambigqa").load({"questions": RAW / "ambigqa" / "dev_light_40.json"}, "dev")
    t = data.tables()
    # predict the first alias of every answer of the first annotation, one per line
    preds = pd.DataFrame(
        {
            "qid": [a.qid for a in data.answers],
            "prediction": ["\n".join(item["aliases"][0] for item in a.annotations[0].answers) for a in data.answers],
        }
    )
    s = _summary(score_predictions("ambigqa", t["queries"], t["answers"], preds)[0])
    assert s[("f1_ans", "official")] == (pytest.approx(1.0), 40)
    # the official multi subset (no singleAnswer annotation): 23 of the 40, counted in the raw file
    # (`not any(a["type"] == "singleAnswer" ...)`; the whole light dev has 1,002 of 2,002)
    assert s[("f1_ans_multi", "official")][1] == 23
    # the toolkit's pooled-alias variant cannot reach 100 on the same answers (aliases count as golds)
    assert s[("f1_ans", "dexter")][0] < 1.0


def test_real_tatqa_gold_answers_score_full_marks():
    from cqabench.data.datasets import loader

    # the bundled first 40 TAT-QA dev contexts: 240 questions (counted in the raw file)
    data = loader("tatqa").load({"questions": RAW / "tatqa" / "tatqa_dataset_dev.sample.json"}, "dev")
    t = data.tables()
    # multi-span golds joined with " and " in reverse order: EM must still hold
    preds = pd.DataFrame(
        {"qid": [a.qid for a in data.answers], "prediction": [" and ".join(reversed(a.aliases)) for a in data.answers]}
    )
    s = _summary(score_predictions("tatqa", t["queries"], t["answers"], preds)[0])
    for metric in ("cover_em", "em", "f1"):
        assert s[(metric, "default")] == (pytest.approx(1.0), 240)
