"""Measure how the answer metrics treat constructed answers to real golds (issue 34, items 1-3).

Prints the counts docs/fidelity.md ("cover-EM: where the primary and the toolkit scripts
differ", "EM-tol") and docs/metrics.md quote: for each kind of answer, how many the primary
cover-EM (default) and the toolkit scripts' check (dexter) count right, and FinQA's published
answers given back under the three EM-tol variants. Reads the raw releases (the workplace's
`../shared/data`, README there names them); nothing is written.

    python scripts/answer_scoring_effects.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import json
import re
import string
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from cqabench.data.datasets import loader
from cqabench.data.normalize import normalize_answer
from cqabench.data.schema import Answer
from cqabench.evaluation.metrics.answers import cover_em, cover_em_all, squad_cover_em
from cqabench.evaluation.metrics.dexter_scripts import cover_em_script
from cqabench.evaluation.scoring import score_predictions

Make = Callable[[Answer], "str | None"]


def _ours(answer: str, gold: Answer) -> float:
    aliases = list(gold.aliases)
    return cover_em_all(answer, aliases) if gold.numeric_type == "multi-span" else cover_em(answer, aliases)


def count(title: str, dataset: str, golds: Sequence[Answer], make: Make) -> None:
    """One line: how many of the answers `make` builds (None: skip the gold) each variant counts."""
    n = ours = script = 0
    for gold in golds:
        answer = make(gold)
        if answer is None:
            continue
        n += 1
        ours += int(_ours(answer, gold))
        script += int(cover_em_script(dataset, answer, list(gold.aliases)) if answer.strip() else 0)
    print(f"{dataset:16} {title}: n={n} default={ours} dexter={script}")


def wrong_pairs(dataset: str, golds: Sequence[Answer]) -> None:
    """Every other question's answer as a wrong answer (unless it is one of this gold's aliases)."""
    n = ours = script = squad = 0
    for gold in golds:
        aliases = list(gold.aliases)
        own = {a.lower() for a in aliases}
        for other in golds:
            answer = other.aliases[0]
            if other is gold or answer.lower() in own:
                continue
            n += 1
            ours += int(cover_em(answer, aliases))
            script += int(cover_em_script(dataset, answer, aliases))
            squad += int(squad_cover_em(answer, aliases))
    print(
        f"{dataset:16} other questions' answers (wrong): n={n} default={ours} dexter={script} "
        f"squad_cover_em (before)={squad}"
    )


def _trailing_zero(gold: Answer) -> str | None:
    m = re.fullmatch(r"(.*\d\.\d*?)0+(\D*)", gold.aliases[0])
    return None if gold.numeric_type == "multi-span" or not m else m.group(1).rstrip(".") + m.group(2)


def _with_commas(text: str) -> str | None:
    try:
        return f"{int(text):,}" if abs(int(text)) >= 1000 else None
    except ValueError:
        return None


def text_datasets(data: Path) -> None:
    """The cover-EM kinds of docs/fidelity.md on TAT-QA dev, MuSiQue 100, 2Wiki dev_38, OTT-QA dev."""
    tatqa = loader("tatqa").load({"questions": data / "tatqa" / "tatqa_dataset_dev.json"}, "dev").answers
    numbers = [a for a in tatqa if a.answer_type == "number"]
    count("gold itself", "tatqa", tatqa, lambda a: " and ".join(a.aliases))
    count(
        "negative numeric golds without the sign",
        "tatqa",
        numbers,
        lambda a: a.aliases[0][1:] if a.aliases[0].startswith("-") else None,
    )
    count(
        "non-negative numeric golds with '-' added",
        "tatqa",
        numbers,
        lambda a: None if a.aliases[0].startswith("-") else "-" + a.aliases[0],
    )
    count("numeric golds >= 1000 written with commas", "tatqa", numbers, lambda a: _with_commas(a.aliases[0]))
    count(
        "span golds with thousands commas, answered without",
        "tatqa",
        tatqa,
        lambda a: (
            a.aliases[0].replace(",", "")
            if a.numeric_type == "span" and re.fullmatch(r"[-$]*\d{1,3}(,\d{3})+(\.\d+)?", a.aliases[0])
            else None
        ),
    )
    count("golds with a trailing fractional zero, answered without", "tatqa", tatqa, _trailing_zero)
    count(
        "multi-span golds answered with the last span",
        "tatqa",
        tatqa,
        lambda a: a.aliases[-1] if a.numeric_type == "multi-span" else None,
    )

    musique = loader("musique").load({"questions": data / "musique" / "musique_train_100.json"}, "train").answers
    wiki = [
        Answer(qid=r["_id"], answer_type="aliases", aliases=[r["answer"]])
        for r in json.loads((data / "2wikimultihopqa" / "dev_38.json").read_text())
    ]
    ott = [
        Answer(qid=r["question_id"], answer_type="aliases", aliases=[r["answer-text"]])
        for r in json.loads((data / "ottqa" / "released_data" / "dev.json").read_text())
    ]
    for dataset, golds in (("musique", musique), ("2wikimultihopqa", wiki), ("ottqa", ott)):
        count("gold itself", dataset, golds, lambda a: a.aliases[0])
        count(
            "golds holding punctuation, answered SQuAD-normalized",
            dataset,
            golds,
            lambda a: normalize_answer(a.aliases[0]) if set(a.aliases[0]) & set(string.punctuation) else None,
        )
    count(
        "questions with aliases, answered with the last alias",
        "musique",
        musique,
        lambda a: a.aliases[-1] if len(a.aliases) > 1 else None,
    )
    count("gold + ' (the rest is unknown)'", "musique", musique, lambda a: a.aliases[0] + " (the rest is unknown)")
    count(
        "multi-word golds answered with their first word",
        "ottqa",
        ott,
        lambda a: a.aliases[0].split()[0] if len(a.aliases[0].split()) > 1 else None,
    )
    wrong_pairs("musique", musique)
    wrong_pairs("2wikimultihopqa", wiki)


def finqa(data: Path) -> None:
    """FinQA's published answer strings given back as final answers, every EM-tol variant."""
    canonical = loader("finqa").load({"questions": data / "finqa" / "dev_200.json"}, "dev")
    tables = canonical.tables()
    preds = pd.DataFrame(
        {"qid": [a.qid for a in canonical.answers], "prediction": [a.aliases[0] for a in canonical.answers]}
    )
    summary, _ = score_predictions("finqa", tables["queries"], tables["answers"], preds)
    for row in summary:
        print(
            f"finqa            published answers given back: {row['metric']}/{row['variant']} "
            f"= {row['value']:.4f} (n={row['n']})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the raw releases (../shared/data)")
    args = parser.parse_args()
    finqa(args.data)
    text_datasets(args.data)


if __name__ == "__main__":
    main()
