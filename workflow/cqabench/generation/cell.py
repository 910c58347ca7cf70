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

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.generation.prompts import SETTINGS


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
        dataset, split, serialization, retriever, llm, prompt = parts[:6]
        return cls(dataset, split, serialization, retriever, llm, prompt, setting, int(k))

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


def cell_label(cell: Cell) -> str:
    """The cell's path label, the inverse of `Cell.from_label` (log lines and item cache labels)."""
    return "/".join([cell.dataset, cell.split, cell.serialization, cell.retriever, cell.llm, cell.prompt, f"{cell.setting}-k{cell.k}"])


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
