"""Resumable generation: a job SIGKILLed half-way and started again calls the model only for the
items it had not finished, and ends with the same predictions as an uninterrupted run.

Real MuSiQue questions, the real SmolLM2-135M model (greedy), the `cqabench generate` command
as a subprocess, exactly as a Snakemake job runs it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import RAW
from cqabench.common.io import write_parquet
from cqabench.data.datasets import musique
from cqabench.generation.llm.convert import DEFAULT_SOURCE
from test_hf_backend import smollm2_dir  # noqa: F401  (session fixture: the converted model)

pytestmark = pytest.mark.engine

N = 10
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def queries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = musique.load({"questions": RAW / "musique" / "musique_train_100.jsonl"}, "train", limit=N)
    out = tmp_path_factory.mktemp("musique") / "queries.parquet"
    write_parquet(data.tables()["queries"], out)
    return out


def _command(queries: Path, models_dir: Path, cache: Path, out: Path) -> list[str]:
    settings = {
        "llm": {"backend": "hf", "source": DEFAULT_SOURCE, "dtype": "float32", "batch_size": 2},
        "sampling": {"temperature": 0, "max_new_tokens": 24},
        "max_questions": N,
        "models_dir": str(models_dir),
    }
    return [
        sys.executable,
        "-m",
        "cqabench.cli",
        "generate",
        "--dataset",
        "musique",
        "--split",
        "train",
        "--serialization",
        "pipe",
        "--llm",
        "smollm2-135m",
        "--prompt",
        "zero-shot-cot",
        "--setting",
        "closed",
        "--queries",
        str(queries),
        "--template",
        str(REPO / "resources/prompts/zero-shot-cot/multihop.txt"),
        "--settings",
        json.dumps(settings),
        "--threads",
        "2",
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--summary",
        str(out.with_suffix(".json")),
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "workflow")}


def _generated_qids(log: str) -> list[str]:
    """The items the model produced in this run (one log line per item the backend returned)."""
    return re.findall(r"generated item qid=(\S+)", log)


def _cached_qids(cache: Path) -> set[str]:
    """qids of the items published so far (each item file is whole or absent: no lock needed)."""
    if not cache.is_dir():
        return set()
    return {json.loads(p.read_text())["label"].split()[-1] for p in cache.glob("items/*/*.json")}


def _rows(path: Path) -> dict[str, dict]:
    return {r["qid"]: r for r in pq.read_table(path).to_pylist()}


def test_sigkill_then_resume_generates_only_the_missing_items(queries: Path, smollm2_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    models = smollm2_dir.parent
    # 1. the uninterrupted reference run
    ref_out = tmp_path / "ref" / "predictions.parquet"
    ref = subprocess.run(
        _command(queries, models, tmp_path / "ref-cache", ref_out),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ref.returncode == 0, ref.stderr[-2000:]
    assert len(_generated_qids(ref.stderr)) == N
    reference = _rows(ref_out)

    # 2. the same job, SIGKILLed once some batches are committed
    cache = tmp_path / "run-cache"
    out = tmp_path / "run" / "predictions.parquet"
    proc = subprocess.Popen(
        _command(queries, models, cache, out), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_cached_qids(cache)) >= 4:
                break
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    done_before = _cached_qids(cache)
    assert 0 < len(done_before) < N, f"kill came at {len(done_before)} of {N} items"
    assert not out.exists()  # the killed job left no partial predictions file

    # 3. started again: only the missing items go to the model
    again = subprocess.run(
        _command(queries, models, cache, out), env=_env(), capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-2000:]
    generated = _generated_qids(again.stderr)
    assert len(generated) == len(set(generated)) == N - len(done_before)
    assert set(generated).isdisjoint(done_before)
    rows = _rows(out)
    assert set(rows) == set(reference)
    assert {q for q, r in rows.items() if r["cached"]} == done_before
    for qid, row in rows.items():  # greedy: identical to the uninterrupted run, item by item
        assert row["raw_output"] == reference[qid]["raw_output"], qid
        assert row["prompt_hash"] == reference[qid]["prompt_hash"]
        assert (row["prediction"], row["parse_ok"]) == (reference[qid]["prediction"], reference[qid]["parse_ok"])
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["n_generated"] == N - len(done_before) and summary["n_cached"] == len(done_before)

    # 4. a third run finds everything cached and calls nothing
    third = subprocess.run(
        _command(queries, models, cache, out), env=_env(), capture_output=True, text=True, timeout=300
    )
    assert third.returncode == 0 and _generated_qids(third.stderr) == []
    assert all(r["cached"] for r in _rows(out).values())
