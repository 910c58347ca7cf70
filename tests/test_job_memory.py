"""Memory-hungry rules retry with more memory: the helper, a real Snakemake run that uses it, and
the workflow's rules declaring it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cqabench.job_memory import MEMORY_RETRIES, memory_mb

ROOT = Path(__file__).resolve().parents[1]
HUNGRY = ("prepare", "pool_corpus", "export_beir", "index", "encode_part", "gather_index", "search", "decompose_search", "convert_model",
          "generate_batch", "generate")


def test_memory_doubles_per_attempt() -> None:
    assert [memory_mb(16000, a) for a in (1, 2, 3)] == [16000, 32000, 64000]
    assert memory_mb("4000", 2) == 8000  # config values may arrive as strings
    with pytest.raises(ValueError):
        memory_mb(4000, 0)
    with pytest.raises(ValueError):
        memory_mb(0, 1)


def test_snakemake_retries_a_failed_job_with_more_memory(tmp_path: Path) -> None:
    # A job that "runs out of memory" (exits 1) unless it was given 4000 MB: it succeeds on its
    # third attempt, and each attempt records the memory Snakemake reserved for it.
    (tmp_path / "Snakefile").write_text(
        "from cqabench.job_memory import MEMORY_RETRIES, memory_mb\n\n"
        "rule hungry:\n"
        "    output: 'done.txt'\n"
        "    retries: MEMORY_RETRIES\n"
        "    resources:\n"
        "        mem_mb=lambda w, attempt: memory_mb(1000, attempt),\n"
        "    shell: 'echo {resources.mem_mb} >> attempts.txt; test {resources.mem_mb} -ge 4000 && touch {output}'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "workflow"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--quiet", "progress"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "attempts.txt").read_text().split() == ["1000", "2000", "4000"]
    assert MEMORY_RETRIES == 2


def test_the_memory_hungry_rules_declare_the_retries() -> None:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        workflow = api.workflow(resource_settings=ResourceSettings(), config_settings=ConfigSettings(),
                                storage_settings=StorageSettings(), snakefile=ROOT / "Snakefile", workdir=ROOT)
        rules = {r.name: r for r in workflow._workflow.rules}
    # `_restart_times` is the rule's `retries:` (the public property also needs executor settings)
    assert {name: rules[name]._restart_times for name in HUNGRY} == {name: MEMORY_RETRIES for name in HUNGRY}
    for name in HUNGRY:
        assert "mem_mb" in rules[name].resources
