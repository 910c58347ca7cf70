"""An engine batch: the missing items of many cells of one model, generated in one engine session.

An engine start (about 20-45 s for vLLM on CPU) costs more than a sample cell's 30 questions, so
the workflow can let one job (`cqabench generate-batch`) fill the item cache for every cell of a
model; each cell's own `cqabench generate` job then finds its items cached and only assembles its
predictions. The cells are prepared as `cqabench.generation.generate.prepare_cell` prepares one;
the manifest says what was generated, per cell, for the log and the tests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.common.io import write_json
from cqabench.generation.cell import Cell, CellInputs, CellOptions, cell_label
from cqabench.generation.cell_output import generation_provenance
from cqabench.generation.completions import (
    SharedBackend,
    claim_chunk_for,
    generate_missing,
    item_labels,
    open_cache,
    order_for,
)
from cqabench.generation.generate import prepare_cell
from cqabench.generation.items import PreparedCell
from cqabench.generation.llm import model_identity
from cqabench.generation.llm.base import Backend, Completion, LlmSpec, Sampling
from cqabench.generation.open_book import close_toolboxes, run_open_book
from cqabench.generation.prompts import Template

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchCell:
    """One member of an engine batch: the cell, its files and its switches."""

    cell: Cell
    inputs: CellInputs
    options: CellOptions
    template: Template


def run_batch(
    members: Sequence[BatchCell],
    spec: LlmSpec,
    sampling: Sampling,
    cache_path: Path,
    manifest_path: Path,
    backend_factory: Callable[[], Backend] | None = None,
) -> dict[str, Any]:
    """Fill the item cache for many cells of one model in one engine session; write the manifest."""
    started = time.perf_counter()
    if not members:
        raise ConfigError("an engine batch needs at least one cell")
    identity = model_identity(spec)
    prepared = [prepare_cell(m.cell, spec, sampling, m.template, m.inputs, m.options, identity) for m in members]
    cached, generated, rounds, retries = _complete(prepared, spec, SharedBackend.for_spec(spec, backend_factory),
                                                   cache_path)
    manifest = {
        "llm": spec.name,
        "backend": spec.backend,
        "model": dict(identity),
        "cells": [_cell_entry(p, generated) for p in prepared],
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
        "provenance": generation_provenance(identity),
    }
    write_json(manifest, manifest_path)
    log.info("batch %s: %d cells, %d unique prompts, %d generated, %.1f s", spec.name, manifest["n_cells"],
             manifest["n_unique_prompts"], manifest["n_generated"], manifest["wall_time_s"])
    return manifest


def _complete(prepared: Sequence[PreparedCell], spec: LlmSpec, shared: SharedBackend, cache_path: Path,
              ) -> tuple[dict[str, Completion], dict[str, Completion], int, int]:
    """(cached, generated, open-book rounds, API retries): every cell's plain items, then every
    open-book dialogue of every cell, one batch per round, on the same engine."""
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
            ob_cached, ob_generated, rounds = run_open_book([p for p in prepared if p.dialogues is not None], shared,
                                                            cache, f"batch {spec.name}", order_for(spec),
                                                            claim_chunk_for(spec))
            cached.update(ob_cached)
            generated.update(ob_generated)
    finally:
        retries = shared.shutdown()
        close_toolboxes()
    return cached, generated, rounds, retries


def _cell_entry(p: PreparedCell, generated: Mapping[str, Completion]) -> dict[str, Any]:
    """A cell's line of the manifest: its items, and how many of them were generated or failed."""
    keys = _cell_keys(p)
    return {"cell": cell_label(p.cell), "n_items": len(p.items) + len(p.dialogues or []),
            "n_without_evidence": len(p.without_evidence),
            "n_generated": sum(1 for k in keys if k in generated and not generated[k].error),
            "n_failed": sum(1 for k in keys if k in generated and generated[k].error),
            "failed_qids": _failed_qids(p, generated)}


def _cell_keys(p: PreparedCell) -> list[str]:
    """Every cache key a cell used: its items', and every turn of its dialogues."""
    return [it.key for it in p.items] + [k for d in p.dialogues or [] for k, _ in d.completions]


def _failed_qids(p: PreparedCell, generated: Mapping[str, Completion]) -> list[str]:
    """The questions of a cell whose item (or a dialogue turn) the backend gave up on."""
    def bad(key: str) -> bool:
        return key in generated and bool(generated[key].error)

    return ([it.qid for it in p.items if bad(it.key)]
            + [d.qid for d in p.dialogues or [] if any(bad(k) for k, _ in d.completions)])
