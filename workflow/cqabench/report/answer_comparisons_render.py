"""The answers-by-setting document as Markdown and HTML: one table per group, notes for every n/a.

Each group (dataset, split, serialization, llm, prompt) of `cqabench.report.answer_comparisons` becomes a
table with one row per cell and, per primary metric, the mean with its interval, Δ against the
closed-book cell with n, and p / the corrected p. Where the two cells of a comparison scored
different questions the Δ cell gives both means on the shared questions and both n, with a
note; a cell with failed items shows "n (+m failed)", a flagged cell its flags; every reason a
value is n/a becomes a numbered note. `render_answers` writes the .md, .html and .json files.
The number format (`_f`, `_p`) is shared by the retrieval significance tables.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from cqabench.common.io import write_json, write_text
from cqabench.evaluation.answer_spread import CONSTANT_SHARE, LOW_PARSE_RATE
from cqabench.report.answer_cell_summaries import (
    BOOTSTRAP_RESAMPLES,
    GROUP_KEYS,
    cell_order,
    group_key,
    k_label,
    setting_label,
    spread_flags,
)
from cqabench.report.answer_comparisons import ALPHA, NOT_PLANNED_KEYS, TEST_RESAMPLES, answers_by_setting
from cqabench.report.significance import CORRECTION_NAMES

DIFFERENT_QUESTIONS = (
    "this cell and the closed-book cell scored different questions (the oracle drops questions "
    "without gold documents): Δ, p and the two means beside Δ are on the questions both scored "
    "only; the mean column is each cell's own questions"
)
FAILED_NOTE = (
    "questions whose generation failed (the backend gave up on them) are left out of this cell's "
    "mean and of its comparisons: n counts the questions scored, +m failed the ones asked but never answered"
)
FLAG_NOTE = (
    f"flagged: the model gave (nearly) one answer to every question of this cell (at least "
    f"{CONSTANT_SHARE:.0%} of its predictions alike), or a final answer could be extracted from fewer than "
    f"{LOW_PARSE_RATE:.0%} of its outputs; its score is then the share of questions that one answer (or an unparsed output) happens to fit, and "
    "its differences from other cells say nothing about retrieval or evidence"
)


def _f(value: float | None, digits: int = 3, sign: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _p(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


class _Notes:
    """Numbered footnotes for n/a reasons, shared by a whole document."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def ref(self, reason: str | None) -> str:
        if not reason:
            return ""
        if reason not in self.items:
            self.items.append(reason)
        return f" [{self.items.index(reason) + 1}]"


def _metric_label(metric: str, variant: str) -> str:
    return metric if variant in ("default", None) else f"{metric} ({variant})"


def _layout(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Groups with their table rows: one row per cell, metric columns side by side."""
    comps = {(c["cell_id"], c["metric"], c["variant"]): c for c in doc["comparisons"]}
    groups: dict[tuple, dict[str, Any]] = {}
    for r in doc["cells"]:
        g = groups.setdefault(group_key(r), {"key": dict(zip(GROUP_KEYS, group_key(r))), "metrics": [], "rows": {}})
        mv = (r["metric"], r["variant"])
        if mv not in g["metrics"]:
            g["metrics"].append(mv)
        row = g["rows"].setdefault(r["cell_id"], {"cell": r, "by_metric": {}})
        row["by_metric"][mv] = (r, comps.get((r["cell_id"], *mv)))
    out = []
    for g in groups.values():
        g["rows"] = sorted(g["rows"].values(), key=lambda x: cell_order(x["cell"]))
        out.append(g)
    return out


def _title(key: dict[str, Any]) -> str:
    where = f"{key['dataset']} ({key['split']})"
    if key.get("serialization"):
        where += f", serialization {key['serialization']}"
    return f"{where} — {key['llm']} / {key['prompt']}"


def _row_cells(row: dict[str, Any], metrics: list[tuple[str, str]], notes: _Notes) -> list[str]:
    cell = row["cell"]
    out = [setting_label(cell), cell["retriever"], k_label(cell)]
    ns = sorted({str(r["n"]) for r, _ in row["by_metric"].values()})
    failed = f" (+{cell['n_failed']} failed)" + notes.ref(FAILED_NOTE) if cell.get("n_failed") else ""
    flags = spread_flags(cell)
    out += ["/".join(ns) + failed, _f(cell["parse_rate"]), "; ".join(flags) + notes.ref(FLAG_NOTE) if flags else ""]
    for mv in metrics:
        r, comp = row["by_metric"].get(mv, (None, None))
        if r is None:
            out += ["—", "", ""]
            continue
        if r["mean"] is None:
            out.append("n/a" + notes.ref(r["reason"]))
        elif r["ci_low"] is None:
            out.append(f"{_f(r['mean'])}" + notes.ref(r.get("ci_reason")))
        else:
            out.append(f"{_f(r['mean'])} [{_f(r['ci_low'])}, {_f(r['ci_high'])}]")
        if comp is None:
            out += ["(reference)" if cell["setting"] == "closed" else "", ""]
        elif comp["p_value"] is None:
            out += ["n/a" + notes.ref(comp["reason"]), "n/a"]
        else:
            star = " *" if comp["significant"] else ""
            out += [
                _delta_text(comp, cell["setting"], notes),
                f"{_p(comp['p_value'])} / {_p(comp.get('p_adjusted', comp['p_holm']))}{star}",
            ]
    return out


def _delta_text(comp: dict[str, Any], setting: str, notes: _Notes) -> str:
    """Δ and its n; where the two cells scored different questions, both means on the shared ones and both n."""
    text = f"{_f(comp['diff'], sign=True)} (n={comp['n_common']})"
    if comp.get("same_questions") is False:
        text = (
            f"{_f(comp['diff'], sign=True)} on {comp['n_common']} shared (n shared={comp['n_common']}: "
            f"{setting} {_f(comp['mean'])} vs closed {_f(comp['mean_closed'])}; {setting} n={comp['n_cell']}, "
            f"closed n={comp['n_closed']})" + notes.ref(DIFFERENT_QUESTIONS)
        )
    return text


def _header(metrics: list[tuple[str, str]], correction: str = "holm") -> list[str]:
    head = ["setting", "retriever", "k", "n", "parse rate", "flags"]
    for m, v in metrics:
        label = _metric_label(m, v)
        head += [f"{label} [95% CI]", f"Δ {label} vs closed", f"p / p {CORRECTION_NAMES.get(correction, correction)}"]
    return head


def method_text(doc: dict[str, Any]) -> str:
    i, t, c = doc["method"]["interval"], doc["method"]["test"], doc["method"]["correction"]
    name = CORRECTION_NAMES.get(c["method"], c["method"])
    return (
        f"Unit: fraction (0–1). Each row is one generation cell: closed-book (no context), RAG@k "
        f'(top-k of a retriever) or oracle (gold evidence; "oracle (facts)": the annotators\' facts, where '
        f"the data has no gold paragraph text). Mean of the dataset's primary answer metric "
        f"over the cell's questions with a {i['confidence']:.0%} percentile bootstrap interval "
        f"(scipy.stats.bootstrap, {i['resamples']} resamples, seed {i['seed']}); n = questions; parse rate = "
        f"share of questions whose final answer could be extracted; flags = a cell whose predictions are "
        f"nearly all one answer (≥ {CONSTANT_SHARE:.0%}) or whose parse rate is below {LOW_PARSE_RATE}. "
        f"Δ = mean(cell − closed-book) on the "
        f"questions both scored, paired by question (n shared; where the cells scored different questions, "
        f"e.g. the oracle without questions lacking gold documents, both means on the shared questions and "
        f"both n are given beside Δ); p = two-sided paired sign-flip randomization test ({t['resamples']} "
        f"resamples, exact when 2^n ≤ {t['resamples']}); p {name} = p adjusted by {c.get('description', name)} over "
        f"{c['family']}; * = p {name} < {c['alpha']}. n/a = not evaluable (see the notes)."
    )


def to_markdown(doc: dict[str, Any]) -> str:
    notes = _Notes()
    lines = ["# Answers by setting: closed-book, RAG@k, oracle", "", method_text(doc), ""]
    layout = _layout(doc)
    if not layout:
        lines += ["(no generation cells)", ""]
    for g in layout:
        lines += [f"## {_title(g['key'])}", ""]
        head = _header(g["metrics"], doc["method"]["correction"]["method"])
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in g["rows"]:
            lines.append("| " + " | ".join(x.replace("|", "\\|") for x in _row_cells(row, g["metrics"], notes)) + " |")
        lines.append("")
    lines += _not_planned_md(doc["not_planned"])
    if notes.items:
        lines += ["## Notes", ""] + [f"[{i}] {reason}" for i, reason in enumerate(notes.items, 1)] + [""]
    return "\n".join(lines)


def _not_planned_md(entries: list[dict[str, Any]]) -> list[str]:
    lines = ["## Cells not planned", ""]
    if not entries:
        return lines + ["(none: every dataset × setting of the configuration was planned)", ""]
    lines += ["| dataset | split | setting | reason |", "|---|---|---|---|"]
    for e in entries:
        lines.append("| " + " | ".join(str(e[k]).replace("|", "\\|") for k in NOT_PLANNED_KEYS) + " |")
    return lines + [""]


def to_html(doc: dict[str, Any]) -> str:
    esc = html.escape
    notes = _Notes()
    out = [
        "<!DOCTYPE html><meta charset='utf-8'>",
        "<h2>Answers by setting: closed-book, RAG@k, oracle</h2>",
        f"<p>{esc(method_text(doc))}</p>",
    ]
    layout = _layout(doc)
    if not layout:
        out.append("<p>(no generation cells)</p>")
    for g in layout:
        out.append(f"<h3>{esc(_title(g['key']))}</h3>")
        out.append('<table border="1" cellspacing="0" cellpadding="4">')
        out.append(
            "<tr>"
            + "".join(f"<th>{esc(h)}</th>" for h in _header(g["metrics"], doc["method"]["correction"]["method"]))
            + "</tr>"
        )
        for row in g["rows"]:
            tds = "".join(f"<td>{esc(x)}</td>" for x in _row_cells(row, g["metrics"], notes))
            out.append(f"<tr>{tds}</tr>")
        out.append("</table>")
    out.append("<h3>Cells not planned</h3>")
    if doc["not_planned"]:
        out.append(
            '<table border="1" cellspacing="0" cellpadding="4"><tr>'
            + "".join(f"<th>{k}</th>" for k in NOT_PLANNED_KEYS)
            + "</tr>"
        )
        for e in doc["not_planned"]:
            out.append("<tr>" + "".join(f"<td>{esc(str(e[k]))}</td>" for k in NOT_PLANNED_KEYS) + "</tr>")
        out.append("</table>")
    else:
        out.append("<p>(none: every dataset × setting of the configuration was planned)</p>")
    if notes.items:
        out.append("<h3>Notes</h3><ol>" + "".join(f"<li>{esc(n)}</li>" for n in notes.items) + "</ol>")
    return "\n".join(out) + "\n"


def render_answers(
    metrics: pd.DataFrame | None,
    per_question: pd.DataFrame | None,
    not_planned: Iterable[dict[str, Any]] | None,
    out_dir,
    seed: int = 0,
    bootstrap_resamples: int = BOOTSTRAP_RESAMPLES,
    test_resamples: int = TEST_RESAMPLES,
    name: str = "answers_by_setting",
    correction: str = "holm",
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """Write <name>.md, <name>.html and <name>.json into out_dir; returns the document."""
    doc = answers_by_setting(
        metrics,
        per_question,
        not_planned,
        seed,
        bootstrap_resamples,
        test_resamples,
        correction=correction,
        alpha=alpha,
    )
    out_dir = Path(out_dir)
    write_text(to_markdown(doc), out_dir / f"{name}.md")
    write_text(to_html(doc), out_dir / f"{name}.html")
    write_json(doc, out_dir / f"{name}.json")
    return doc
