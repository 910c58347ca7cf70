"""Memory of the memory-hungry rules per attempt: a job killed for exceeding its memory is retried
with more, instead of failing the whole run (on a cluster, where memory is a hard limit).

The rules (prepare, pool_corpus, export_beir, index, search, decompose_search, convert_model,
generate_batch, generate) declare
`retries: MEMORY_RETRIES` and `mem_mb=lambda w, attempt: memory_mb(base, attempt)`; Snakemake
passes `attempt` (1 on the first try). Doubling keeps a badly sized base cheap to recover from: a
job that needs 3x its base runs on the third attempt, with at most 4x reserved.
"""

from __future__ import annotations

MEMORY_RETRIES = 2  # attempts 1, 2, 3 with 1x, 2x, 4x the base memory


def memory_mb(base_mb: int | float | str, attempt: int) -> int:
    """`base_mb` (the rule's size for a first attempt) doubled per retry: base * 2 ** (attempt - 1)."""
    base = int(float(base_mb))
    if base < 1:
        raise ValueError(f"base memory must be >= 1 MB, got {base_mb!r}")
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt!r}")
    return base * 2 ** (attempt - 1)
