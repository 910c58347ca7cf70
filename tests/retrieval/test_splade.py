"""SPLADE: max-pooled log-saturated MLM weights, Lucene impact index, integer dot-product scores."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import models_fixtures as mf  # noqa: E402
from cqabench import retrieval as retrievers  # noqa: E402
from cqabench.common.errors import ConfigError  # noqa: E402
from cqabench.retrieval import splade  # noqa: E402

DOCS = mf.TOY_DOCS[:5]


@pytest.fixture(scope="session")
def lexical_mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny MLM whose logits are high only for the input token itself (a 'lexical SPLADE').

    Encoder layers are zeroed (residual pass-through), position/type embeddings removed, the
    MLM transform is the identity and the output bias sits below every cross-term logit, so a
    text's SPLADE vector is exactly its own word pieces: ranking becomes checkable by hand.
    """
    import torch
    from transformers import BertForMaskedLM

    out = tmp_path_factory.mktemp("splade") / "lexical"
    mf.tiny_mlm(out)
    model = BertForMaskedLM.from_pretrained(out)
    with torch.no_grad():
        emb = model.bert.embeddings
        emb.position_embeddings.weight.zero_()
        emb.token_type_embeddings.weight.zero_()
        words = torch.nn.functional.normalize(torch.randn_like(emb.word_embeddings.weight), dim=1) * 8
        emb.word_embeddings.weight.copy_(words)
        emb.LayerNorm.weight.fill_(1.0), emb.LayerNorm.bias.zero_()
        for layer in model.bert.encoder.layer:
            for lin in (layer.attention.output.dense, layer.output.dense):
                lin.weight.zero_(), lin.bias.zero_()
            for ln in (layer.attention.output.LayerNorm, layer.output.LayerNorm):
                ln.weight.fill_(1.0), ln.bias.zero_()
        head = model.cls.predictions
        head.transform.dense.weight.copy_(torch.eye(words.shape[1])), head.transform.dense.bias.zero_()
        head.transform.transform_act_fn = torch.nn.Identity()
        head.transform.LayerNorm.weight.fill_(1.0), head.transform.LayerNorm.bias.zero_()
        # LN(e_t) . e_t ~ 8*sqrt(32) = 45; cross terms are ~N(0, 8): bias -40 keeps self only.
        head.bias.fill_(-40.0)
        if getattr(head.decoder, "bias", None) is not None:
            head.decoder.bias.fill_(-40.0)
    model.config.hidden_act = "linear"
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def random_mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random weights, with the output bias lowered so that about 0.05% of the logits are
    positive: vectors get a few hundred terms, like a trained SPLADE (unshifted, half the
    vocabulary would be active and a query would exceed Lucene's clause limit)."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    out = mf.tiny_mlm(tmp_path_factory.mktemp("splade") / "random")
    model = BertForMaskedLM.from_pretrained(out).eval()
    with torch.no_grad():
        logits = model(
            **AutoTokenizer.from_pretrained(out)([d[2] for d in DOCS], padding=True, return_tensors="pt")
        ).logits
        model.cls.predictions.bias -= torch.quantile(logits.flatten()[::7], 0.9995)
    model.save_pretrained(out)
    return out


@pytest.mark.jvm
def test_scores_are_integer_dot_products_of_quantized_max_pooled_weights(random_mlm: Path, tmp_path: Path) -> None:
    """Reference: SPLADE max pooling computed here with plain torch, then the impact dot product."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    settings = {"type": "splade", "model": str(random_mlm), "doc_max_length": 16, "quantization": 100}
    retrievers.build_index(iter(DOCS), tmp_path / "idx", settings)
    query = "sweet fruit on the largest planet"
    got = dict(retrievers.search(tmp_path / "idx", [("q", query)], 5, settings)["q"])
    tok, mlm = AutoTokenizer.from_pretrained(random_mlm), AutoModelForMaskedLM.from_pretrained(random_mlm).eval()

    def vec(text: str, n: int) -> np.ndarray:
        b = tok([text], truncation=True, max_length=n, return_tensors="pt")
        with torch.no_grad():
            w = torch.log1p(torch.relu(mlm(**b).logits))[0]  # one text: no padding to mask
        return np.rint(w.max(dim=0).values.numpy() * 100)

    q = vec(query, 512)
    for docid, title, text in DOCS:
        want = float(q @ vec(f"{title} {text}", 16))
        assert got[docid] == pytest.approx(want, rel=1e-6), docid


def test_padding_is_masked_out_of_the_max(random_mlm: Path) -> None:
    """A short text encoded next to a long one (so padded) gets the weights it gets alone."""
    enc = splade.SpladeEncoder(str(random_mlm))
    short, long = "violin", "a very long sentence about many different things " * 5
    together = enc.weights([short, long], None, batch_size=2)
    alone = enc.weights([short], None, batch_size=1)
    assert np.allclose(together[0], alone[0], atol=1e-5)


@pytest.mark.jvm
def test_lexical_model_ranks_the_document_sharing_rare_terms_first(lexical_mlm: Path, tmp_path: Path) -> None:
    enc = splade.SpladeEncoder(str(lexical_mlm))
    terms = enc.term_maps(["violin bow"], None, 1, 100)[0]
    assert {"violin", "bow"} <= set(terms) and {"[CLS]", "[SEP]"} <= set(terms) and len(terms) == 4
    settings = {"type": "splade", "model": str(lexical_mlm)}
    retrievers.build_index(iter(DOCS), tmp_path / "idx", settings)
    res = retrievers.search(tmp_path / "idx", [("a", "violin bow"), ("b", "molten lava"), ("c", "zzzz")], 3, settings)
    assert res["a"][0][0] == "d4" and res["b"][0][0] == "d1"
    # Every doc shares [CLS]/[SEP] with any query, so all match; the rare terms decide the order.
    assert res["a"][0][1] > res["a"][1][1]


def test_bad_settings_and_missing_index(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model"):
        splade.resolve({"type": "splade"})
    with pytest.raises(ConfigError, match="unknown setting"):
        splade.resolve({"type": "splade", "model": "x", "max_len": 2})
    with pytest.raises(ConfigError, match="Lucene"):
        splade.search(tmp_path, [("q", "x")], 3, {"type": "splade", "model": "x"})
