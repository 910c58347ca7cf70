"""An engine batch split over several jobs by question: which questions one share generates.

On GPUs an LLM's batch (every cell of the model) is too long for one job, so the workflow runs it
as N jobs (`generation.batch_jobs`), each one engine session over its share. The split is by
question, never by cell: every prompt of a question (its closed-book, oracle and RAG prompts at
k = 1, 3, 5, 10, whose leading documents are shared) lands in one job, where the engine's prefix
cache can serve them back to back. Each job computes its share from the same prepared cells, so
the same config gives the same shares on every node, without a planning step that reads data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from cqabench.common.errors import ConfigError

if TYPE_CHECKING:  # the planner imports share_name: no data-reading modules on its path
    from cqabench.generation.items import PreparedCell

Question = tuple[str, str, str]  # (dataset, split, qid): qids are unique within a dataset split only
SHARE_PATTERN = re.compile(r"([0-9]+)-of-([0-9]+)")


def share_name(index: int, count: int) -> str:
    """A share's name in paths and on the command line: `2-of-8` (1-based)."""
    return f"{index}-of-{count}"


def parse_share(text: str, where: str = "--share") -> tuple[int, int]:
    """(index, count) of a share name such as `2-of-8`, refused unless 1 <= index <= count."""
    m = SHARE_PATTERN.fullmatch(str(text))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ConfigError(f"{where}: expected <i>-of-<n> with 1 <= i <= n (e.g. 2-of-8), got {text!r}")
    return int(m.group(1)), int(m.group(2))


def questions_of(p: PreparedCell) -> list[str]:
    """The qids a prepared cell asks about: its items', or its dialogues' (open-book)."""
    return [d.qid for d in p.dialogues] if p.dialogues is not None else [it.qid for it in p.items]


def assign(questions: Iterable[Question], count: int) -> dict[Question, int]:
    """Question -> share (1-based): per dataset split, the sorted qids dealt round-robin.

    Sorted, so the deal does not depend on the order of cells or rows; per dataset split, so
    every share gets about 1/count of each dataset (their prompts differ in length by a lot).
    """
    by_split: dict[tuple[str, str], set[str]] = {}
    for ds, sp, qid in questions:
        by_split.setdefault((ds, sp), set()).add(qid)
    out: dict[Question, int] = {}
    for (ds, sp), qids in sorted(by_split.items()):
        for rank, qid in enumerate(sorted(qids)):
            out[(ds, sp, qid)] = rank % count + 1
    return out


def restrict(prepared: Sequence[PreparedCell], index: int, count: int) -> list[PreparedCell]:
    """Every cell cut to the questions of share `index` of `count` (all of them when count is 1)."""
    if count == 1:
        return list(prepared)
    deal = assign(
        ((p.cell.dataset, p.cell.split, q) for p in prepared for q in [*questions_of(p), *p.without_evidence]), count
    )

    def mine(p: PreparedCell, qid: str) -> bool:
        return deal[(p.cell.dataset, p.cell.split, qid)] == index

    out = []
    for p in prepared:
        dialogues = None if p.dialogues is None else [d for d in p.dialogues if mine(p, d.qid)]
        out.append(
            replace(
                p,
                items=[it for it in p.items if mine(p, it.qid)],
                dialogues=dialogues,
                without_evidence=[q for q in p.without_evidence if mine(p, q)],
            )
        )
    return out
