"""The report stage of a plan: which paper tables there are, and which metric files each one reads.

The report is the last stage: it reads every cell's metrics, the grid's and the off-grid ones that
exist (`EvaluationPlan`), and gives each paper table of config/expected/*.yaml its own target
whose inputs are only the cells it can show (`cqabench.planner.table_targets`). Planning that
here keeps the earlier stages free of the report's files and settings.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from cqabench.common.config_defaults import configured
from cqabench.generation.cell import Cell
from cqabench.planner.evaluation import EvaluationPlan


class ReportPlan(EvaluationPlan):
    """Report settings, expected-number files, paper tables and the metric files they read."""

    _table_specs: dict[str, tuple[str, Any]] | None = None  # table_specs, once read
    _table_ids: list[str] | None = None  # expected_table_ids, once read

    def _read_report_config(self) -> None:
        self.report: dict[str, Any] = dict(self.config.get("report") or {})
        self.report_dir = f"{self.results}/report"
        self.paper_data = bool(configured(self.config, "report", "paper_data"))
        self.significance = {
            "correction": "holm",
            "alpha": 0.05,
            "baseline": "bm25",
            **self.report.get("significance", {}),
        }

    def _expand_report(self) -> None:
        """The expected-number files: `report.expected`, else every file of config/expected/."""
        self.expected_files = list(self.report.get("expected") or sorted(
            str(Path(p).relative_to(self.env.root)) for p in glob.glob(str(self.env.root / "config/expected/*.yaml"))
        ))  # fmt: skip

    def _report_problems(self) -> list[str]:
        out = []
        for path in self.report.get("expected") or []:
            if not (self.env.root / path).is_file():
                out.append(f"report.expected: {path!r} is not a file")
        return out

    def _baseline_problems(self) -> list[str]:
        """report.significance.baseline, when set, names a run (where there are runs)."""
        baseline = (self.report.get("significance") or {}).get("baseline")
        if baseline is not None and self.all_run_names and baseline not in self.all_run_names:
            # a typo would turn every row of retrieval_vs_baseline into "no ... run to compare with"
            return [f"report.significance.baseline: {baseline!r} names no run; runs: {self.all_run_names}"]
        return []

    def expected_table_ids(self) -> list[str]:
        """Every paper table's id, in the order of expected_files. Read once: the rules ask for it
        several times while Snakemake parses them, and a parse reads ~0.6 s of YAML."""
        if self._table_ids is None:
            import yaml

            ids: list[str] = []
            for path in self.expected_files:
                with open(self.env.root / path, encoding="utf-8") as fh:
                    ids += [str(t["id"]) for t in (yaml.safe_load(fh) or {}).get("tables", [])]
            self._table_ids = ids
        return list(self._table_ids)

    def metric_files(self) -> list[str]:
        """The metrics.json of every retrieval cell and every answer cell, the grid's and the off-grid
        ones that exist (`all_cells`); per-question files sit beside them."""
        return sorted(set(self.retrieval_targets()) | {self.answer_metrics_file(c) for c in self.all_cells()})

    def off_grid_metric_files(self) -> set[str]:
        """The metrics.json of the off-grid cells among `metric_files`: the fact table marks their
        rows (`off_grid`), so a slice of the grid can leave out what was asked for by path."""
        return {self.answer_metrics_file(c) for c in self.off_grid_cells()}

    def table_specs(self) -> dict[str, tuple[str, Any]]:
        """table id -> (its expected file, its TableSpec), in the order of expected_files."""
        if self._table_specs is None:
            from cqabench.report.expected import load_expected

            self._table_specs = {s.id: (path, s) for path in self.expected_files
                                 for s in load_expected(self.env.root / path)}  # fmt: skip
        return self._table_specs

    def table_file(self, table_id: str, ext: str = "md") -> str:
        """One file of a paper table under the report's tables folder (`md`, `html`, `caption.rst`, `summary.json`)."""
        return f"{self.report_dir}/tables/{table_id}.{ext}"

    def table_cells(self, table_id: str) -> dict[str, list[Any]]:
        """The cells a table needs: {"retrieval": [(ds, sp, ser, run)], "generation": [Cell]}."""
        from cqabench.planner.table_targets import cells_of

        spec = self.table_specs()[table_id][1]
        retrieval = [((ds, sp, ser, run), {"stage": "retrieval", "dataset": ds, "split": sp, "serialization": ser,
                                           "retriever": run, "corpus": self.corpus_of(ds), "relevance": self.relevance_of(ds)})
                     for ds, sp, ser, run in self.retrieval_cells()]  # fmt: skip
        generation = [(c, {"stage": "generation", **c.as_dict(), "backend": self.llms[c.llm]["backend"],
                           "corpus": self._generation_corpus(c), "relevance": self.relevance_of(c.dataset)})
                      for c in self.all_cells()]  # fmt: skip
        return {"retrieval": cells_of(spec, retrieval), "generation": cells_of(spec, generation)}

    def _generation_corpus(self, cell: Cell) -> str:
        return self.open_book["corpus"]["name"] if cell.setting == "open-book" else self.corpus_of(cell.dataset)

    def table_inputs(self, table_id: str) -> dict[str, list[str]]:
        """A table rule's inputs: its expected file and its cells' metric files; for a per-question
        table also their per-question files and the prepared splits (question type, skills, the
        gold table's size), the same files `aggregate` reads for those cells."""
        path, spec = self.table_specs()[table_id]
        cells = self.table_cells(table_id)
        metrics = sorted([self.retrieval_metrics_file(*c) for c in cells["retrieval"]]
                         + [self.answer_metrics_file(c) for c in cells["generation"]])  # fmt: skip
        inputs: dict[str, list[str]] = {"expected": [path], "metrics": metrics}
        if spec.source == "per_question":
            per_query = [
                self.retrieval_metrics_file(ds, sp, ser, run, "per_query.parquet")
                for ds, sp, ser, run in cells["retrieval"]
            ]
            per_question = [self.answer_metrics_file(c, "per_question.parquet") for c in cells["generation"]]
            inputs["per_question"] = sorted(per_query + per_question)
            splits = sorted(
                {(ds, sp) for ds, sp, _, _ in cells["retrieval"]} | {(c.dataset, c.split) for c in cells["generation"]}
            )
            inputs["data"] = [self.data_path(ds, sp, t) for ds, sp in splits for t in ("queries", "answers")]
        return inputs
