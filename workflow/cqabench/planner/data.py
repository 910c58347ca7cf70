"""The data stage of a plan: which raw files, prepared splits, corpora and exports exist, and where.

Every later stage reads prepared splits and corpora by the paths planned here, so the data stage
is planned first and knows nothing of retrieval or generation; its checks are the config's
datasets, corpora and raw files (`_data_problems`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cqabench.common.config_defaults import configured
from cqabench.common.layout import results_dir
from cqabench.data.datasets import DATASETS as DATASET_NAMES
from cqabench.data.datasets import has_gold_evidence, relevance_modes
from cqabench.planner.environment import Environment


class DataPlan:
    """Datasets, their splits and corpora: read from the config, checked, and given paths."""

    config: Mapping[str, Any]
    env: Environment

    def _read_data_config(self) -> None:
        c = self.config
        # Every output of this config lies under results/<name>/ (the rules' RESULTS), so two
        # configs never plan or overwrite each other's files (cqabench.common.layout).
        self.results: str = results_dir(str(c.get("name", "")))
        # the resolved configuration, rewritten by Snakemake's main process whenever it differs
        # (cqabench.planner.resolved_config): what a job reads to rebuild this plan
        # (`cqabench ... --config`) instead of JSON on its command line
        self.config_file = f"{self.results}/config.json"
        self.raw_dir: str = c["raw_dir"]
        self.datasets: list[str] = list(c["datasets"])
        self.serializations: list[str] = list(c["serializations"])
        self.pooled: dict[str, list[str]] = {n: list(m) for n, m in (c.get("corpora") or {}).items()}
        # The open-book agent's tool corpus: pooled like `corpora:` but searched by no dataset's retrieval.
        self.open_book: dict[str, Any] = dict((c.get("generation") or {}).get("open_book") or {})
        ob_corpus = self.open_book.get("corpus") or {}
        self.tool_corpora: dict[str, list[str]] = (
            {ob_corpus["name"]: list(ob_corpus.get("datasets") or [])} if ob_corpus.get("name") else {}
        )

    def _expand_data(self) -> None:
        """What the checked config gives: the corpora searched, and which splits have gold documents."""
        self.corpora = sorted({self.corpus_of(ds) for ds in self.datasets})
        self.gold_evidence = {(ds, sp): self._evidence_of(ds, sp) for ds in self.datasets for sp in self.splits(ds)}

    def splits(self, dataset: str) -> list[str]:
        return list(self.config["datasets"][dataset]["splits"])

    def corpus_of(self, dataset: str) -> str:
        """The corpus a dataset is searched in: explicit `corpus`, else its pooled corpus, else its own."""
        explicit = self.config["datasets"][dataset].get("corpus")
        if explicit:
            return explicit
        for name, members in self.pooled.items():
            if dataset in members:
                return name
        return dataset

    def corpus_members(self, corpus: str) -> list[str]:
        return self.pooled.get(corpus) or self.tool_corpora.get(corpus) or [corpus]

    def corpus_splits(self, dataset: str) -> list[str]:
        """The splits whose documents make up a dataset's corpus: `corpus_splits` (e.g. train + dev,
        as DEXTER pooled every paragraph of MuSiQue and 2WikiMultihopQA), else the evaluated splits."""
        return list(self.config["datasets"][dataset].get("corpus_splits") or self.splits(dataset))

    def data_path(self, dataset: str, split: str, table: str) -> str:
        return f"{self.results}/data/{dataset}/{split}/{table}.parquet"

    def corpus_path(self, corpus: str) -> str:
        return f"{self.results}/corpora/{corpus}/corpus.parquet"

    def beir_dir(self, dataset: str, serialization: str, split: str) -> str:
        """The export folder of one split (BEIR, TREC qrels, Pyserini collection, export.json)."""
        return f"{self.results}/beir/{dataset}/{serialization}/{split}"

    def raw_input(self, path: str) -> str:
        """A raw file from raw_dir when it is there, else the download rule's output."""
        local = Path(self.raw_dir) / path
        return str(local) if (self.env.root / local).exists() else f"{self.results}/raw/{path}"

    def raw_specs_by_path(self) -> dict[str, dict[str, Any]]:
        """Every configured raw file by its path (the download rule's spec), corpus-only splits too."""
        return {
            spec["path"]: spec
            for ds in self.datasets
            for split in dict.fromkeys(self.splits(ds) + self.corpus_splits(ds))
            for spec in self.config["datasets"][ds]["files"][split].values()
        }

    def data_targets(self) -> list[str]:
        targets = [
            self.data_path(ds, split, table)
            for ds in self.datasets
            for split in self.splits(ds)
            for table in ("queries", "corpus", "qrels", "answers")
        ]
        targets += [self.corpus_path(c) for c in self.corpora]
        if configured(self.config, "export_beir"):  # false: no second and third copy of each corpus
            targets += [
                self.beir_dir(ds, ser, split)
                for ds in self.datasets
                for split in self.splits(ds)
                for ser in self.serializations
            ]
        return targets

    def relevance_of(self, dataset: str) -> str:
        """The dataset's relevance mode (`datasets.<name>.relevance`, default `paper`): recorded in
        every result row of the dataset, since it decides the qrels (FinQA: also the corpus)."""
        return str(configured(self.config, "datasets", dataset, "relevance"))

    def relevance_arg(self, dataset: str) -> str:
        """`cqabench prepare --relevance MODE`, for every split (a corpus-only split too: FinQA's
        corpus depends on the mode), so a change of mode re-runs prepare and all downstream."""
        return f"--relevance {shlex.quote(self.relevance_of(dataset))}"

    def question_selection_args(self, dataset: str, split: str) -> str:
        """`cqabench prepare` flags of a dataset's explicit question selection (limit, hops,
        answerable_only), for the splits it evaluates; a corpus-only split is prepared whole."""
        spec = self.config["datasets"][dataset]
        if split not in self.splits(dataset):
            return ""
        args = []
        if spec.get("limit") is not None:
            args.append(f"--limit {int(spec['limit'])}")
        if spec.get("hops"):
            args.append("--hops " + " ".join(str(int(h)) for h in spec["hops"]))
        if spec.get("answerable_only"):
            args.append("--answerable-only")
        return " ".join(args)

    def prepare_inputs(self, w: Any) -> dict[str, str]:
        return {
            role: self.raw_input(spec["path"])
            for role, spec in self.config["datasets"][w.dataset]["files"][w.split].items()
        }

    @staticmethod
    def prepare_file_args(w: Any, input: Mapping[str, str]) -> str:
        return " ".join(f"--file {shlex.quote(f'{role}={path}')}" for role, path in input.items())

    def _evidence_of(self, ds: str, sp: str) -> tuple[bool, str]:
        """(bool, reason): whether the split has gold documents an oracle prompt can show."""
        files = {
            role: self.env.root / self.raw_input(spec["path"])
            for role, spec in self.config["datasets"][ds]["files"][sp].items()
        }
        return has_gold_evidence(ds, files, self.relevance_of(ds))

    def _data_problems(self) -> list[str]:
        out = []
        ds_list = self.datasets
        for name, members in self.pooled.items():
            unknown = [m for m in members if m not in ds_list]
            if unknown:
                out.append(f"corpora.{name}: datasets {unknown} are not configured; configured: {ds_list}")
            if name in ds_list:
                out.append(f"corpora.{name}: a pooled corpus may not take a dataset's name")
        corpus_names = sorted(set(ds_list) | set(self.pooled))
        for ds, spec in self.config["datasets"].items():
            files = spec.get("files") or {}
            for split in spec["splits"]:
                if split not in files:
                    out.append(f"datasets.{ds}: split {split!r} has no entry under files")
            missing = [sp for sp in spec.get("corpus_splits") or [] if sp not in files]
            if missing:
                out.append(f"datasets.{ds}: corpus_splits {missing} have no entry under files")
            modes = relevance_modes(ds) if ds in DATASET_NAMES else {}
            mode = configured(self.config, "datasets", ds, "relevance")
            if modes and mode not in modes:
                out.append(
                    f"datasets.{ds}.relevance: {mode!r} is not a relevance mode of {ds}; "
                    f"valid: {', '.join(modes)} (paper: DEXTER §3.1 and the original toolkit)"
                )
            explicit = spec.get("corpus")
            if explicit and explicit not in corpus_names:
                out.append(
                    f"datasets.{ds}.corpus: {explicit!r} is neither a configured dataset nor a pooled corpus "
                    f"(corpora:); valid: {corpus_names}"
                )
            for split in sorted(set(spec["splits"]) | set(spec.get("corpus_splits") or [])):
                for role, raw in (files.get(split) or {}).items():
                    if not self._raw_obtainable(raw):
                        out.append(
                            f"datasets.{ds}.files.{split}.{role}: {raw['path']!r} is neither under raw_dir "
                            f"({self.raw_dir}) nor in {self.results}/raw, and has no url to download it from"
                        )
        return out

    def _raw_obtainable(self, raw: Mapping[str, Any]) -> bool:
        root = self.env.root
        return (
            bool(raw.get("url"))
            or (root / self.raw_dir / raw["path"]).exists()
            or (root / self.results / "raw" / raw["path"]).exists()
        )
