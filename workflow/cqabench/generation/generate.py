"""One generation cell, from the command's settings to its files: what `cqabench generate` runs.

`run_cell` goes one way through the stage, one module per step:

1. `cqabench.generation.cell`: the cell's name, input files and switches;
2. `cqabench.generation.cell_inputs`: its questions and their documents (closed, rag, oracle);
3. `cqabench.generation.items` / `cqabench.generation.open_book`: their prompts, keyed for the
   item cache (`prepare_cell` picks which; the engine batch, `cqabench.generation.batch`, calls it too);
4. `cqabench.generation.completions`: the answers, from the item cache, else from one engine
   (`cqabench.generation.llm`) made only when something is missing;
5. `cqabench.generation.cell_output`: predictions.parquet and summary.json.

The job is resumable item by item: every answer is looked up in, and written to, the item cache
before the predictions file is assembled, so a rerun or a job killed and restarted calls the
model only for what is missing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.common.io import write_json
from cqabench.generation.cell import Cell, CellInputs, CellOptions
from cqabench.generation.cell_inputs import read_questions
from cqabench.generation.cell_output import generation_provenance, write_cell
from cqabench.generation.completions import SharedBackend, claim_chunk_for, generate_missing, open_cache, order_for
from cqabench.generation.items import PreparedCell, prepare_items, with_template_stops
from cqabench.generation.llm import model_identity
from cqabench.generation.llm.base import Backend, Completion, LlmSpec, Sampling
from cqabench.generation.open_book import close_toolboxes, prepare_dialogues, run_open_book
from cqabench.generation.prompts import Template

log = logging.getLogger(__name__)


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
    label = cell.label
    cached, generated, retries = _complete(
        prepared, spec, SharedBackend.for_spec(spec, backend_factory), cache_path, label
    )
    summary = write_cell(
        prepared,
        spec,
        identity,
        {**cached, **generated},
        set(cached),
        options,
        out_path,
        {"api_retries": retries, "cache": str(cache_path)},
    )
    summary["wall_time_s"] = round(time.perf_counter() - started, 3)
    if summary["n_failed"]:  # plain items and open-book dialogues alike (their rows say "failed")
        log.warning(
            "%s: %d of %d item(s) failed and are not cached (a rerun asks again): %s",
            label,
            summary["n_failed"],
            summary["n_items"],
            ", ".join(summary["failed_qids"][:20]),
        )
    summary["provenance"] = generation_provenance(identity)
    if summary_path is not None:
        write_json(summary, summary_path)
    log.info(
        "%s: %d items (%d cached), %d prompt + %d output tokens, %.1f s",
        label,
        summary["n_items"],
        summary["n_cached"],
        summary["prompt_tokens"],
        summary["output_tokens"],
        summary["wall_time_s"],
    )
    return summary


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
    sampling = with_template_stops(sampling, template)
    identity = identity if identity is not None else model_identity(spec)
    questions = read_questions(inputs, options)
    if cell.setting == "open-book":
        return prepare_dialogues(cell, spec, sampling, template, inputs, options, identity, questions)
    return prepare_items(cell, spec, sampling, template, inputs, options, identity, questions)


def _complete(
    prepared: PreparedCell,
    spec: LlmSpec,
    shared: SharedBackend,
    cache_path: Path,
    label: str,
) -> tuple[dict[str, Completion], dict[str, Completion], int]:
    """(cached, generated, API retries): the cell's completions, its items' or its dialogues' turns."""
    try:
        with open_cache(cache_path, spec, prepared.sampling) as cache:
            if prepared.dialogues is not None:
                cached, generated, _ = run_open_book(
                    [prepared], shared, cache, label, order_for(spec), claim_chunk_for(spec)
                )
            else:
                cached, generated, _ = generate_missing(
                    shared.get,
                    [(prepared.sampling, prepared.items)],
                    cache,
                    label,
                    order_for(spec),
                    claim_chunk=claim_chunk_for(spec),
                )
    finally:
        retries = shared.shutdown()
        close_toolboxes()
    return cached, generated, retries
