"""A cell's prompts as items of the item cache: one chat per question, keyed, before any model runs.

An item is (qid, chat, cache key, docids). Its key (`cqabench.generation.llm.cache.item_key`)
pins the model, backend, dtype, sampling and chat, so equal prompts of different cells share one
cached answer. `PreparedCell` is what the engine (`cqabench.generation.completions`) and the
writer (`cqabench.generation.cell_output`) get: the plain items of a closed, rag or oracle cell,
or the dialogues of an open-book one (`cqabench.generation.open_book`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cqabench.common.errors import DataError
from cqabench.generation.agent.loop import Dialogue
from cqabench.generation.cell import Cell, CellInputs, CellOptions
from cqabench.generation.cell_inputs import read_context
from cqabench.generation.llm.base import Chat, LlmSpec, Sampling
from cqabench.generation.llm.cache import item_key
from cqabench.generation.prompts import Template, build_chat


@dataclass
class Item:
    qid: str
    chat: Chat
    key: str
    docids: list[str]


@dataclass
class PreparedCell:
    """A cell's prompts, keyed for the item cache, before any model runs."""

    cell: Cell
    template: Template
    sampling: Sampling
    items: list[Item]
    without_evidence: list[str]  # oracle: selected questions left out for lack of gold documents
    dialogues: list[Dialogue] | None = None  # open-book: one per question, advanced by open_book.run_open_book


def with_template_stops(sampling: Sampling, template: Template) -> Sampling:
    """The cell's sampling: the template's stop strings join it, so they are part of every cache key."""
    return Sampling(**{**asdict(sampling), "stop": tuple(dict.fromkeys([*sampling.stop, *template.stop]))})


def build_items(
    cell: Cell,
    questions: Sequence[Mapping[str, Any]],
    template: Template,
    docs_for: Mapping[str, list[str]],
    documents: Mapping[str, Mapping[str, Any]],
    key_of: Callable[[Chat], str],
    max_doc_chars: int | None,
) -> list[Item]:
    items = []
    for q in questions:
        ids = docs_for.get(q["qid"], [])
        chat = build_chat(template, q["question"], [documents[d] for d in ids], cell.serialization, max_doc_chars)
        items.append(Item(q["qid"], chat, key_of(chat), list(ids)))
    return items


def prepare_items(
    cell: Cell,
    spec: LlmSpec,
    sampling: Sampling,
    template: Template,
    inputs: CellInputs,
    options: CellOptions,
    identity: Mapping[str, Any],
    questions: list[dict[str, Any]],
) -> PreparedCell:
    """A closed, rag or oracle cell: one item per question, its documents in the prompt."""
    context = read_context(cell, inputs, options, questions)

    def key_of(chat: Chat) -> str:
        return item_key(identity, spec.backend, spec.dtype, sampling, chat)

    items = build_items(
        cell, context.questions, template, context.docs_for, context.documents, key_of, options.max_doc_chars
    )
    if cell.setting == "oracle" and any(not it.docids for it in items):
        # gold context: read_context has refused a cell without --qrels already
        source = inputs.queries if options.oracle_context == "facts" or inputs.qrels is None else inputs.qrels
        raise DataError(
            source,
            next(it.qid for it in items if not it.docids),
            "docid",
            "an oracle prompt without context would be a closed-book prompt",
        )
    return PreparedCell(cell, template, sampling, items, context.without_evidence)
