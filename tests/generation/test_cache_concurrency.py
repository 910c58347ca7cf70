"""Two real `cqabench generate` processes sharing one item cache (issue 11, cause 5 and its acceptance test).

Two cells ask the same 20 closed-book prompts (two table serializations of one closed-book
question give one prompt). The model is the loopback OpenAI TEST DOUBLE (the external boundary)
in `vary` mode: a prompt answered a second time gets a different answer, as a sampling model
would, so a prompt generated twice shows up as two cells that disagree. Each test checks that
every prompt is answered once, and that both cells equal the cells of a serial run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cqabench.common.io import write_parquet
from cqabench.data.schema import CanonicalData, Query
from test_openai_backend import OpenAITestDouble, api_llm_config

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "resources/prompts/few-shot/multihop.txt"
N = 20
WORDS = [f"w{i:02d}" for i in range(N)]
KEYS = {"a": "sk-test-job-A", "b": "sk-test-job-B"}
SERIALIZATION = {"a": "pipe", "b": "markdown"}
COMPARED = (
    "qid",
    "prompt_hash",
    "raw_output",
    "prediction",
    "parse_ok",
    "parse_reason",
    "prompt_tokens",
    "output_tokens",
    "finish_reason",
    "context_docids",
    "setting",
    "k",
    "sampling",
    "template_hash",
)


@pytest.fixture(scope="module")
def queries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = CanonicalData(queries=[Query(f"q{i}", f"Which city hosts the thing {w}?") for i, w in enumerate(WORDS)])
    path = tmp_path_factory.mktemp("split") / "queries.parquet"
    write_parquet(data.tables()["queries"], path)
    return path


def _start(job: str, queries: Path, base_url: str, cache: Path, out_dir: Path) -> subprocess.Popen:
    """One cell's job as Snakemake runs it; each job has its own API key so the double tells them apart."""
    env_name = f"CQA_TEST_KEY_{job.upper()}"
    settings = {
        "llm": api_llm_config(base_url, api_key_env=env_name, max_concurrency=2, timeout_s=30),
        "sampling": {"max_new_tokens": 16},
        "max_questions": None,
    }
    out = out_dir / job / "predictions.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "cqabench.cli",
        "generate",
        "--dataset",
        "musique",
        "--split",
        "dev",
        "--serialization",
        SERIALIZATION[job],
        "--llm",
        "api",
        "--prompt",
        "few-shot",
        "--setting",
        "closed",
        "--queries",
        str(queries),
        "--template",
        str(TEMPLATE),
        "--settings",
        json.dumps(settings),
        "--cache",
        str(cache),
        "--out",
        str(out),
        "--summary",
        str(out.with_name("summary.json")),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), env_name: KEYS[job]}
    with open(out_dir / f"{job}.log", "w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen, out_dir: Path, job: str) -> None:
    try:
        code = proc.wait(timeout=180)
    finally:
        _stop(proc)  # a job past its time is not left running (issue 21)
    assert code == 0, (out_dir / f"{job}.log").read_text()[-3000:]


def _stop(*procs: subprocess.Popen) -> None:
    """Kill and reap every one of `procs` still running."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _cell(out_dir: Path, job: str) -> list[dict]:
    rows = pq.read_table(out_dir / job / "predictions.parquet").to_pylist()
    return [{k: r[k] for k in COMPARED} for r in rows]


def _summary(out_dir: Path, job: str) -> dict:
    return json.loads((out_dir / job / "summary.json").read_text())


def _items(cache: Path) -> int:
    return len(list((cache / "items").glob("*/*.json"))) if cache.is_dir() else 0


@pytest.fixture(scope="module")
def serial(queries: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """The reference: the two cells one after the other, each process alone with its own fresh model."""
    tmp_path = tmp_path_factory.mktemp("serial")
    out_dir = tmp_path / "serial"
    cells = {}
    with OpenAITestDouble(vary=True) as api:
        for job in "ab":
            _finish(_start(job, queries, api.base_url, tmp_path / "serial-cache", out_dir), out_dir, job)
            cells[job] = _cell(out_dir, job)
    assert set(api.answers.values()) == {1}
    return cells


def test_two_concurrent_jobs_generate_each_prompt_once_and_agree(queries: Path, serial: dict, tmp_path: Path) -> None:
    cache, out_dir = tmp_path / "cache", tmp_path / "concurrent"
    with OpenAITestDouble({"": ["slow"]}, slow_s=0.15, vary=True) as api:
        procs = {job: _start(job, queries, api.base_url, cache, out_dir) for job in "ab"}
        try:
            for job, proc in procs.items():
                _finish(proc, out_dir, job)
        finally:
            _stop(*procs.values())  # b too when a's check fails
    assert len(api.answers) == N and set(api.answers.values()) == {1}  # each prompt generated once
    assert sum(api.attempts.values()) == N
    generated = {job: _summary(out_dir, job)["n_generated"] for job in "ab"}
    assert sum(generated.values()) == N  # split between the jobs however the claims fell
    for job in "ab":
        assert _summary(out_dir, job)["n_cached"] == N - generated[job]
    a, b = _cell(out_dir, "a"), _cell(out_dir, "b")
    assert a == b  # the same prompt, the same stored completion, in both cells
    assert [r["raw_output"] for r in a] == [f"Final Answer: {w}" for w in WORDS]
    assert a == serial["a"] and b == serial["b"]


def test_a_job_killed_mid_generation_leaves_its_claims_to_the_other_which_finishes_them(
    queries: Path, serial: dict, tmp_path: Path
) -> None:
    """Job A answers 5 prompts, claims the rest and is SIGKILLed with 2 requests in flight; job B was
    waiting for A's claims, takes them over and generates the 15 missing prompts, each once; A
    started again (as Snakemake would) finds everything cached."""
    cache, out_dir = tmp_path / "cache", tmp_path / "killed"
    with OpenAITestDouble(vary=True, hold_after={KEYS["a"]: 5}) as api:
        try:
            a = _start("a", queries, api.base_url, cache, out_dir)
            deadline = time.monotonic() + 120
            while (_items(cache) < 5 or api.in_flight < 2) and time.monotonic() < deadline and a.poll() is None:
                time.sleep(0.05)
            assert _items(cache) == 5 and api.in_flight == 2, (out_dir / "a.log").read_text()[-2000:]
            b = _start("b", queries, api.base_url, cache, out_dir)
            while "waiting for 15 item(s) claimed by other job(s)" not in (out_dir / "b.log").read_text():
                assert b.poll() is None and time.monotonic() < deadline, (out_dir / "b.log").read_text()[-2000:]
                time.sleep(0.05)
            os.kill(a.pid, signal.SIGKILL)
            a.wait()
            _finish(b, out_dir, "b")
        finally:
            api.release.set()
            for proc in (a, b) if "b" in locals() else (a,):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert not (out_dir / "a" / "predictions.parquet").exists()
        assert len(api.answers) == N and set(api.answers.values()) == {1}  # each prompt generated once
        assert api.answers_by_auth == {KEYS["a"]: 5, KEYS["b"]: 15}
        summary_b = _summary(out_dir, "b")
        assert (summary_b["n_generated"], summary_b["n_cached"], summary_b["n_failed"]) == (15, 5, 0)
        _finish(_start("a", queries, api.base_url, cache, out_dir), out_dir, "a")  # the restarted job
        assert sum(api.answers.values()) == N  # ... asked nothing
    assert _summary(out_dir, "a")["n_cached"] == N
    a_cell, b_cell = _cell(out_dir, "a"), _cell(out_dir, "b")
    assert a_cell == b_cell
    assert a_cell == serial["a"] and b_cell == serial["b"]
    assert not list((cache / "claims").glob("*/*"))  # B swept A's stale claims as it took them over
