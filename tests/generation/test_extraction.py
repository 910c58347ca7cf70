"""Final-answer extraction by prompt strategy and dataset, and table parsing of model text."""

from __future__ import annotations

import pytest

from cqabench.generation.extraction import (
    EMPTY_TABLE,
    ParsedNumber,
    ParsedTable,
    extract_answer,
    final_answer,
    format_table,
    parse_answer,
    parse_answer_list,
    parse_number,
    parse_table,
    parse_yes_no,
)

# --- step 1: markers by strategy ---------------------------------------------------------------


def test_few_shot_takes_text_after_the_last_marker_case_insensitive():
    raw = "Rationale: the [Final Answer]: is not here yet.\n[final answer]:  **Paris** "
    assert final_answer(raw, "few-shot") == final_answer(raw, "few-shot-cot")
    out = final_answer(raw, "few-shot")
    assert out.ok and out.answer == "Paris"


def test_zero_shot_cot_falls_back_to_final_answer_then_answer_is():
    assert final_answer("Step 1 ... Final Answer: 42", "zero-shot-cot").answer == "42"
    assert final_answer("Thinking... so the answer is Lyon.", "zero_shot_cot").answer == "Lyon."
    # "[Final Answer]:" outranks a later "answer is"
    assert (
        final_answer("[Final Answer]: Rome\nThe answer is Milan", "few-shot-cot").answer == "Rome\nThe answer is Milan"
    )


def test_self_ask_marker():
    raw = (
        "Are follow up questions needed here: Yes.\nFollow up: Who directed Jaws?\n"
        "Intermediate answer: Steven Spielberg.\nSo the final answer is: Steven Spielberg"
    )
    out = final_answer(raw, "self-ask")
    assert out.ok and out.answer == "Steven Spielberg"
    # without its own marker, self-ask falls back to the generic ones
    assert final_answer("... [Final Answer]: X", "self_ask").answer == "X"


def test_missing_marker_fails_for_marker_prompts_but_not_for_free_text():
    out = final_answer("I think it is Paris", "few-shot-cot")
    assert not out.ok and "marker" in out.reason and out.answer == "I think it is Paris"
    free = final_answer("Paris", None)
    assert free.ok and free.answer == "Paris"
    assert final_answer("Paris", "zero-shot").ok
    # a direct-answer prompt asks for the answer alone: without a marker the reply is the answer
    direct = final_answer(" The answer to the question is: Bayern Munich\n", "few-shot")
    assert direct.ok and direct.answer == "The answer to the question is: Bayern Munich"
    assert not final_answer("I think it is Paris", "self-ask").ok


def test_empty_output_and_empty_after_marker():
    assert final_answer("", "few-shot").reason == "empty output"
    assert final_answer(None, None).ok is False
    out = final_answer("blah [Final Answer]:   ", "few-shot")
    assert not out.ok and "nothing after" in out.reason


# --- step 2: parsers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value, percent, multiplier",
    [
        ("$1,234.50", 1234.5, False, 1.0),
        ("-$5,830", -5830.0, False, 1.0),
        ("(1,234)", -1234.0, False, 1.0),  # accounting negative
        ("The change is -22.95%.", -22.95, True, 1.0),
        ("it rose 14.1 percent", 14.1, True, 1.0),
        ("$1.5 million", 1.5, False, 1e6),
        ("from 2019-2020 it was 7", 7.0, False, 1.0),  # the last number is the answer
        ("2019-2020", 2020.0, False, 1.0),  # a hyphen after a digit is not a minus sign
        ("\u22123.4", -3.4, False, 1.0),  # unicode minus
        (".5", 0.5, False, 1.0),
    ],
)
def test_parse_number(text, value, percent, multiplier):
    n = parse_number(text)
    assert n is not None
    assert (n.value, n.percent, n.multiplier) == (pytest.approx(value), percent, multiplier)


def test_parse_number_none():
    assert parse_number("no digits here") is None


def test_parse_yes_no():
    assert parse_yes_no("Yes, because ...") is True
    assert parse_yes_no("The claim is false; no.") is False  # the first such word counts
    assert parse_yes_no("True") is True
    assert parse_yes_no("nothing") is None  # "nothing" is not the word "no"


def test_parse_answer_list_strips_bullets_and_numbering():
    text = "- Tina Turner\n* Laurence Fishburne\n\n1. Angela Bassett\n2) Washington, D.C.\n(3) 1990s\n\u2022 -5"
    assert parse_answer_list(text) == [
        "Tina Turner",
        "Laurence Fishburne",
        "Angela Bassett",
        "Washington, D.C.",
        "1990s",
        "-5",
    ]
    # a literal backslash-n (as DEXTER's few-shot examples print it) separates answers too
    assert parse_answer_list("18 \\n Nebraska ( 19 ) \\n ") == ["18", "Nebraska ( 19 )"]


# --- tables -------------------------------------------------------------------------------------

EXPECTED = ParsedTable(
    ["entity", "genre"], [["Spaceballs", "comedy film, parody film"], ["Life Stinks", "comedy drama"]]
)


def _cells(t: ParsedTable | None) -> tuple[list[str], list[list[str]]]:
    assert t is not None
    return t.header, t.rows


def test_parse_markdown_table_with_decoration_and_fences():
    text = (
        "Here is the answer:\n```markdown\n"
        "| **entity** | *genre* |\n"
        "|:-----------|--------:|\n"
        "| `Spaceballs` | comedy film, parody film |\n"
        "| Life Stinks | comedy<br>drama |\n```\nHope this helps."
    )
    t = parse_table(text)
    assert t.source == "pipe"
    assert _cells(t) == (EXPECTED.header, EXPECTED.rows)


def test_parse_plain_pipe_rows_like_tanq_gold():
    text = "entity|genre\nSpaceballs|comedy film, parody film\nLife Stinks|comedy drama\n"
    assert _cells(parse_table(text)) == (EXPECTED.header, EXPECTED.rows)


def test_escaped_pipe_stays_in_cell():
    t = parse_table("| a | b |\n|---|---|\n| x \\| y | 2 |")
    assert t.rows == [["x | y", "2"]]


def test_parse_csv_table_with_quoted_commas():
    text = 'entity,genre\nSpaceballs,"comedy film, parody film"\nLife Stinks, comedy drama'
    t = parse_table(text)
    assert t.source == "csv"
    assert _cells(t) == (EXPECTED.header, EXPECTED.rows)


def test_parse_tsv_table():
    t = parse_table("entity\tgenre\nSpaceballs\tcomedy film, parody film\nLife Stinks\tcomedy drama")
    assert t.source == "tsv" and _cells(t) == (EXPECTED.header, EXPECTED.rows)


def test_parse_html_table():
    text = (
        "<p>Answer</p><TABLE border=1><thead><tr><th>entity</th><th><b>genre</b></th></tr></thead>"
        "<tbody><tr><td>Spaceballs</td><td>comedy film, parody film</td></tr>"
        "<tr><td>Life Stinks</td><td>comedy<br/>drama</td></tr></tbody></TABLE><p>x</p>"
    )
    t = parse_table(text)
    assert t.source == "html" and _cells(t) == (EXPECTED.header, EXPECTED.rows)


def test_html_entities_are_decoded():
    t = parse_table("<table><tr><th>a</th><th>b</th></tr><tr><td>AT&amp;T</td><td>1</td></tr></table>")
    assert t.rows == [["AT&T", "1"]]


def test_no_table():
    assert parse_table("I could not find any such films.") is None
    assert parse_table("") is None


def test_blank_line_inside_a_markdown_table_does_not_end_it():
    text = (
        "| entity | genre |\n|---|---|\n| Spaceballs | comedy film, parody film |\n\n| Life Stinks | comedy drama |\n"
    )
    assert _cells(parse_table(text)) == (EXPECTED.header, EXPECTED.rows)
    # plain pipe rows (TANQ's gold format) with blank lines, several of them
    text = "entity|genre\n\nSpaceballs|comedy film, parody film\n\n\nLife Stinks|comedy drama"
    assert _cells(parse_table(text)) == (EXPECTED.header, EXPECTED.rows)


def test_a_line_without_separator_inside_a_table_is_skipped_not_the_end():
    text = (
        "| entity | genre |\n|---|---|\n| Spaceballs | comedy film, parody film |\n"
        "(Mel Brooks also stars in it)\n| Life Stinks | comedy drama |\n\nHope this helps."
    )
    t = parse_table(text)
    assert t.source == "pipe" and _cells(t) == (EXPECTED.header, EXPECTED.rows)
    # a stray line, then a blank line, then more rows: still one table
    text = "entity|genre\nSpaceballs|comedy film, parody film\nnote\n\nLife Stinks|comedy drama"
    assert _cells(parse_table(text)) == (EXPECTED.header, EXPECTED.rows)


def test_a_paragraph_ends_the_table():
    text = (
        "| entity | genre |\n|---|---|\n| Spaceballs | comedy film, parody film |\n"
        "| Life Stinks | comedy drama |\n\nI left out these because I am not sure:\n"
        "they may be TV films.\n| Dracula | horror |"
    )
    assert _cells(parse_table(text)) == (EXPECTED.header, EXPECTED.rows)
    # lines without separators before the table are not part of it either
    text = "Sure.\nHere is the table:\n\n" + text
    assert _cells(parse_table(text)) == (EXPECTED.header, EXPECTED.rows)


def test_a_second_markdown_table_is_not_merged_into_the_first():
    text = (
        "| entity | genre |\n|---|---|\n| Spaceballs | comedy film, parody film |\n"
        "| Life Stinks | comedy drama |\n\n| film | year |\n|---|---|\n| Spaceballs | 1987 |"
    )
    assert _cells(parse_table(text)) == (EXPECTED.header, EXPECTED.rows)
    # a caption row above the header is its own one-row block; the table under it is returned
    text = "| **Films** |\n| entity | genre |\n|---|---|\n| Spaceballs | comedy film, parody film |"
    assert _cells(parse_table(text)) == (["entity", "genre"], [EXPECTED.rows[0]])


def test_tsv_rows_across_a_blank_line():
    t = parse_table("entity\tgenre\n\nSpaceballs\tcomedy film, parody film\nLife Stinks\tcomedy drama")
    assert t.source == "tsv" and _cells(t) == (EXPECTED.header, EXPECTED.rows)


@pytest.mark.parametrize(
    "text",
    [
        # two lines of prose with commas: same cell count, but the first line is no header
        "The films are Spaceballs, Life Stinks and Dracula.\nAll of them were directed by Mel Brooks, who produced them.",
        "Mel Brooks directed several films, including Spaceballs\nMost of them were comedies, and some were musicals",
        "Well, I am not sure\nMaybe, but it could be Spaceballs",
        "Yes, the film is a comedy.\nNo, it is not a drama.",
        # prose with a different number of commas per line
        "Spaceballs, a comedy, came out in 1987\nIt was directed by Mel Brooks, a comedian",
        # a single comma line is no table
        "entity,genre",
    ],
)
def test_prose_with_commas_is_not_a_csv_table(text):
    assert parse_table(text) is None


def test_csv_needs_a_consistent_cell_count():
    assert parse_table("entity,genre\nSpaceballs,comedy,1987\nLife Stinks,comedy drama") is None
    # quoted commas stay in their cell, so the count is consistent
    t = parse_table('entity,genre\n"Spaceballs","comedy film, parody film"')
    assert t.source == "csv" and t.rows == [["Spaceballs", "comedy film, parody film"]]


def test_csv_after_an_intro_line_with_commas():
    text = (
        'Here are the films, with their genres:\nentity,genre\nSpaceballs,"comedy film, parody film"\n'
        "Life Stinks,comedy drama"
    )
    t = parse_table(text)
    assert t.source == "csv" and _cells(t) == (EXPECTED.header, EXPECTED.rows)
    # TANQ-style headers of up to four words are labels
    t = parse_table("entity,member of political party\nX,Labour")
    assert t.header == ["entity", "member of political party"]


def test_format_table_round_trips():
    header, rows = ["entity", "note"], [["a|b", "x"], ["c", "**y**"]]
    t = parse_table(format_table(header, rows))
    assert t.header == header and t.rows == [["a|b", "x"], ["c", "y"]]  # bold is decoration


# --- per dataset --------------------------------------------------------------------------------


def test_extract_answer_each_dataset():
    s = extract_answer("strategyqa", "Rationale... [Final Answer]: No.", "few-shot-cot")
    assert s.ok and s.value is False and s.answer == "No."

    f = extract_answer("finqa", "The ratio is 5.2 / 100.\n[Final Answer]: 5.2%", "few-shot-cot")
    assert f.ok and f.value == ParsedNumber(5.2, True, 1.0, "5.2%")
    assert extract_answer("finqa", "[Final Answer]: Yes, it increased by 5%", "few-shot").value is True
    assert extract_answer("finqa", "[Final Answer]: it did not exceed; no", "few-shot").value is False

    a = extract_answer("ambigqa", "[Final Answer]: Exodus \n Deuteronomy \n", "few-shot")
    assert a.ok and a.value == ["Exodus", "Deuteronomy"]

    t = extract_answer("tanq", "[Final Answer]:\n| entity | genre |\n|---|---|\n| Spaceballs | comedy |", "few-shot")
    assert t.ok and t.value.header == ["entity", "genre"] and t.value.rows == [["Spaceballs", "comedy"]]

    m = extract_answer("musique", "Follow up: ...\nSo the final answer is: Steven Spielberg", "self-ask")
    assert m.ok and m.value == "Steven Spielberg"


def test_unparsable_outputs_carry_a_reason_and_never_raise():
    t = extract_answer("tanq", "[Final Answer]: I don't know", "few-shot")
    assert not t.ok and "no table" in t.reason and t.value == EMPTY_TABLE
    s = extract_answer("strategyqa", "[Final Answer]: maybe", "few-shot")
    assert not s.ok and "yes/no" in s.reason
    f = extract_answer("finqa", "[Final Answer]: unknown", "few-shot")
    assert not f.ok
    a = extract_answer("ambigqa", "[Final Answer]: \n - \n", "few-shot")
    assert not a.ok
    # a missing marker fails even when the text would parse; the parse is kept for inspection
    miss = extract_answer("strategyqa", "Yes it is", "few-shot-cot")
    assert not miss.ok and miss.value is True and "marker" in miss.reason
    for junk in ["", None, "\x00\x01", "<table><tr><td>", "|||", ",,,\n,,,"]:
        for ds in ("tanq", "finqa", "ambigqa", "strategyqa", "musique"):
            extract_answer(ds, junk, "few-shot-cot")


def test_parse_answer_is_idempotent_on_its_answer_text():
    for ds, text in [("tanq", "a|b\nx|1"), ("finqa", "-3.2%"), ("ambigqa", "x\ny"), ("strategyqa", "yes")]:
        once = parse_answer(ds, text)
        assert parse_answer(ds, once.answer) == once
