"""What one generation cell is: its name, the files it reads and its switches.

A cell is (dataset, split, serialization, retriever, llm, prompt, setting, k). Settings:
`closed` (no documents), `rag` (the top-k of a retrieval run), `oracle` (every gold document of
the question from qrels, in qrels order; k is recorded as 0, meaning "all"; with
`oracle_context: facts`, StrategyQA's annotators' facts instead, `cqabench.generation.oracle`),
`open-book` (no documents in the prompt: the model calls tools over a tool corpus in a bounded,
cached dialogue, `cqabench.generation.open_book`; retriever = the BM25 retriever behind
WikiSearch, k = 1, the one article a search returns).

The rest of a cell's run reads these three records and nothing else of the command line:
`cell_inputs` (the files → questions and documents), `items` / `open_book` (the prompts),
`completions` (the engine), `cell_output` (the files written); `generate.run_cell` runs them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from cqabench.common.errors import ConfigError
from cqabench.generation.prompts import SETTINGS

# A plainly written k (`k5`, not `k05`): one folder per cell, so `rag-k05` is no second name of `rag-k5`.
PLAIN_K = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True, order=True)
class Cell:
    """One generation cell. Its fields are in the order of its folder, so cells sort as the grid
    lists them (dataset first, k last); `PATTERN` is that folder, for the rules' paths as for the
    planner's, and every other spelling of a cell (label, wildcards, parsed path) goes through it."""

    dataset: str
    split: str
    serialization: str
    retriever: str  # "none" for closed and oracle
    llm: str
    prompt: str
    setting: str
    k: int  # 0 for closed and oracle (oracle = all gold documents)

    # The cell's folder under generation/ and metrics/ (and its log and benchmark name): Snakemake
    # wildcards as the rules write them, and the label `cqabench` commands take.
    PATTERN: ClassVar[str] = "{dataset}/{split}/{serialization}/{retriever}/{llm}/{prompt}/{setting}-k{k}"

    @property
    def label(self) -> str:
        """The cell's folder (`PATTERN` filled in), the inverse of `from_label`; log lines and
        item cache labels name the cell by it."""
        return Cell.label_of(self)

    @staticmethod
    def texts_of(w: Any) -> dict[str, str]:
        """Each field's value as text, from anything with attribute access (Snakemake's Wildcards,
        a Cell) or a mapping: what a path names, before it is checked."""
        get = w.__getitem__ if isinstance(w, Mapping) else lambda name: getattr(w, name)
        return {name: str(get(name)) for name in CELL_FIELDS}

    @staticmethod
    def label_of(w: Any) -> str:
        """The folder that wildcards (or a Cell) name, their text as written (`rag-k02` stays so)."""
        return Cell.PATTERN.format(**Cell.texts_of(w))

    @staticmethod
    def parse(text: str) -> dict[str, str] | None:
        """The wildcard values of a cell folder (`musique/dev/pipe/bm25/llm/few-shot/rag-k2`) as
        text, or None when it is no cell folder (its k may still be no number: `problems` says so)."""
        m = _FOLDER.fullmatch(text)
        return m.groupdict() if m else None

    @classmethod
    def from_texts(cls, texts: Mapping[str, Any], where: str) -> Cell:
        """The cell of fields given as text (`texts_of`, `parse`); a k not written plainly is
        refused, naming `where`."""
        v = {name: str(texts[name]) for name in CELL_FIELDS}
        if not PLAIN_K.fullmatch(v["k"]):
            raise ConfigError(f"{where}: k {v['k']!r} is not a whole number written plainly (k0, k5)")
        return cls(
            v["dataset"],
            v["split"],
            v["serialization"],
            v["retriever"],
            v["llm"],
            v["prompt"],
            v["setting"],
            int(v["k"]),
        )

    @classmethod
    def from_wildcards(cls, w: Any, where: str = "cell") -> Cell:
        """The cell that Snakemake's wildcards name (or a mapping of them, or a Cell)."""
        return cls.from_texts(cls.texts_of(w), f"{where} {cls.label_of(w)}")

    @classmethod
    def from_label(cls, label: Any, where: str = "cell") -> Cell:
        """The cell a path label names: '{dataset}/{split}/{ser}/{retriever}/{llm}/{prompt}/{setting}-k{k}'."""
        texts = cls.parse(str(label))
        if texts is None:
            raise ConfigError(
                f"{where}: {label!r} is not '<dataset>/<split>/<serialization>/<retriever>/<llm>/<prompt>/<setting>-k<k>'"
            )
        return cls.from_texts(texts, f"{where} {label!r}")

    def as_dict(self) -> dict[str, Any]:
        """{field: value}, k a number: the cell columns of a fact-table row."""
        return dict(zip(CELL_FIELDS, astuple(self)))

    def problems(self) -> list[str]:
        """Why no config can make this cell ([] if one can): the setting decides its retriever and k.

        Closed-book and oracle show no retrieved documents (retriever none, k 0; oracle's k 0
        means all gold documents), RAG the top k of a retriever's run (k >= 1), open-book one
        WikiSearch article at a time (k 1). Which runs, depths and gold documents exist depends
        on the config: `cqabench.planner.cells.problems` adds those checks.
        """
        setting, retriever, k = self.setting, self.retriever, self.k
        if setting not in SETTINGS:
            return [f"setting {setting!r} is unknown; valid: {list(SETTINGS)}"]
        out = []
        if setting in ("closed", "oracle"):
            what = "closed-book shows no documents" if setting == "closed" else "oracle shows every gold document"
            if k != 0:
                out.append(f"{what}, so it has no k: its folder is {setting}-k0, not {setting}-k{k}")
            if retriever != "none":
                out.append(f"{what} and retrieves nothing: its retriever is 'none', not {retriever!r}")
            return out
        if retriever in ("", "none"):
            out.append(f"{setting} needs a retriever, not {retriever!r}")
        if setting == "rag" and k < 1:
            out.append("rag shows the top k documents: k must be at least 1")
        if setting == "open-book" and k != 1:
            out.append(f"open-book's WikiSearch shows one article: its folder is open-book-k1, not open-book-k{k}")
        return out

    def check(self) -> None:
        """Refuse a cell no config can make (`problems`), naming it and every reason."""
        why = self.problems()
        if why:
            raise ConfigError(f"cell {self.label}: " + "; ".join(why))


CELL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Cell))
# `PATTERN` as a regular expression: one named group per field, none crossing a "/" (the last
# "-k" of the last part splits setting from k, as `open-book-k1` needs).
_FOLDER = re.compile(
    "".join(
        re.escape(text) + (f"(?P<{name}>[^/]+)" if name else "")
        for text, name, _, _ in string.Formatter().parse(Cell.PATTERN)
    )
)


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
    open_book: Mapping[str, Any] | None = (
        None  # limits, max_new_tokens, retriever_settings (config.generation.open_book)
    )
