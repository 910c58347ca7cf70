"""Cover-EM as the original DEXTER toolkit's LLM scripts scored it inline (variant `dexter`).

The toolkit's metric class (CoverExactMatch) is not what produced the paper's numbers for the
text datasets: each `evaluation/<dataset>/llms/run_*.py` script compares the final answer with
the gold itself, lower-casing only (../shared/paper/dexter_toolkit.md §3, "Cover-EM as actually
scored by the LLM scripts"). Written from that description, one rule per dataset:

- MuSiQue, 2WikiMultihopQA: the dataset's `answer` (our first alias; the scripts read no
  aliases) lower-cased is a substring of the lower-cased answer; an answer holding "not
  possible" or "unknown" is a miss.
- TAT-QA: the gold's last element when it is a list (a multi-span gold counts only its last
  span), `str(gold).lower().strip()` a substring of the lower-cased answer (a number gold is its
  JSON text, e.g. "-12.6", "5.0").
- OTT-QA: both ways, `gold in answer or answer in gold`, lower-cased (an empty answer is
  inside every gold).

Differences kept on purpose (docs/fidelity.md, "cover-EM"): the rules read our extracted final
answer (the text after our marker's last occurrence, stripped), not the text after the
scripts' own split, and "not possible" / "unknown" are looked for in that final answer only,
because the scored predictions keep the final answer, not the model's reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence

GIVE_UP = ("not possible", "unknown")  # MuSiQue / 2Wiki scripts: a miss wherever these occur
DATASETS = ("musique", "2wikimultihopqa", "tatqa", "ottqa")


def cover_em_script(dataset: str, answer: str, aliases: Sequence[str]) -> float:
    """1.0 when the toolkit's script for `dataset` counts `answer` a match for the gold
    `aliases` (as answers.parquet holds them: the dataset's answer first, TAT-QA's spans in
    order), else 0.0. No gold at all is a miss."""
    if not aliases:
        return 0.0
    text = str(answer).lower()
    if dataset in ("musique", "2wikimultihopqa"):
        if any(phrase in text for phrase in GIVE_UP):
            return 0.0
        return float(str(aliases[0]).lower() in text)
    if dataset == "tatqa":
        return float(str(aliases[-1]).lower().strip() in text)
    if dataset == "ottqa":
        gold = str(aliases[0]).lower()
        return float(gold in text or text in gold)
    raise ValueError(f"no toolkit script rule for dataset {dataset!r}; valid: {', '.join(DATASETS)}")
