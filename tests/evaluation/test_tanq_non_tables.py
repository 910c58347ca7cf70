"""Issue 34 item 8: a TANQ answer that is no table scores what TANQ's own evaluation gives it.

google-deepmind/tanq `tanq_utils.py` (@5c3c6c1b) reads every prediction string it is handed;
one without datapoints (empty, prose, a one-column list) meets `if not prediction_datapoints:
return 1, 0, 0` (lines 246-247). So in the variant that claims to be official, every such
answer is (P 1, R 0, F1 0), whether the reply was prose, empty, or gave no final answer (a
pipeline hands the script "" then). Only a question without any prediction row scores 0: there
is nothing to hand the script. Our parser's variant (cqabench_parse) scores every non-table 0.

The gold table of every case: header entity | a | b, rows x | 1 | foo and y | 2 | bar, i.e. four
datapoints "x a"=1, "x b"=foo, "y a"=2, "y b"=bar. Expected values worked by hand beside each
case (and checked once against the script itself, run outside this repository).
"""

from __future__ import annotations

import pytest

from cqabench.evaluation.scoring import score_predictions

HEADER, ROWS = ["entity", "a", "b"], [["x", "1", "foo"], ["y", "2", "bar"]]
QUERIES = [{"qid": "q", "question": "?", "question_type": "composition"}]
ANSWERS = [{"qid": "q", "answer_type": "table", "table_header": HEADER, "table_rows": ROWS}]


def _scores(row: dict | None, prompt: str | None = None) -> dict[tuple[str, str], float]:
    """(metric, variant) -> value of the one question, through the same path as `cqabench evaluate`."""
    summary, _ = score_predictions("tanq", QUERIES, ANSWERS, [] if row is None else [{"qid": "q", **row}], prompt)
    return {
        (r["metric"], r["variant"]): r["value"]
        for r in summary
        if r["metric"].startswith("rms_") and "/" not in r["metric"]
    }


def _prf(scores: dict[tuple[str, str], float], variant: str) -> tuple[float, float, float]:
    return tuple(scores[(m, variant)] for m in ("rms_precision", "rms_recall", "rms_f1"))  # type: ignore[return-value]


@pytest.mark.parametrize(
    "row, prompt, official",
    [
        # prose: one line, one cell, a header and no data rows -> no datapoints -> (1, 0, 0)
        ({"prediction": "I don't know."}, None, (1.0, 0.0, 0.0)),
        # a one-column list: header "x", row ("y",): a single column holds no datapoint; transposed,
        # the header ("x", "y") has no rows -> (1, 0, 0)
        ({"prediction": "x\ny"}, None, (1.0, 0.0, 0.0)),
        # an empty reply: the script reads "" as an empty table -> (1, 0, 0)
        ({"prediction": ""}, None, (1.0, 0.0, 0.0)),
        # a reasoning prompt's reply without its marker: no final answer, "" handed -> (1, 0, 0),
        # though the text holds the gold table (our extraction does not guess where the answer is)
        ({"prediction": "entity|a|b\nx|1|foo\ny|2|bar"}, "few-shot-cot", (1.0, 0.0, 0.0)),
        # nothing after the marker -> "" -> (1, 0, 0)
        ({"prediction": "Let me think. [Final Answer]:"}, "few-shot-cot", (1.0, 0.0, 0.0)),
        # an open-book dialogue cut off at its step limit (generation marks it parse_ok False): its
        # last text would read as a one-line table; no final answer -> "" -> (1, 0, 0)
        (
            {
                "prediction": "Action: WikiSearch[a | b]",
                "parse_ok": False,
                "parse_reason": "no final answer: the open-book dialogue stopped at max_steps",
            },
            None,
            (1.0, 0.0, 0.0),
        ),
        # a title line alone: one datapoint ("title"), which matches no gold key (ANLS 0 against
        # "x a", "x b", "y a", "y b"): score 0 -> (0, 0, 0), not the empty-prediction convention
        ({"prediction": "title|Beatles"}, None, (0.0, 0.0, 0.0)),
        # a two-column table with one right datapoint of four: P 1/1, R 1/4, F1 2·1·0.25/1.25 = 0.4
        ({"prediction": "entity | a\nx | 1"}, None, (1.0, 0.25, 0.4)),
    ],
)
def test_official_variant_scores_non_tables_as_tanqs_script(row, prompt, official):
    scores = _scores(row, prompt)
    assert _prf(scores, "official") == pytest.approx(official)


@pytest.mark.parametrize(
    "row, prompt",
    [
        ({"prediction": "I don't know."}, None),
        ({"prediction": ""}, None),
        ({"prediction": "entity|a|b\nx|1|foo\ny|2|bar"}, "few-shot-cot"),
    ],
)
def test_our_parse_variant_scores_every_non_table_zero(row, prompt):
    assert _prf(_scores(row, prompt), "cqabench_parse") == (0.0, 0.0, 0.0)


def test_a_question_without_prediction_row_scores_zero_in_both_variants():
    scores = _scores(None)
    assert _prf(scores, "official") == _prf(scores, "cqabench_parse") == (0.0, 0.0, 0.0)
