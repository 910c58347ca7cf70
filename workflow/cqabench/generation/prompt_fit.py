"""Prompts that cannot fit the model's context, found before an engine starts.

A GPU batch job spends minutes loading a 7B model; a prompt that cannot be answered within
`llms.<name>.max_model_len` (prompt tokens + max_new_tokens beyond it) would stop the job only
when the engine reaches it, hours in. Where the model's tokenizer can be loaded, every plain item
of the batch is counted first, with the engine's own tokenization
(`cqabench.generation.llm.vllm_backend.prompt_token_ids`), and the job stops naming each cell
and question. Where it cannot (or for an open-book turn, whose prompt grows as the dialogue runs),
the engine refuses the item itself with the same rule (`vllm_backend.fit_problem`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from cqabench.common.errors import ConfigError
from cqabench.generation.items import PreparedCell
from cqabench.generation.llm.base import Chat, LlmSpec
from cqabench.generation.llm.vllm_backend import fit_problem, prompt_token_ids

log = logging.getLogger(__name__)
SHOWN = 10  # offending prompts named in the message; the rest are counted


def overlong(prepared: Sequence[PreparedCell], max_model_len: int, count: Callable[[Chat], int]) -> list[str]:
    """ "<cell> question <qid>: <why>" for every plain item that cannot fit, in cell order.

    Items with the same prompt are counted once (the cache key names the prompt)."""
    out, seen = [], {}
    for p in prepared:
        for it in p.items if p.dialogues is None else ():
            if it.key not in seen:
                seen[it.key] = fit_problem(count(it.chat), p.sampling.max_new_tokens, max_model_len)
            if seen[it.key]:
                out.append(f"{p.cell.label} question {it.qid}: {seen[it.key]}")
    return out


def load_tokenizer(spec: LlmSpec) -> Any | None:
    """The model's tokenizer from its local folder (jobs run offline), or None if it cannot be loaded."""
    try:
        from transformers import AutoTokenizer

        kwargs = {"revision": spec.revision} if spec.revision and not spec.model_path else {}
        return AutoTokenizer.from_pretrained(spec.load_path, **kwargs)
    except Exception as exc:  # no transformers, no local files: the engine checks each item instead
        log.warning(
            "llm %s: tokenizer not loadable before the engine (%s: %s); prompts are checked per item by the engine",
            spec.name,
            type(exc).__name__,
            exc,
        )
        return None


def check_prompt_fit(
    prepared: Sequence[PreparedCell], spec: LlmSpec, tokenizer_loader: Callable[[LlmSpec], Any | None] = load_tokenizer
) -> None:
    """Refuse the batch if any plain prompt cannot fit `llms.<name>.max_model_len` (vllm, when set)."""
    limit = spec.options.get("max_model_len")
    if spec.backend != "vllm" or not limit:
        return
    tokenizer = tokenizer_loader(spec)
    if tokenizer is None:
        return
    bad = overlong(prepared, int(limit), lambda chat: len(prompt_token_ids(tokenizer, chat)))
    if bad:
        more = f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        raise ConfigError(
            f"llms.{spec.name}.max_model_len: {len(bad)} prompt(s) cannot fit, refused before the "
            "engine starts: " + "; ".join(bad[:SHOWN]) + more
        )
