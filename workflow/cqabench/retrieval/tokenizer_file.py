"""A BERT model folder's tokenizer.json run by the `tokenizers` library alone, without transformers.

A dense job that searches or indexes with an exported ONNX graph needs only the tokenizer, and
`from transformers import AutoTokenizer` costs 5.8 s of CPU a process (transformers imports torch,
and sklearn through its generation utilities): most of such a search job's CPU time. For the BERT
tokenizers, what `AutoTokenizer` builds is the folder's tokenizer.json with the call's truncation
set and padding off (`PreTrainedTokenizerFast.set_truncation_and_padding`); this does the same,
and declines (returns None, so the caller loads `AutoTokenizer`) whenever the tokenizer_config.json
asks transformers for anything more: another class, a normalizer setting that `BertTokenizerFast`
would rebuild, added tokens that the tokenizer.json does not hold.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The classes whose fast tokenizer is the tokenizer.json as saved, checked token for token against
# AutoTokenizer in tests/retrieval/test_tokenizer_file.py.
BERT_CLASSES = ("BertTokenizer", "BertTokenizerFast")
# BertTokenizerFast's arguments that rebuild the saved normalizer when they differ from it, with
# their defaults and the normalizer's name for each.
NORMALIZER_ARGS = {"do_lower_case": (True, "lowercase"), "strip_accents": (None, "strip_accents"),
                   "tokenize_chinese_chars": (True, "handle_chinese_chars")}  # fmt: skip


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    return value.get("content") if isinstance(value, dict) else value


class TokenizerFile:
    """Called like a transformers tokenizer for what `encode_loop.tokenize_batches` asks of one:
    texts (or text pairs) with truncation to max_length, no padding, and `pad_token_id`."""

    def __init__(self, tokenizer: Any, pad_token_id: int | None, truncation_side: str) -> None:
        self._tokenizer = tokenizer
        self.pad_token_id = pad_token_id
        self._side = truncation_side
        tokenizer.no_padding()

    @classmethod
    def load(cls, folder: str | Path) -> TokenizerFile | None:
        """The folder's tokenizer when it is one that transformers would use as saved; else None."""
        folder = Path(folder)
        try:
            config = json.loads((folder / "tokenizer_config.json").read_text())
            text = (folder / "tokenizer.json").read_text()
            saved = json.loads(text)
        except (OSError, ValueError):
            return None
        if config.get("tokenizer_class") not in BERT_CLASSES:
            return None
        normalizer = saved.get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer":
            return None
        for arg, (default, field) in NORMALIZER_ARGS.items():
            if config.get(arg, default) != normalizer.get(field):
                return None
        held = {int(t["id"]): t["content"] for t in saved.get("added_tokens", [])}
        wanted = {int(i): _token(t) for i, t in (config.get("added_tokens_decoder") or {}).items()}
        if any(held.get(i) != content for i, content in wanted.items()):
            return None
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_str(text)
        pad = _token(config.get("pad_token"))
        pad_id = tokenizer.token_to_id(pad) if pad is not None else None
        if pad is not None and pad_id is None:
            return None
        return cls(tokenizer, pad_id, config.get("truncation_side", "right"))

    def __call__(
        self,
        text: Sequence[str],
        text_pair: Sequence[str] | None = None,
        *,
        truncation: bool | str = True,
        max_length: int,
    ) -> dict[str, list[list[int]]]:
        strategy = "longest_first" if truncation is True else str(truncation)
        self._tokenizer.enable_truncation(max_length, stride=0, strategy=strategy, direction=self._side)
        inputs: list[Any] = list(text) if text_pair is None else list(zip(text, text_pair, strict=True))
        encodings = self._tokenizer.encode_batch(inputs, add_special_tokens=True)
        return {
            "input_ids": [e.ids for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
        }


def max_positions(folder: str | Path) -> int | None:
    """config.json's max_position_embeddings, read as JSON; None when it is not written there."""
    try:
        value = json.loads((Path(folder) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None
