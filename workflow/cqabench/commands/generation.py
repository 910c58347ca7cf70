"""`cqabench` subcommands of the generation stage.

convert-model  GGUF source → HF model folder (+ provenance.json), once per model
generate       one generation cell → predictions.parquet + summary.json (resumable)
check-api-keys fail, naming the variable, when an openai-backend model has no key set
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from cqabench.commands import json_object
from cqabench.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (each sets `func`)."""
    c = sub.add_parser("convert-model", help="convert a GGUF model source into a HF model folder")
    c.add_argument("--source", required=True, help='"gguf-package:<package>/<file.gguf>" or "gguf:<path>"')
    c.add_argument("--dtype", default="float32")
    c.add_argument("--out", required=True, type=Path, help="model folder to write (replaced atomically)")
    c.set_defaults(func=run_convert)

    g = sub.add_parser("generate", help="generate answers for one cell (resumable through the item cache)")
    for name in ("dataset", "split", "serialization", "llm", "prompt"):
        g.add_argument(f"--{name}", required=True)
    g.add_argument("--setting", required=True, choices=["closed", "rag", "oracle"])
    g.add_argument("--retriever", default="none", help='"none" for closed and oracle')
    g.add_argument("--k", type=int, default=0, help="documents per question for rag; 0 for closed and oracle")
    g.add_argument("--queries", required=True, type=Path)
    g.add_argument("--corpus", type=Path, help="corpus.parquet (rag, oracle)")
    g.add_argument("--qrels", type=Path, help="qrels.parquet (oracle)")
    g.add_argument("--run", type=Path, help="retrieval run, Parquet/TREC/JSON (rag)")
    g.add_argument("--template", required=True, type=Path)
    g.add_argument(
        "--settings",
        default="{}",
        help='JSON: {"llm": <llms.NAME entry>, "sampling": {...}, "max_questions": int|null, '
        '"max_doc_chars": int|null, "models_dir": "results/models"}',
    )
    g.add_argument("--threads", type=int, default=0, help="CPU threads for the hf backend (0: torch's default)")
    g.add_argument("--cache", required=True, type=Path, help="item cache (SQLite); keep it outside rule outputs")
    g.add_argument("--out", required=True, type=Path, help="predictions.parquet")
    g.add_argument("--summary", type=Path, help="summary.json: per-cell totals")
    g.set_defaults(func=run_generate)

    k = sub.add_parser("check-api-keys", help="exit 1 naming the variable if an openai model's key is unset")
    k.add_argument("--llms", required=True, help="JSON: the llms config section (or the used part of it)")
    k.set_defaults(func=run_check_keys)


def run_convert(args: argparse.Namespace) -> int:
    from cqabench.llm.convert import convert_gguf

    prov = convert_gguf(args.source, args.out, args.dtype)
    print(f"{args.out}: {prov['gguf_file']} sha256 {prov['gguf_sha256'][:12]}, {prov['convert_seconds']} s")
    return 0


def missing_api_keys(llms: dict[str, Any]) -> list[tuple[str, str]]:
    """(model, variable) for each openai-backend model whose key variable is unset or empty."""
    from cqabench.llm import DEFAULT_API_KEY_ENV

    out = []
    for name, cfg in llms.items():
        if isinstance(cfg, dict) and cfg.get("backend") == "openai":
            env = str(cfg.get("api_key_env") or DEFAULT_API_KEY_ENV)
            if not os.environ.get(env):
                out.append((name, env))
    return out


def run_check_keys(args: argparse.Namespace) -> int:
    missing = missing_api_keys(json_object(args.llms, "--llms"))
    if missing:
        raise ConfigError(
            "API key(s) missing: "
            + "; ".join(f"llm {name!r} reads its key from ${env}, which is not set" for name, env in missing)
        )
    return 0


def run_generate(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see cqabench.llm.hf: before torch starts OpenMP
    from cqabench.generate import Cell, run_cell
    from cqabench.llm import llm_spec, sampling_for
    from cqabench.llm.openai_backend import read_api_key
    from cqabench.prompts import load_template

    settings = json_object(args.settings, "--settings")
    unknown = sorted(set(settings) - {"llm", "sampling", "max_questions", "max_doc_chars", "models_dir"})
    if unknown:
        raise ConfigError(f"--settings: unknown key(s) {unknown}")
    llm_cfg = settings.get("llm")
    if not isinstance(llm_cfg, dict):
        raise ConfigError('--settings needs "llm": the llms.<name> config entry')
    spec = llm_spec(args.llm, llm_cfg, settings.get("models_dir", "results/models"))
    if args.threads > 0:
        spec.options.setdefault("threads", args.threads)
    if spec.backend == "openai":
        read_api_key(spec)  # before any data is read: a missing key fails the job at once
    sampling = sampling_for(settings.get("sampling"), llm_cfg)
    cell = Cell(
        dataset=args.dataset,
        split=args.split,
        serialization=args.serialization,
        retriever=args.retriever,
        llm=args.llm,
        prompt=args.prompt,
        setting=args.setting,
        k=args.k,
    )
    summary = run_cell(
        cell,
        spec,
        sampling,
        load_template(args.template),
        queries_path=args.queries,
        out_path=args.out,
        cache_path=args.cache,
        corpus_path=args.corpus,
        qrels_path=args.qrels,
        run_path=args.run,
        max_questions=settings.get("max_questions"),
        max_doc_chars=settings.get("max_doc_chars"),
        summary_path=args.summary,
    )
    print(
        f"{args.out}: {summary['n_items']} items, {summary['n_cached']} cached, {summary['n_generated']} generated, "
        f"{summary['parse_failures']} parse failures, {summary['wall_time_s']} s"
    )
    return 0
