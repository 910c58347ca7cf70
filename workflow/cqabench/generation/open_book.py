"""Open-book cells: the tool agent's dialogues, prepared per question and run in rounds over one engine.

An open-book prompt shows no documents: the model calls tools (WikiSearch, FindEvidence, GetIntro,
Python; `cqabench.generation.agent`) over a tool corpus in a bounded dialogue. Every model turn is
an item of the item cache like any other prompt, so a rerun replays cached turns and asks the
model only from the first missing one. The dialogues of one or many cells advance
step-synchronously: each round sends every unfinished dialogue's next turn to the engine in one
`cqabench.generation.completions.generate_missing` call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.generation.agent.loop import AgentContext, Dialogue, Limits, run_dialogues
from cqabench.generation.agent.openai_tools import TOOLS_API
from cqabench.generation.agent.tools import ArticleStore, Bm25Searcher, Toolbox
from cqabench.generation.cell import Cell, CellInputs, CellOptions
from cqabench.generation.completions import SharedBackend, generate_missing, item_labels
from cqabench.generation.items import Item, PreparedCell
from cqabench.generation.llm.base import Chat, Completion, LlmSpec, Sampling
from cqabench.generation.llm.cache import ItemCache, item_key
from cqabench.generation.prompts import Template, build_chat

OPEN_BOOK_KEYS = {"max_steps", "max_tool_chars", "max_total_tokens", "max_new_tokens", "retriever_settings"}


def open_book_sampling(sampling: Sampling, settings: Mapping[str, Any]) -> Sampling:
    """A dialogue turn's sampling: the cell's, with open_book.max_new_tokens when set (a table needs more)."""
    if settings.get("max_new_tokens") is None:
        return sampling
    n = settings["max_new_tokens"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"generation.open_book.max_new_tokens: expected a positive integer, got {n!r}")
    return Sampling(**{**asdict(sampling), "max_new_tokens": n})


_TOOLBOXES: dict[tuple[str, str, str, int], Toolbox] = {}


def _toolbox(inputs: CellInputs, settings: Mapping[str, Any], limits: Limits) -> Toolbox:
    """One toolbox (articles loaded, search helper started) per tool corpus, index and limits in a process."""
    if inputs.tool_corpus is None or inputs.tool_index is None:
        raise ConfigError("setting open-book needs --tool-corpus and --tool-index")
    retriever = dict(settings.get("retriever_settings") or {"type": "bm25"})
    key = (
        str(inputs.tool_corpus),
        str(inputs.tool_index),
        json.dumps(retriever, sort_keys=True),
        limits.max_tool_chars,
    )
    if key not in _TOOLBOXES:
        _TOOLBOXES[key] = Toolbox(
            ArticleStore.from_parquet(inputs.tool_corpus),
            Bm25Searcher(inputs.tool_index, retriever),
            limits.max_tool_chars,
        )
    return _TOOLBOXES[key]


def close_toolboxes() -> None:
    """Stop the search helpers (the job's end; tests between runs)."""
    while _TOOLBOXES:
        _, box = _TOOLBOXES.popitem()
        box.searcher.close()


def prepare_dialogues(
    cell: Cell,
    spec: LlmSpec,
    sampling: Sampling,
    template: Template,
    inputs: CellInputs,
    options: CellOptions,
    identity: Mapping[str, Any],
    questions: list[dict[str, Any]],
) -> PreparedCell:
    """An open-book cell: one dialogue per question, over the toolbox of its tool corpus."""
    settings = dict(options.open_book or {})
    unknown = sorted(set(settings) - OPEN_BOOK_KEYS)
    if unknown:
        raise ConfigError(f"generation.open_book: unknown key(s) {unknown}; valid: {sorted(OPEN_BOOK_KEYS)}")
    limits = Limits.from_config(settings)
    turn_sampling = open_book_sampling(sampling, settings)

    # openai with tools_api: the turns go out with tool definitions, so their replies get their own keys
    tools = TOOLS_API if spec.backend == "openai" and spec.options.get("tools_api") else None
    key_identity = {**identity, "tools_api": True} if tools else dict(identity)

    def key_of(chat: Chat) -> str:
        return item_key(key_identity, spec.backend, spec.dtype, turn_sampling, chat)

    ctx = AgentContext(_toolbox(inputs, settings, limits), limits, turn_sampling, key_of, tools)
    dialogues = [Dialogue(q["qid"], build_chat(template, q["question"]), ctx) for q in questions]
    return PreparedCell(cell, template, turn_sampling, [], [], dialogues)


def run_open_book(
    prepared: Sequence[PreparedCell],
    shared: SharedBackend,
    cache: ItemCache,
    label: str,
    order_key: Callable[[Item], Any] | None = None,
    claim_chunk: int = 256,
) -> tuple[dict[str, Completion], dict[str, Completion], int]:
    """Every open-book dialogue of `prepared`, step-synchronously: one batch of model calls per round.

    Returns (cached, generated, rounds) completions by key, as `generate_missing` does.
    """
    dialogues = [d for p in prepared for d in (p.dialogues or [])]
    cell_of = {id(d): p.cell.label for p in prepared for d in (p.dialogues or [])}
    cached_all: dict[str, Completion] = {}
    generated_all: dict[str, Completion] = {}

    def complete(active: Sequence[Dialogue], chats: Sequence[Chat]) -> tuple[list[Completion], list[bool]]:
        groups: dict[tuple[str, bool], tuple[Sampling, list[Item]]] = {}
        keys = []
        labels: dict[str, list[str]] = {}
        for d, chat in zip(active, chats):
            key = d.ctx.key_of(chat)
            keys.append(key)
            labels.setdefault(key, []).append(f"{cell_of[id(d)]} open-book round {d.qid}")
            group = (d.ctx.sampling.to_json(), d.ctx.tools is not None)
            groups.setdefault(group, (d.ctx.sampling, []))[1].append(Item(d.qid, chat, key, []))
        found: dict[str, Completion] = {}
        for (_, with_tools), (sampling, items) in groups.items():
            tools = TOOLS_API if with_tools else None
            cached, generated, _ = generate_missing(
                partial(shared.with_tools, tools),
                [(sampling, items)],
                cache,
                f"{label} open-book round",
                order_key,
                claim_chunk=claim_chunk,
                item_labels=item_labels(labels),
            )
            cached_all.update(cached)
            generated_all.update(generated)
            found.update(cached)
            found.update(generated)
        return [found[k] for k in keys], [k in cached for k in keys]

    rounds = run_dialogues(dialogues, complete) if dialogues else 0
    return cached_all, generated_all, rounds
