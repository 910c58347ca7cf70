"""Issue 36, item 1: a file target asked for after a config change is built by the first command.

A real Snakemake run in a throw-away folder (the `workdir` fixture): TAT-QA's BM25 cell is built
with the default config, which leaves `results/sample/config.json` holding it; then a second
config file adds a BM25 variant (k1 1.5) and a fusion of it with BM25 (docs/retrieval.md's
example), and one command asks for both cells' metrics. When the resolved config was a rule's
output, that command ran the rule alone ("1 of 1 steps", rc 0) and left neither file: Snakemake
skipped every job it reached only through the config's `ancient()` edge. Now Snakemake's main
process rewrites the file before planning (cqabench.planner.resolved_config), and the same
command builds both cells, recording the settings the second config gave them. The README's
off-grid cell, asked for with the default config once the other one rewrote the file, plans its
generation and evaluation (a dry run).

TAT-QA's sample is the smallest searched corpus; the whole test runs 8 jobs (about a minute on
2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dry_runs import parse

CELLS = "results/sample/retrieval/tatqa/dev/pipe"
EXTRA = """\
retrievers:
  bm25_k15: {type: bm25, k1: 1.5, b: 0.4, fields: {title: 1.0, text: 1.0}, language: en, threads: 2}
retrieval:
  retrievers: [bm25, minilm, bm25_k15]
  pipelines:
    bm25-k15-rrf: {type: fusion, fuse: [bm25, bm25_k15], method: rrf, rrf_k: 60}
"""


def _snakemake(work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.snakemake
def test_target_after_config_change_is_built_by_the_first_command(workdir: Path) -> None:
    first = _snakemake(workdir, "--configfile", "config/config.yaml", "--", f"{CELLS}/bm25/metrics.json")
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads((workdir / "results/sample/config.json").read_text())["retrievers"].keys() == {"bm25", "minilm"}

    (workdir / "extra.yaml").write_text(EXTRA)
    targets = [f"{CELLS}/bm25_k15/metrics.json", f"{CELLS}/bm25-k15-rrf/metrics.json"]
    second = _snakemake(workdir, "--configfile", "config/config.yaml", "extra.yaml", "--", *targets)
    assert second.returncode == 0, second.stderr[-3000:]
    missing = [t for t in targets if not (workdir / t).is_file()]
    assert missing == [], f"asked for, not built: {missing}\n{second.stderr[-2000:]}"
    # index, search, evaluation of the variant; the fusion and its evaluation; nothing of BM25 again
    assert "5 of 5 steps (100%) done" in second.stderr, second.stderr[-2000:]

    variant = json.loads((workdir / targets[0]).read_text())["cell"]
    assert variant["retriever"] == "bm25_k15" and variant["retriever_settings"]["k1"] == 1.5
    fused = json.loads((workdir / targets[1]).read_text())["cell"]
    assert fused["retriever_settings"]["fuse"] == ["bm25", "bm25_k15"]
    # the file the jobs read holds the config they were planned with
    resolved = json.loads((workdir / "results/sample/config.json").read_text())
    assert resolved["retrievers"]["bm25_k15"]["k1"] == 1.5

    # and the same command again has nothing left to do
    again = _snakemake(workdir, "-n", "--configfile", "config/config.yaml", "extra.yaml", "--", *targets)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

    # The README's off-grid cell, once another config has rewritten results/sample/config.json:
    # its generation and evaluation are planned (the rule-made config planned itself alone).
    cell = "results/sample/metrics/tatqa/dev/pipe/bm25/smollm2-135m/few-shot-cot/rag-k5"
    off_grid = _snakemake(workdir, "-n", "--configfile", "config/config.yaml", "--", f"{cell}/metrics.json")
    assert off_grid.returncode == 0, off_grid.stderr[-3000:]
    planned = parse(off_grid.stdout, off_grid.stderr).counts
    assert planned["generate"] == 1 and planned["evaluate_generation"] == 1, planned
    assert "resolved_config" not in planned
