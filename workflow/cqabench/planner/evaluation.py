"""The evaluation stage of a plan: where each answer cell's scores go, and which cells are counted.

Scoring a cell reads its predictions (`GenerationPlan`) and its split's answers, and records the
cell as metrics.json describes it; and a cell exists for the report once its scores (or the
predictions they are made from) do, in the grid or off it (`cqabench.planner.cells`). Both are
planned here, between generation and the report that counts the cells.
"""

from __future__ import annotations

from typing import Any

from cqabench.generation.cell import Cell
from cqabench.generation.llm.vllm_backend import RECORDED_ENGINE_OPTIONS
from cqabench.generation.prompts import file_hash
from cqabench.planner.cells import existing as existing_cells
from cqabench.planner.generation import OPEN_BOOK_LIMITS, GenerationPlan


class EvaluationPlan(GenerationPlan):
    """Answer metrics' paths, the evaluate_generation jobs, and every cell the report counts."""

    _existing: tuple[list[Cell], list[tuple[str, list[str]]]] | None = None  # _path_cells, once looked up

    def answer_metrics_dir(self) -> str:
        """The folder holding one folder per generation cell: answer metrics, per-question scores."""
        return f"{self.results}/metrics"

    def answer_metrics_file(self, cell: Any, name: str = "metrics.json") -> str:
        """A generation cell's answer metrics.json (or its per_question.parquet, `name`); `cell` is a
        Cell or the wildcards of one (`Cell.label_of`)."""
        return f"{self.answer_metrics_dir()}/{Cell.label_of(cell)}/{name}"

    def evaluation_targets(self) -> list[str]:
        return [self.answer_metrics_file(c) for c in self.generation_cells()]

    def evaluation_inputs(self, w: Any) -> dict[str, str]:
        """The evaluate_generation rule's inputs, after the same check as the generate rule's."""
        cell = self.checked_cell(w, self.answer_metrics_file(w))
        return {"predictions": self.generation_file(cell), "summary": self.generation_file(cell, "summary.json"),
                "queries": self.data_path(w.dataset, w.split, "queries"),
                "answers": self.data_path(w.dataset, w.split, "answers")}  # fmt: skip

    def generation_cell(self, w: Any) -> dict[str, Any]:
        """The cell as recorded in metrics.json (docs/architecture.md), everything that names it."""
        llm = self.llms[w.llm]
        cell = {
            "stage": "generation",
            "dataset": w.dataset,
            "split": w.split,
            "corpus": self.corpus_of(w.dataset),
            "relevance": self.relevance_of(w.dataset),
            "serialization": w.serialization,
            "retriever": w.retriever,
            "retriever_settings": self.run_settings(w.retriever) if w.retriever != "none" else {},
            "llm": w.llm,
            "backend": llm["backend"],
            "dtype": llm.get("dtype", "auto"),
            "prompt": w.prompt,
            "template_hash": file_hash(self.env.root / self.template_file(w.dataset, w.prompt, w.setting)),
            "setting": w.setting,
            "context_source": self.context_source(w.dataset, w.setting),
            "k": int(w.k),
            "max_questions": self.max_questions_of(w.dataset),
            "max_doc_chars": self.generation.get("max_doc_chars"),
            "oracle_distractors": self.distractors_of(w.dataset, w.setting),
            "sampling": {**(self.generation.get("sampling") or {}), **(llm.get("sampling") or {})},
            # vLLM's batch and context bounds, where the LLM sets them (vllm_<key> columns; none set
            # adds no key, so the cells of a config without them keep their params)
            **{f"vllm_{k}": llm[k] for k in RECORDED_ENGINE_OPTIONS if llm["backend"] == "vllm" and k in llm},
        }
        if w.setting == "open-book":  # the tool corpus, and the loop's limits as columns of every result row
            from cqabench.generation.agent.tools import SEARCH_DEPTH

            cell["corpus"] = self.open_book["corpus"]["name"]
            cell["retriever_settings"] = {**self.retriever_configs[w.retriever], "k": SEARCH_DEPTH}
            settings = self.open_book_settings(w)
            cell.update({f"open_book_{k}": settings[k] for k in OPEN_BOOK_LIMITS})
            if settings["max_new_tokens"] is not None:
                cell["sampling"]["max_new_tokens"] = settings["max_new_tokens"]
        return cell

    def _path_cells(self) -> tuple[list[Cell], list[tuple[str, list[str]]]]:
        if self._existing is None:
            self._existing = existing_cells(self)
        return self._existing

    def off_grid_cells(self) -> list[Cell]:
        """Cells outside the grid that exist under results/ (asked for by path) and the config can make."""
        return self._path_cells()[0]

    def uncounted_cells(self) -> list[tuple[str, list[str]]]:
        """(cell folder, why) of existing cells the config cannot make (left out of the fact table)."""
        return self._path_cells()[1]

    def all_cells(self) -> list[Cell]:
        """The grid, then every off-grid cell that exists: what the fact table and the report count."""
        return self.generation_cells() + self.off_grid_cells()
