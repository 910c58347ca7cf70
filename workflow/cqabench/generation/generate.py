"""One generation cell: questions + documents + template → cached model answers → predictions.

A cell is (dataset, split, serialization, retriever, llm, prompt, setting, k). The job is
resumable item by item: every answer is looked up in, and written to, the item cache
(`cqabench.generation.llm.cache`) before the predictions file is assembled, so a rerun or a job killed
and restarted calls the model only for what is missing. The model is not even loaded when
everything is cached.

Settings: `closed` (no documents), `rag` (the top-k of a retrieval run), `oracle` (every
gold document of the question from qrels, in qrels order; k is recorded as 0, meaning "all";
with `oracle_context: facts`, StrategyQA's annotators' facts instead, `cqabench.generation.oracle`),
`open-book` (no documents in the prompt: the model calls tools over a tool corpus in a bounded,
cached dialogue, `cqabench.generation.agent`; retriever = the BM25 retriever behind WikiSearch, k = 1, the
one article a search returns).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cqabench.generation import oracle
from cqabench.generation.agent.loop import AgentContext, Dialogue, Limits, run_dialogues
from cqabench.generation.agent.openai_tools import TOOLS_API
from cqabench.generation.agent.tools import ArticleStore, Bm25Searcher, Toolbox
from cqabench.common.errors import ConfigError, DataError
from cqabench.generation.extraction import Extracted, extract_answer
from cqabench.common.io import read_parquet, write_json, write_parquet
from cqabench.generation.llm import identity_hash, make_backend, model_identity
from cqabench.generation.llm.base import Backend, Chat, Completion, LlmSpec, Sampling, ToolsApi
from cqabench.generation.llm.cache import DEFAULT_LEASE_S, ItemCache, completion_problem, item_key
from cqabench.common.progress import Progress
from cqabench.generation.prompts import SETTINGS, Template, build_chat, chat_hash
from cqabench.common.provenance import job_provenance
from cqabench.retrieval.runs import ranked, read_run

log = logging.getLogger(__name__)

PREDICTION_SCHEMA = pa.schema(
    [
        ("qid", pa.string()),
        ("prompt_hash", pa.string()),
        ("raw_output", pa.string()),
        ("prediction", pa.string()),
        ("parse_ok", pa.bool_()),
        ("parse_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("latency_s", pa.float64()),
        ("cached", pa.bool_()),
        ("finish_reason", pa.string()),
        ("context_docids", pa.list_(pa.string())),
        ("n_docs", pa.int32()),  # documents the prompt gave (rag: at most k; fewer where the run ranks fewer)
        ("dataset", pa.string()),
        ("split", pa.string()),
        ("serialization", pa.string()),
        ("retriever", pa.string()),
        ("llm", pa.string()),
        ("backend", pa.string()),
        ("dtype", pa.string()),
        ("model_hash", pa.string()),
        ("prompt", pa.string()),
        ("template_hash", pa.string()),
        ("setting", pa.string()),
        ("k", pa.int32()),
        ("sampling", pa.string()),
        ("transcript", pa.string()),  # open-book: JSON {stop_reason, steps}; "" for other settings
    ]
)


@dataclass(frozen=True)
class Cell:
    dataset: str
    split: str
    serialization: str
    retriever: str  # "none" for closed and oracle
    llm: str
    prompt: str
    setting: str
    k: int  # 0 for closed and oracle (oracle = all gold documents)

    @classmethod
    def from_label(cls, label: Any, where: str = "cell") -> Cell:
        """The cell a path label names: '{dataset}/{split}/{ser}/{retriever}/{llm}/{prompt}/{setting}-k{k}'."""
        parts = str(label).split("/")
        setting, _, k = parts[-1].rpartition("-k") if parts else ("", "", "")
        if len(parts) != 7 or not setting or not k.isdigit():
            raise ConfigError(f"{where}: {label!r} is not '<dataset>/<split>/<serialization>/<retriever>/<llm>/<prompt>/<setting>-k<k>'")
        return cls(*parts[:6], setting=setting, k=int(k))

    def check(self) -> None:
        if self.setting not in SETTINGS:
            raise ConfigError(f"unknown setting {self.setting!r}; valid: {', '.join(SETTINGS)}")
        if self.setting == "rag":
            if self.retriever in ("", "none") or self.k < 1:
                raise ConfigError(f"setting rag needs a retriever and k >= 1, got {self.retriever!r}, k={self.k}")
        elif self.setting == "open-book":
            if self.retriever in ("", "none") or self.k != 1:
                raise ConfigError(f"setting open-book takes the WikiSearch retriever and k 1, got {self.retriever!r}, k={self.k}")
        elif self.retriever != "none" or self.k != 0:
            raise ConfigError(f"setting {self.setting} takes retriever 'none' and k 0, got {self.retriever!r}, k={self.k}")


def select_questions(queries: pa.Table, max_questions: int | None) -> list[dict[str, Any]]:
    """The first `max_questions` questions in file order: an explicit, stable cap."""
    rows = queries.select(["qid", "question"]).to_pylist()
    return rows if max_questions is None else rows[:max_questions]


def gold_docids(qrels: pa.Table, qids: set[str]) -> dict[str, list[str]]:
    """Relevant docids per question, first-seen order, each once even if several annotators list it."""
    out: dict[str, list[str]] = {q: [] for q in qids}
    cols = qrels.select(["qid", "docid", "relevance"]).to_pydict()
    for qid, docid, rel in zip(cols["qid"], cols["docid"], cols["relevance"]):
        if qid in out and rel > 0 and docid not in out[qid]:
            out[qid].append(docid)
    return out


def retrieved_docids(run_path: Path, qids: set[str], k: int) -> dict[str, list[str]]:
    """Top-k per question from a run file; a question the run lacks gets no documents (logged).

    A run ranking fewer than k documents for every question (an external run, whose depth the
    planner cannot know) is refused: each row would say k while giving fewer. A question with
    a shorter ranking than k gets what the run has; its row's `n_docs` records how many.
    """
    run = read_run(run_path)
    deepest = max((len(docs) for docs in run.values()), default=0)
    if run and deepest < k:
        raise DataError(run_path, None, "k", f"the run ranks at most {deepest} document(s) per question, fewer than "
                        f"k = {k}: every row would say k = {k}; use a k <= {deepest} or a deeper run")
    top = ranked({q: d for q, d in run.items() if q in qids}, k)
    missing = sorted(qids - set(top))
    if missing:
        log.warning("%s has no ranking for %d question(s), e.g. %s: they get no context", run_path, len(missing), missing[0])
    return {q: [docid for docid, _ in top.get(q, [])] for q in qids}


def load_documents(corpus_path: Path, docids: set[str]) -> dict[str, dict[str, Any]]:
    """Only the needed rows of a (possibly pooled, large) corpus, via a Parquet filter."""
    if not docids:
        return {}
    table = pq.read_table(corpus_path, filters=[("docid", "in", sorted(docids))])
    docs = {row["docid"]: row for row in table.to_pylist()}
    absent = sorted(docids - set(docs))
    if absent:
        raise DataError(corpus_path, absent[0], "docid", f"{len(absent)} document(s) named by the run/qrels are not in the corpus")
    return docs


@dataclass
class Item:
    qid: str
    chat: Chat
    key: str
    docids: list[str]


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
            for batch in backend.generate([i.chat for i in items], sampling, labels=[i.qid for i in items]):
                rows = []
                for idx, comp in batch:
                    it = items[idx]
                    problem = completion_problem(comp, cache.max_chars)
                    if not problem:
                        rows.append((it.key, comp, (item_labels or {}).get(it.key) or f"{label} {it.qid}"))
                        log.info("generated item qid=%s (%d tokens, %.2f s)", it.qid, comp.output_tokens, comp.latency_s)
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
                    log.info("%s: waiting for %d item(s) claimed by other job(s) %s", label, len(remaining),
                             ", ".join(cache.claim_holders([it.key for it in remaining[:50]])) or "?")
                time.sleep(delay)
                delay = min(delay * 1.5, 5.0)
        progress.finish()
    finally:
        retries = int(getattr(backend, "retries", 0)) if backend is not None else 0
        if backend is not None:
            backend.close()
    return cached, generated, retries


@dataclass(frozen=True)
class CellInputs:
    """The files one cell reads (corpus for rag/oracle, qrels for oracle, run for rag)."""

    queries: Path
    template: Path
    corpus: Path | None = None
    qrels: Path | None = None
    run: Path | None = None
    tool_corpus: Path | None = None  # open-book: the corpus behind the tools
    tool_index: Path | None = None  # open-book: its BM25 index (WikiSearch)


@dataclass(frozen=True)
class CellOptions:
    """Per-cell switches besides the cell's name; each one is recorded in summary.json."""

    max_questions: int | None = None
    max_doc_chars: int | None = None
    oracle_distractors: int = 0
    oracle_seed: int = 0
    # what an oracle prompt shows (cqabench.generation.oracle.CONTEXT_SOURCES): the qrels' gold documents, or
    # StrategyQA's annotators' facts where the sample has no paragraph text
    oracle_context: str = "gold"
    open_book: Mapping[str, Any] | None = None  # limits, max_new_tokens, retriever_settings (config.generation.open_book)


@dataclass
class PreparedCell:
    """A cell's prompts, keyed for the item cache, before any model runs."""

    cell: Cell
    template: Template
    sampling: Sampling
    items: list[Item]
    without_evidence: list[str]  # oracle: selected questions left out for lack of gold documents
    dialogues: list[Dialogue] | None = None  # open-book: one per question, advanced by run_open_book


def prepare_cell(
    cell: Cell,
    spec: LlmSpec,
    sampling: Sampling,
    template: Template,
    inputs: CellInputs,
    options: CellOptions,
    identity: Mapping[str, Any] | None = None,
) -> PreparedCell:
    """Questions, documents and chats of one cell; the same code serves one cell and a batch."""
    cell.check()
    if cell.llm != spec.name:
        raise ConfigError(f"cell llm {cell.llm!r} does not match the model spec {spec.name!r}")
    # Template stop strings join the sampling parameters, so they are part of every cache key.
    sampling = Sampling(**{**asdict(sampling), "stop": tuple(dict.fromkeys([*sampling.stop, *template.stop]))})
    identity = identity if identity is not None else model_identity(spec)
    questions = select_questions(read_parquet(inputs.queries), options.max_questions)
    qids = {q["qid"] for q in questions}
    without_evidence: list[str] = []
    fact_docs: dict[str, dict[str, Any]] = {}  # oracle context facts: the context entries themselves

    if cell.setting == "open-book":
        return _prepare_open_book(cell, spec, sampling, template, inputs, options, identity, questions)
    if cell.setting == "closed":
        docs_for: dict[str, list[str]] = {q: [] for q in qids}
    elif cell.setting == "oracle" and options.oracle_context == "facts":
        docs_for, fact_docs, without_evidence = oracle.facts_contexts(read_parquet(inputs.queries), questions)
        if without_evidence:
            log.warning("%s/%s oracle (facts): %d of %d question(s) have no facts and are left out, e.g. %s",
                        cell.dataset, cell.split, len(without_evidence), len(questions), without_evidence[0])
        questions = [q for q in questions if q["qid"] not in set(without_evidence)]
    elif cell.setting == "oracle":
        if options.oracle_context != "gold":
            raise ConfigError(f"oracle context {options.oracle_context!r} is not one of {list(oracle.CONTEXT_SOURCES)}")
        if inputs.qrels is None:
            raise ConfigError("setting oracle needs --qrels")
        qrels = read_parquet(inputs.qrels)
        gold = gold_docids(qrels, set(qrels.column("qid").to_pylist()) | qids)
        without_evidence = oracle.questions_without_evidence(cell.dataset, cell.split, [q["qid"] for q in questions], gold)
        if without_evidence:
            log.warning("%s/%s oracle: %d of %d question(s) have no gold document and are left out, e.g. %s",
                        cell.dataset, cell.split, len(without_evidence), len(questions), without_evidence[0])
        questions = [q for q in questions if q["qid"] not in set(without_evidence)]
        docs_for = oracle.oracle_contexts([q["qid"] for q in questions], gold, options.oracle_distractors, options.oracle_seed)
    else:
        if inputs.run is None:
            raise ConfigError("setting rag needs --run")
        docs_for = retrieved_docids(inputs.run, qids, cell.k)
    needed = {d for ids in docs_for.values() for d in ids}
    if fact_docs:
        documents = fact_docs
    else:
        if needed and inputs.corpus is None:
            raise ConfigError(f"setting {cell.setting} needs --corpus")
        documents = load_documents(inputs.corpus, needed) if needed else {}

    def key_of(chat: Chat) -> str:
        return item_key(identity, spec.backend, spec.dtype, sampling, chat)

    items = build_items(cell, questions, template, docs_for, documents, key_of, options.max_doc_chars)
    if cell.setting == "oracle" and any(not it.docids for it in items):
        source = inputs.queries if options.oracle_context == "facts" else inputs.qrels
        raise DataError(source, next(it.qid for it in items if not it.docids), "docid",
                        "an oracle prompt without context would be a closed-book prompt")
    return PreparedCell(cell, template, sampling, items, without_evidence)


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
    key = (str(inputs.tool_corpus), str(inputs.tool_index), json.dumps(retriever, sort_keys=True), limits.max_tool_chars)
    if key not in _TOOLBOXES:
        _TOOLBOXES[key] = Toolbox(ArticleStore.from_parquet(inputs.tool_corpus),
                                  Bm25Searcher(inputs.tool_index, retriever), limits.max_tool_chars)
    return _TOOLBOXES[key]


def close_toolboxes() -> None:
    """Stop the search helpers (the job's end; tests between runs)."""
    while _TOOLBOXES:
        _, box = _TOOLBOXES.popitem()
        box.searcher.close()


def _prepare_open_book(cell: Cell, spec: LlmSpec, sampling: Sampling, template: Template, inputs: CellInputs,
                       options: CellOptions, identity: Mapping[str, Any], questions: list[dict[str, Any]]) -> PreparedCell:
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


class _SharedBackend:
    """One engine for every round of the dialogues (and the batch's plain items): made on first use.

    `generate_missing` closes the backend it was given after each call; this proxy ignores that,
    and `shutdown` closes the engine once at the end.
    """

    def __init__(self, factory: Callable[[], Backend]) -> None:
        self._factory = factory
        self.backend: Backend | None = None
        self.name = "shared"
        self.tools: ToolsApi | None = None

    def get(self) -> _SharedBackend:
        if self.backend is None:
            self.backend = self._factory()
        return self

    def generate(self, chats: Sequence[Chat], sampling: Sampling, labels: Sequence[str] | None = None) -> Any:
        assert self.backend is not None
        if self.tools is not None:  # the openai backend with tools_api: the turn goes out with tool definitions
            return self.backend.generate(chats, sampling, labels=labels, tools=self.tools)  # type: ignore[call-arg]
        return self.backend.generate(chats, sampling, labels=labels)

    def with_tools(self, tools: ToolsApi | None) -> _SharedBackend:
        """This engine, for one round, sending `tools` with every request (None: the text format)."""
        self.get()
        view = _SharedBackend(self._factory)
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


def run_open_book(prepared: Sequence[PreparedCell], shared: _SharedBackend, cache: ItemCache, label: str,
                  order_key: Callable[[Item], Any] | None = None, claim_chunk: int = 256,
                  ) -> tuple[dict[str, Completion], dict[str, Completion], int]:
    """Every open-book dialogue of `prepared`, step-synchronously: one batch of model calls per round.

    Returns (cached, generated, rounds) completions by key, as `generate_missing` does.
    """
    dialogues = [d for p in prepared for d in (p.dialogues or [])]
    cell_of = {id(d): cell_label(p.cell) for p in prepared for d in (p.dialogues or [])}
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
            cached, generated, _ = generate_missing(lambda t=tools: shared.with_tools(t), [(sampling, items)], cache,
                                                    f"{label} open-book round", order_key, claim_chunk=claim_chunk,
                                                    item_labels=item_labels(labels))
            cached_all.update(cached)
            generated_all.update(generated)
            found.update(cached)
            found.update(generated)
        return [found[k] for k in keys], [k in cached for k in keys]

    rounds = run_dialogues(dialogues, complete) if dialogues else 0
    return cached_all, generated_all, rounds


def cell_label(cell: Cell) -> str:
    return "/".join([cell.dataset, cell.split, cell.serialization, cell.retriever, cell.llm, cell.prompt, f"{cell.setting}-k{cell.k}"])


def item_labels(labels: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """key -> the item cache label: one "<cell> <qid>" line per cell that asked for the item.

    One prompt can belong to several cells (a question's closed-book prompt under two table
    serializations); each cell's line lets `cqabench cache drop --label '<cell glob>'` find it.
    """
    return {key: "\n".join(dict.fromkeys(lines)) for key, lines in labels.items()}


def write_cell(
    prepared: PreparedCell,
    spec: LlmSpec,
    identity: Mapping[str, Any],
    completions: Mapping[str, Completion],
    cached_keys: set[str],
    options: CellOptions,
    out_path: Path,
    summary_path: Path | None,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """predictions.parquet (and summary.json) of one prepared cell from its completions."""
    cell, sampling, template = prepared.cell, prepared.sampling, prepared.template
    sampling_json = sampling.to_json()
    model_hash = identity_hash(identity)
    answers = []  # (qid, prompt hash, output, prompt tokens, output tokens, latency, cached, finish, docids, transcript)
    for it in prepared.items:
        comp = completions[it.key]
        answers.append((it.qid, chat_hash(it.chat), comp.text, comp.prompt_tokens, comp.output_tokens, comp.latency_s,
                        it.key in cached_keys, comp.finish_reason, it.docids, "",
                        f"generation failed: {comp.error}" if comp.error else ""))
    for d in prepared.dialogues or []:
        comps = [c for _, c in d.completions]
        # a direct-answer prompt reads a marker-less reply as the answer; a dialogue that was cut
        # off mid-search has not answered (its "Action: X[a | b]" would read as a table row)
        failure = "" if d.stop_reason == "final_answer" else f"no final answer: the open-book dialogue stopped at {d.stop_reason}"
        if d.stop_reason == "generation_failed":
            failure = f"generation failed: {comps[-1].error}"
        answers.append((d.qid, chat_hash(d.chat), d.final_text, sum(c.prompt_tokens for c in comps),
                        sum(c.output_tokens for c in comps), sum(c.latency_s for c in comps),
                        all(step["cached"] for step in d.steps), comps[-1].finish_reason if comps else "",
                        d.docids, d.transcript(), failure))
    rows = []
    for qid, p_hash, text, p_tok, o_tok, latency, was_cached, finish, docids, transcript, failure in answers:
        ext = Extracted("", False, failure) if failure else extract_answer(cell.dataset, text, cell.prompt)
        rows.append(
            {
                "qid": qid,
                "prompt_hash": p_hash,
                "raw_output": text,
                "prediction": ext.answer,
                "parse_ok": bool(ext.ok),
                "parse_reason": ext.reason,
                "prompt_tokens": p_tok,
                "output_tokens": o_tok,
                "latency_s": latency,
                "cached": was_cached,
                "finish_reason": finish,
                "context_docids": docids,
                "n_docs": len(docids),
                "dataset": cell.dataset,
                "split": cell.split,
                "serialization": cell.serialization,
                "retriever": cell.retriever,
                "llm": cell.llm,
                "backend": spec.backend,
                "dtype": spec.dtype,
                "model_hash": model_hash,
                "prompt": cell.prompt,
                "template_hash": template.hash,
                "setting": cell.setting,
                "k": cell.k,
                "sampling": sampling_json,
                "transcript": transcript,
            }
        )
    write_parquet(pa.Table.from_pylist(rows, schema=PREDICTION_SCHEMA), out_path)
    summary = {
        "cell": {**asdict(cell), "backend": spec.backend, "dtype": spec.dtype, "template_hash": template.hash},
        "model": dict(identity),
        "sampling": sampling.to_dict(),
        "options": asdict(options),
        "n_items": len(rows),
        "n_cached": sum(r["cached"] for r in rows),
        "n_generated": sum(not r["cached"] and r["finish_reason"] != "failed" for r in rows),
        "n_failed": sum(r["finish_reason"] == "failed" for r in rows),
        # a cell with failed items is incomplete: `cqabench generate` exits non-zero after writing
        # it (docs/generation.md, "Failed items"), and scoring leaves these questions out, counted
        "complete": not any(r["finish_reason"] == "failed" for r in rows),
        "failed_qids": [r["qid"] for r in rows if r["finish_reason"] == "failed"],
        "n_without_evidence": len(prepared.without_evidence),
        "parse_failures": sum(not r["parse_ok"] for r in rows),
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
        "output_tokens": sum(r["output_tokens"] for r in rows),
        "latency_s": round(sum(r["latency_s"] for r in rows), 3),
        "generated_latency_s": round(sum(r["latency_s"] for r in rows if not r["cached"]), 3),
        **(_open_book_summary(prepared) if prepared.dialogues is not None else {}),
        **extra,
    }
    if summary_path is not None:
        write_json(summary, summary_path)
    return summary


def _open_book_summary(prepared: PreparedCell) -> dict[str, Any]:
    """The loop's limits and what the dialogues did (steps, tool calls, tool errors, how they ended)."""
    dialogues = prepared.dialogues or []
    steps = [s for d in dialogues for s in d.steps]
    stops: dict[str, int] = {}
    for d in dialogues:
        stops[d.stop_reason] = stops.get(d.stop_reason, 0) + 1
    tools: dict[str, int] = {}
    for s in steps:
        if "action" in s:
            tools[s["action"]] = tools.get(s["action"], 0) + 1
    return {"open_book": {
        "limits": dialogues[0].ctx.limits.to_dict() if dialogues else {},
        "n_model_calls": len(steps),
        "n_model_calls_generated": sum(not s["cached"] for s in steps),
        "tool_calls": dict(sorted(tools.items())),
        "tool_errors": sum(bool(s.get("tool_error")) for s in steps),
        "stop_reasons": dict(sorted(stops.items())),
    }}


def run_cell(
    cell: Cell,
    spec: LlmSpec,
    sampling: Sampling,
    template: Template,
    inputs: CellInputs,
    out_path: Path,
    cache_path: Path,
    options: CellOptions = CellOptions(),
    summary_path: Path | None = None,
    backend_factory: Callable[[], Backend] | None = None,
) -> dict[str, Any]:
    """Generate one cell and write predictions.parquet (and summary.json); returns the summary."""
    started = time.perf_counter()
    identity = model_identity(spec)
    prepared = prepare_cell(cell, spec, sampling, template, inputs, options, identity)
    label = cell_label(cell)
    shared = _SharedBackend(backend_factory or (lambda: make_backend(spec)))
    try:
        with open_cache(cache_path, spec, prepared.sampling) as cache:
            if prepared.dialogues is not None:
                cached, generated, _ = run_open_book([prepared], shared, cache, label, order_for(spec),
                                                     claim_chunk_for(spec))
            else:
                cached, generated, _ = generate_missing(shared.get, [(prepared.sampling, prepared.items)], cache, label,
                                                        order_for(spec), claim_chunk=claim_chunk_for(spec))
    finally:
        retries = shared.shutdown()
        close_toolboxes()
    summary = write_cell(
        prepared, spec, identity, {**cached, **generated}, set(cached), options, out_path, None,
        {"api_retries": retries, "cache": str(cache_path)},
    )
    summary["wall_time_s"] = round(time.perf_counter() - started, 3)
    if summary["n_failed"]:  # plain items and open-book dialogues alike (their rows say "failed")
        log.warning("%s: %d of %d item(s) failed and are not cached (a rerun asks again): %s", label,
                    summary["n_failed"], summary["n_items"], ", ".join(summary["failed_qids"][:20]))
    # Recorded here, in the generation environment (vLLM's own venv), not by the jobs that
    # score or aggregate later: those run elsewhere and would report their own packages.
    summary["provenance"] = {**job_provenance(), "model_hash": identity_hash(identity)}
    if summary_path is not None:
        write_json(summary, summary_path)
    log.info(
        "%s: %d items (%d cached), %d prompt + %d output tokens, %.1f s",
        label, summary["n_items"], summary["n_cached"], summary["prompt_tokens"], summary["output_tokens"], summary["wall_time_s"],
    )
    return summary


@dataclass(frozen=True)
class BatchCell:
    """One member of an engine batch: the cell, its files and its switches."""

    cell: Cell
    inputs: CellInputs
    options: CellOptions
    template: Template


def _cell_keys(p: PreparedCell) -> list[str]:
    """Every cache key a cell used: its items', and every turn of its dialogues."""
    return [it.key for it in p.items] + [k for d in p.dialogues or [] for k, _ in d.completions]


def _failed_qids(p: PreparedCell, generated: Mapping[str, Completion]) -> list[str]:
    """The questions of a cell whose item (or a dialogue turn) the backend gave up on."""
    def bad(key: str) -> bool:
        return key in generated and bool(generated[key].error)

    return ([it.qid for it in p.items if bad(it.key)]
            + [d.qid for d in p.dialogues or [] if any(bad(k) for k, _ in d.completions)])


def run_batch(
    members: Sequence[BatchCell],
    spec: LlmSpec,
    sampling: Sampling,
    cache_path: Path,
    manifest_path: Path,
    backend_factory: Callable[[], Backend] | None = None,
) -> dict[str, Any]:
    """Fill the item cache for many cells of one model in one engine session.

    An engine start (about 20-45 s for vLLM on CPU) costs more than a sample cell's 30
    questions, so the workflow can let one job generate every missing item of a model's
    cells; each cell's own job then finds its items cached and only assembles its
    predictions. The manifest says what was generated, per cell, for the log and the tests.
    """
    started = time.perf_counter()
    if not members:
        raise ConfigError("an engine batch needs at least one cell")
    identity = model_identity(spec)
    prepared = [prepare_cell(m.cell, spec, sampling, m.template, m.inputs, m.options, identity) for m in members]
    shared = _SharedBackend(backend_factory or (lambda: make_backend(spec)))
    rounds = 0
    widest = max((p.sampling for p in prepared), key=lambda smp: smp.max_new_tokens)  # the cache's size cap
    try:
        with open_cache(cache_path, spec, widest) as cache:
            plain = [(p.sampling, p.items) for p in prepared if p.dialogues is None]
            labels: dict[str, list[str]] = {}
            for p in prepared:
                for it in p.items if p.dialogues is None else ():
                    labels.setdefault(it.key, []).append(f"{cell_label(p.cell)} {it.qid}")
            cached, generated, _ = generate_missing(shared.get, plain, cache, f"batch {spec.name}", order_for(spec),
                                                    claim_chunk=claim_chunk_for(spec), item_labels=item_labels(labels))
            # then every open-book dialogue of every cell, one batch per round, on the same engine
            ob_cached, ob_generated, rounds = run_open_book([p for p in prepared if p.dialogues is not None], shared,
                                                            cache, f"batch {spec.name}", order_for(spec),
                                                            claim_chunk_for(spec))
            cached.update(ob_cached)
            generated.update(ob_generated)
    finally:
        retries = shared.shutdown()
        close_toolboxes()
    manifest = {
        "llm": spec.name,
        "backend": spec.backend,
        "model": dict(identity),
        "cells": [
            {"cell": cell_label(p.cell), "n_items": len(p.items) + len(p.dialogues or []),
             "n_without_evidence": len(p.without_evidence),
             "n_generated": sum(1 for k in _cell_keys(p) if k in generated and not generated[k].error),
             "n_failed": sum(1 for k in _cell_keys(p) if k in generated and generated[k].error),
             "failed_qids": _failed_qids(p, generated)}
            for p in prepared
        ],
        "n_cells": len(prepared),
        "n_items": sum(len(p.items) + len(p.dialogues or []) for p in prepared),
        "open_book_rounds": rounds,
        "n_unique_prompts": len(cached) + len(generated),
        "n_cached": len(cached),
        "n_generated": sum(1 for c in generated.values() if not c.error),
        "n_failed": sum(1 for c in generated.values() if c.error),
        "prompt_tokens_generated": sum(c.prompt_tokens for c in generated.values()),
        "output_tokens_generated": sum(c.output_tokens for c in generated.values()),
        "api_retries": retries,
        "wall_time_s": round(time.perf_counter() - started, 3),
        "cache": str(cache_path),
        "provenance": {**job_provenance(), "model_hash": identity_hash(identity)},
    }
    write_json(manifest, manifest_path)
    log.info("batch %s: %d cells, %d unique prompts, %d generated, %.1f s", spec.name, manifest["n_cells"],
             manifest["n_unique_prompts"], manifest["n_generated"], manifest["wall_time_s"])
    return manifest
