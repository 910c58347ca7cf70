"""Items to completions: the item cache first, then one engine for whatever is missing.

`generate_missing` is the only place a model is asked: it looks every item up in the item cache
(`cqabench.generation.llm.cache`), claims the missing ones a chunk at a time, generates them on a
backend made only then, and publishes each answer, so a rerun or a job killed and restarted asks
the model only for what is missing, and the model is not even loaded when everything is cached.
A model spec's options that shape these calls (order, claim chunk, the cache's lease and size cap)
are read here too. `SharedBackend` keeps one engine for several calls: the open-book rounds, an
engine batch's many cells.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.common.progress import Progress
from cqabench.generation.items import Item
from cqabench.generation.llm import make_backend
from cqabench.generation.llm.base import Backend, Chat, Completion, LlmSpec, Sampling, ToolsApi
from cqabench.generation.llm.cache import DEFAULT_LEASE_S, ItemCache, completion_problem

log = logging.getLogger(__name__)


def longest_first(item: Item) -> Any:
    """Padding-friendly order for static batches (hf): prompts of similar length together."""
    return -len(json.dumps(item.chat))


def shared_prefix_first(item: Item) -> Any:
    """Prefix-cache-friendly order (vLLM): prompts that share a prefix run back to back.

    Sorted text puts a question's RAG prompts at k = 1, 3, 5 (one extends the other's first
    documents) and every prompt of a template (the demonstrations) next to each other, so
    the KV blocks of the shared prefix are still cached when the next prompt needs them.
    """
    return json.dumps(item.chat, ensure_ascii=False, sort_keys=True)


def order_for(spec: LlmSpec) -> Callable[[Item], Any]:
    return shared_prefix_first if spec.backend == "vllm" else longest_first


DEFAULT_CHARS_PER_TOKEN_CAP = 64  # a completion longer than this per requested token is not an answer


def completion_cap(spec: LlmSpec, sampling: Sampling) -> int:
    """The longest completion the cache accepts: `llms.<name>.max_completion_chars`, else 64 per token.

    A model stops at max_new_tokens, so a longer reply means a misbehaving server (an API
    ignoring max_tokens, a proxy's error page); storing it would poison every later run.
    """
    value = spec.options.get("max_completion_chars")
    if value is None:
        return DEFAULT_CHARS_PER_TOKEN_CAP * sampling.max_new_tokens
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"llms.{spec.name}.max_completion_chars: expected a positive integer, got {value!r}")
    return value


def claim_chunk_for(spec: LlmSpec) -> int:
    """Items claimed at once: a vLLM call's worth (chunk_size), at least 256, so claims stay cheap."""
    return max(256, int(spec.options.get("chunk_size") or 0))


def open_cache(path: Path, spec: LlmSpec, sampling: Sampling) -> ItemCache:
    lease = spec.options.get("cache_lease_s", DEFAULT_LEASE_S)
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or lease <= 0:
        raise ConfigError(f"llms.{spec.name}.cache_lease_s: expected a positive number of seconds, got {lease!r}")
    return ItemCache(path, lease_s=float(lease), max_chars=completion_cap(spec, sampling))


def _failed(comp: Completion, problem: str) -> Completion:
    return Completion("", comp.prompt_tokens, comp.output_tokens, comp.latency_s, "failed", error=problem)


def generate_missing(
    backend_factory: Callable[[], Backend],
    groups: Sequence[tuple[Sampling, Sequence[Item]]],
    cache: ItemCache,
    label: str,
    order_key: Callable[[Item], Any] | None = None,
    *,
    claim_chunk: int = 256,
    retry_empty: int = 1,
    poll_s: float = 0.2,
    item_labels: Mapping[str, str] | None = None,
) -> tuple[dict[str, Completion], dict[str, Completion], int]:
    """(cached, generated, API retries): completions by key; a backend is made only if something is missing.

    `groups` pairs each sampling (a template's stop strings join it) with its items; one
    backend serves every group, so a batch of many cells pays one engine start. Items with
    the same key (the same prompt twice) are generated once. Missing items go to the model in
    `order_key` order, `claim_chunk` at a time: the job claims a chunk in the item cache,
    generates it, publishes each finished backend batch, and moves on; items another live job
    has claimed are waited for, never generated twice. What the cache stores is what every
    cell uses: a completion that lost a publication race is replaced by the stored one (it
    then counts as cached).

    An empty or oversized completion is asked again `retry_empty` times; if it stays bad, or
    the backend gave up on it (`Completion.error`), it is returned in `generated` with
    `error` set, never cached, so the cell records the failure and a rerun asks again.

    Each stored item is labelled `item_labels[key]`, else "<label> <qid>": `cqabench cache drop
    --label` selects items by that text, so a job serving many cells (an engine batch) passes
    the cells' own labels rather than its name.
    """
    cached: dict[str, Completion] = {}
    merged: dict[str, tuple[Sampling, dict[str, Item]]] = {}  # cells with equal sampling share calls
    for sampling, items in groups:
        _, first = merged.setdefault(sampling.to_json(), (sampling, {}))
        for it in items:
            first.setdefault(it.key, it)
    todo_groups: list[tuple[Sampling, list[Item]]] = []
    n_unique = 0
    for sampling, first in merged.values():
        n_unique += len(first)
        found = cache.get_many(list(first))
        cached.update(found)
        todo = [it for key, it in first.items() if key not in found]
        if todo:
            todo.sort(key=order_key or longest_first)
            todo_groups.append((sampling, todo))
    generated: dict[str, Completion] = {}
    n_todo = sum(len(t) for _, t in todo_groups)
    log.info("%s: %d item(s), %d cached, %d to generate", label, n_unique, len(cached), n_todo)
    if not todo_groups:
        return cached, generated, 0
    backend: Backend | None = None
    progress = Progress(f"{label} generation", n_todo, unit="items")

    def run(sampling: Sampling, items: list[Item]) -> None:
        nonlocal backend
        if backend is None:
            backend = backend_factory()
        for attempt in range(retry_empty + 1):
            again: list[Item] = []
            again_keys: set[str] = set()
            # the backend names an item it refuses by its cell and question (a batch's first cell)
            names = [((item_labels or {}).get(i.key) or f"{label} {i.qid}").split("\n")[0] for i in items]
            for batch in backend.generate([i.chat for i in items], sampling, labels=names):
                rows = []
                for idx, comp in batch:
                    it = items[idx]
                    problem = completion_problem(comp, cache.max_chars)
                    if not problem:
                        rows.append((it.key, comp, (item_labels or {}).get(it.key) or f"{label} {it.qid}"))
                        log.info(
                            "generated item qid=%s (%d tokens, %.2f s)", it.qid, comp.output_tokens, comp.latency_s
                        )
                    elif comp.error or attempt == retry_empty:
                        log.warning("item qid=%s failed: %s (not cached; a rerun asks again)", it.qid, problem)
                        generated[it.key] = _failed(comp, problem)
                        cache.release_many([it.key])
                    else:
                        log.warning("item qid=%s: %s; asking again", it.qid, problem)
                        again.append(it)
                        again_keys.add(it.key)
                stored = cache.put_many(rows)
                for key, comp, _ in rows:
                    if stored[key] is comp:
                        generated[key] = comp
                    else:  # another job published it first: use what the cache holds
                        cached[key] = stored[key]
                progress.update(sum(1 for idx, _ in batch if items[idx].key not in again_keys))
            if not again:
                return
            items = again

    try:
        for sampling, todo in todo_groups:
            remaining = todo
            delay, waited_log = poll_s, 0.0
            while remaining:
                found = cache.get_many([it.key for it in remaining])
                cached.update(found)
                remaining = [it for it in remaining if it.key not in found]
                if not remaining:
                    break
                mine = set(cache.claim_many([it.key for it in remaining], claim_chunk))
                if mine:
                    late = cache.get_many(sorted(mine))  # published between the lookup and the claim
                    cached.update(late)
                    cache.release_many(late)
                    run(sampling, [it for it in remaining if it.key in mine and it.key not in late])
                    remaining = [it for it in remaining if it.key not in mine]
                    delay = poll_s
                    continue
                if time.monotonic() - waited_log > 60:
                    waited_log = time.monotonic()
                    log.info(
                        "%s: waiting for %d item(s) claimed by other job(s) %s",
                        label,
                        len(remaining),
                        ", ".join(cache.claim_holders([it.key for it in remaining[:50]])) or "?",
                    )
                time.sleep(delay)
                delay = min(delay * 1.5, 5.0)
        progress.finish()
    finally:
        retries = int(getattr(backend, "retries", 0)) if backend is not None else 0
        if backend is not None:
            backend.close()
    return cached, generated, retries


def item_labels(labels: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """key -> the item cache label: one "<cell> <qid>" line per cell that asked for the item.

    One prompt can belong to several cells (a question's closed-book prompt under two table
    serializations); each cell's line lets `cqabench cache drop --label '<cell glob>'` find it.
    """
    return {key: "\n".join(dict.fromkeys(lines)) for key, lines in labels.items()}


class SharedBackend:
    """One engine for every round of the dialogues (and the batch's plain items): made on first use.

    `generate_missing` closes the backend it was given after each call; this proxy ignores that,
    and `shutdown` closes the engine once at the end.
    """

    def __init__(self, factory: Callable[[], Backend]) -> None:
        self._factory = factory
        self.backend: Backend | None = None
        self.name = "shared"
        self.tools: ToolsApi | None = None

    @classmethod
    def for_spec(cls, spec: LlmSpec, backend_factory: Callable[[], Backend] | None = None) -> SharedBackend:
        """The engine of `spec` (`backend_factory` instead when given: tests), not started yet."""
        return cls(backend_factory or (lambda: make_backend(spec)))

    def get(self) -> SharedBackend:
        if self.backend is None:
            self.backend = self._factory()
        return self

    def generate(self, chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None) -> Any:
        assert self.backend is not None
        if self.tools is not None:  # the openai backend with tools_api: the turn goes out with tool definitions
            return self.backend.generate(chats, sampling, labels=labels, tools=self.tools)  # type: ignore[call-arg]
        return self.backend.generate(chats, sampling, labels=labels)

    def with_tools(self, tools: ToolsApi | None) -> SharedBackend:
        """This engine, for one round, sending `tools` with every request (None: the text format)."""
        self.get()
        view = SharedBackend(self._factory)
        view.backend, view.tools = self.backend, tools
        return view

    @property
    def retries(self) -> int:
        return 0  # counted once, from the engine itself, by `shutdown`

    def close(self) -> None:
        pass

    def shutdown(self) -> int:
        if self.backend is None:
            return 0
        retries = int(getattr(self.backend, "retries", 0))
        self.backend.close()
        self.backend = None
        return retries
