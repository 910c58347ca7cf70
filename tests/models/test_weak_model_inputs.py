"""Issue 36 item 6, the model store: a fetched folder whose weights file was deleted (or cut
short) is no longer trusted.

Before: `list-models --check` said "fetched at <commit>" with rc 0, `fetch-models` answered
"present" without asking the hub, and a job failed inside transformers. Now the folder's
MANIFEST.json (the files and sizes the fetch wrote) is compared with what is there: the list
names the file and exits 1, the fetch fetches again, a job's `locate` names the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import workflow_workdir
from cqabench.cli import main
from cqabench.common.errors import ConfigError
from cqabench.models.fetch import FetchError, ModelRequest, fetch_model
from cqabench.models.store import damage, fetched_revision, locate

REPO = Path(__file__).resolve().parents[2]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": b"{}", "model.safetensors": b"weights" * 10}


def _fetched(models: Path) -> Path:
    """A folder as `fetch-models` leaves it: the files, MANIFEST.json, then REVISION."""
    folder = models / MINILM
    folder.mkdir(parents=True)
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    manifest = {"repo_id": MINILM, "revision": "main", "commit": COMMIT, "files": {n: len(d) for n, d in FILES.items()}}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest))
    (folder / "REVISION").write_text(COMMIT + "\n")
    return folder


def test_a_deleted_or_cut_weights_file_is_named(tmp_path: Path) -> None:
    folder = _fetched(tmp_path / "models")
    assert fetched_revision(folder) == COMMIT and damage(folder) is None
    (folder / "model.safetensors").write_bytes(b"cut")
    assert damage(folder) == f"model.safetensors in {folder} has 3 bytes, its MANIFEST.json lists 70"
    assert fetched_revision(folder) is None
    (folder / "model.safetensors").unlink()
    assert damage(folder) == f"model.safetensors is missing from {folder} (its MANIFEST.json lists it)"
    with pytest.raises(
        ConfigError,
        match=r"model 'sentence-transformers/all-MiniLM-L6-v2' is not in .*"
        r"\(model\.safetensors is missing from .*; fetch it on a node",
    ):
        locate(MINILM, "retrievers.hubmini.model", directory=tmp_path / "models")


def test_fetch_does_not_keep_a_damaged_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole folder is "present" without a hub request; a damaged one is fetched again (here the
    fetch then stops at HF_HUB_OFFLINE, before any request: it did not trust the folder)."""
    folder = _fetched(tmp_path / "models")
    assert fetch_model(ModelRequest(MINILM, "main"), tmp_path / "models").status == "present"
    (folder / "model.safetensors").unlink()
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(FetchError, match="HF_HUB_OFFLINE is set: fetching needs the network"):
        fetch_model(ModelRequest(MINILM, "main"), tmp_path / "models")


def test_models_list_check_exits_1_naming_the_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    work = workflow_workdir(tmp_path)
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["retrievers"]["hubmini"] = {"type": "dense", "family": "sentence-transformers", "model": MINILM,
                                       "revision": "main", "similarity": "cosine"}  # fmt: skip
    config["retrieval"]["retrievers"].append("hubmini")
    (work / "hub.yaml").write_text(yaml.safe_dump(config))
    folder = _fetched(work / "models")
    monkeypatch.chdir(work)
    assert main(["list-models", "--configfile", "hub.yaml", "--check"]) == 0
    assert f"{MINILM}  revision main  fetched at {COMMIT}" in capsys.readouterr().out
    (folder / "model.safetensors").unlink()
    assert main(["list-models", "--configfile", "hub.yaml", "--check"]) == 1
    out = capsys.readouterr()
    assert (
        f"{MINILM}  revision main  not whole: model.safetensors is missing from models/{MINILM} "
        "(its MANIFEST.json lists it); fetch it again  (retrievers.hubmini.model)"
    ) in out.out
    assert "1 not ready" in out.err
