"""What the answer numbers of a run can and cannot show, said on the report page in plain words.

A 135M-parameter model on 30 questions per dataset answers "no" to every StrategyQA question
and leaves many outputs unparsed; read as a benchmark, its table would suggest findings it
cannot support. This paragraph is written from answers_by_setting.json itself: which models
answered, on how many questions, how wide the intervals are, and every cell whose predictions
are (nearly) one answer or whose parse rate is low (cqabench.evaluation.answer_spread), listed by name.
"""

from __future__ import annotations

import html
import statistics
from typing import Any

from cqabench.evaluation.answer_spread import CONSTANT_SHARE, LOW_PARSE_RATE
from cqabench.report.answer_cell_summaries import dataset_rank, setting_label

esc = html.escape


def _cells(answers: dict[str, Any]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for cell in answers.get("cells") or []:
        seen.setdefault(str(cell.get("cell_id")), cell)
    return list(seen.values())


def typical_half_width(cells: list[dict[str, Any]]) -> float | None:
    """The median half-width of the cells' 95 % intervals (None when no cell has one)."""
    widths = [
        (c["ci_high"] - c["ci_low"]) / 2 for c in cells if c.get("ci_low") is not None and c.get("ci_high") is not None
    ]
    return statistics.median(widths) if widths else None


def questions_text(cells: list[dict[str, Any]]) -> str:
    """ "n = 30 questions per dataset (TANQ 10)": the most common largest n, then the exceptions."""
    by_dataset: dict[str, int] = {}
    for c in cells:
        ds = str(c.get("dataset"))
        by_dataset[ds] = max(by_dataset.get(ds, 0), int(c.get("n") or 0))
    if not by_dataset:
        return "no questions"
    common = statistics.mode(by_dataset.values())
    others = [f"{ds} {n}" for ds, n in sorted(by_dataset.items(), key=lambda x: dataset_rank(x[0])) if n != common]
    return f"at most {common} questions per dataset" + (f" ({', '.join(others)})" if others else "")


def _where(cell: dict[str, Any]) -> str:
    setting = setting_label(cell)
    retriever = "" if cell.get("retriever") in (None, "none") else f" {cell['retriever']}@{cell.get('k')}"
    return f"{cell.get('dataset')} ({cell.get('split')}), {setting}{retriever}, {cell.get('prompt')}"


def limits_html(answers: dict[str, Any], paper_data: bool) -> str:
    """The page's paragraph on what the answer cells can and cannot show, with the flagged cells."""
    cells = _cells(answers)
    if not cells:
        return ""
    llms = sorted({str(c.get("llm")) for c in cells})
    flagged = answers.get("flagged_cells") or []
    half = typical_half_width(cells)
    spread = f" (a typical 95 % interval here is ±{half:.2f})" if half is not None else ""
    all_flagged = sorted(
        {str(c.get("dataset")) for c in cells}
        - {str(c.get("dataset")) for c in cells if c.get("cell_id") not in {f.get("cell_id") for f in flagged}},
        key=dataset_rank,
    )
    parts = [
        f"<p><b>What these answers can and cannot show.</b> They come from {esc(', '.join(llms))} on "
        f"{esc(questions_text(cells))}. They can show that every setting (closed-book, RAG@k, oracle) runs end to "
        f"end and is scored, how often a final answer could be extracted, and a difference between two cells that "
        f"is larger than their intervals{esc(spread)}, on a dataset whose cells are not flagged below. They cannot "
        "show a smaller difference; anything about retrieval or evidence on a flagged cell (an answer given to "
        "(nearly) every question scores the share of questions it happens to fit, whatever the prompt showed); or "
        "how a capable model uses retrieved evidence, which is what the papers measure.</p>"
    ]
    if not paper_data:
        parts.append(
            "<p><b>No number here reproduces a paper's.</b> The run is not on the papers' data (questions, "
            "corpora and models differ), so the paper tables show the published numbers beside ours as "
            "\u201cnot comparable\u201d.</p>"
        )
    if flagged:
        items = "".join(f"<li>{esc(_where(f))}: {esc('; '.join(f.get('flags') or []))}</li>" for f in flagged)
        parts.append(
            f"<p>{len(flagged)} of {len(cells)} answer cells are flagged (predictions at least "
            f"{CONSTANT_SHARE:.0%} one answer, or a parse rate below {LOW_PARSE_RATE:.0%}):</p><ul>{items}</ul>"
        )
        if all_flagged:
            parts.append(
                f"<p>Every cell of {esc(', '.join(all_flagged))} is flagged: no difference between settings "
                "on these datasets means anything with this model.</p>"
            )
    else:
        parts.append(
            f"<p>No answer cell is flagged (none has {CONSTANT_SHARE:.0%} of its predictions alike or a "
            f"parse rate below {LOW_PARSE_RATE:.0%}).</p>"
        )
    return '<div class="warn">' + "".join(parts) + "</div>"
