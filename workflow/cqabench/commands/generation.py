"""`cqabench` subcommands of the generation stage.

convert-model  GGUF source → HF model folder (+ provenance.json), once per model
generate       one generation cell → predictions.parquet + summary.json (resumable)
check-api-keys fail, naming the variable, when an openai-backend model has no key set
tool-search    the open-book agent's BM25 helper (JSON lines on stdin/stdout) for jobs whose
               environment has no Java (vLLM's); see cqabench.generation.agent.tools
cache          verify | drop | import: check the item cache, remove bad or selected items,
               copy an SQLite cache of an earlier version (docs/generation.md, "Recovery")
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqabench.commands import SERIALIZATION_HELP, json_object
from cqabench.common.errors import ConfigError

if TYPE_CHECKING:
    from cqabench.generation.cell import Cell

# The cell fields `generate` takes as plain flags, each with its help
CELL_FLAGS = {
    "dataset": "dataset name",
    "split": "the split, e.g. dev",
    "serialization": SERIALIZATION_HELP,
    "llm": "the model's name in the config's llms section",
    "prompt": "prompt strategy, e.g. few-shot-cot",
}


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (each sets `func`)."""
    c = sub.add_parser("convert-model", help="convert a GGUF model source into a HF model folder")
    c.add_argument("--source", required=True, help='"gguf-package:<package>/<file.gguf>" or "gguf:<path>"')
    c.add_argument("--dtype", default="float32", help="torch dtype of the written weights (default %(default)s)")
    c.add_argument("--out", required=True, type=Path, help="model folder to write (replaced atomically)")
    c.set_defaults(func=run_convert)

    g = sub.add_parser("generate", help="generate answers for one cell (resumable through the item cache)")
    for name, text in CELL_FLAGS.items():
        g.add_argument(f"--{name}", required=True, help=text)
    g.add_argument(
        "--setting",
        required=True,
        choices=["closed", "rag", "oracle", "open-book"],
        help="what the model is given: nothing, retrieved documents, the gold evidence, or search tools",
    )
    g.add_argument("--retriever", default="none", help='"none" for closed and oracle')
    g.add_argument("--k", type=int, default=0, help="documents per question for rag; 0 for closed and oracle")
    g.add_argument("--queries", required=True, type=Path, help="the split's queries.parquet")
    g.add_argument("--corpus", type=Path, help="corpus.parquet (rag, oracle)")
    g.add_argument("--qrels", type=Path, help="qrels.parquet (oracle)")
    g.add_argument("--run", type=Path, help="retrieval run, Parquet/TREC/JSON (rag)")
    g.add_argument("--tool-corpus", type=Path, help="corpus.parquet behind the open-book tools (open-book)")
    g.add_argument("--tool-index", type=Path, help="its BM25 index folder, for WikiSearch (open-book)")
    g.add_argument("--template", required=True, type=Path, help="resources/prompts/<strategy>/<family>.txt")
    g.add_argument(
        "--config",
        help="the run's resolved configuration (results/<name>/config.json): the cell's "
        "settings are the ones the workflow plans for it (what the workflow passes)",
    )
    g.add_argument(
        "--settings",
        help='instead of --config, the settings as JSON: {"llm": <llms.NAME entry>, "sampling": {...}, '
        '"max_questions": int|null, "max_doc_chars": int|null, "models_dir": "results/models", "oracle_distractors": int, '
        '"oracle_seed": int, "oracle_context": "gold"|"facts", '
        '"open_book": {max_steps, max_tool_chars, max_total_tokens, max_new_tokens, retriever_settings}}',
    )
    g.add_argument("--threads", type=int, default=0, help="CPU threads for the hf backend (0: torch's default)")
    g.add_argument(
        "--cache",
        required=True,
        type=Path,
        help="item cache folder (shared by the jobs of one model); keep it outside rule outputs",
    )
    g.add_argument("--out", required=True, type=Path, help="predictions.parquet")
    g.add_argument("--summary", type=Path, help="summary.json: per-cell totals")
    g.set_defaults(func=run_generate)

    b = sub.add_parser("generate-batch", help="fill the item cache for many cells of one model in one engine session")
    b.add_argument("--llm", required=True, help=CELL_FLAGS["llm"])
    b.add_argument(
        "--config",
        help="the run's resolved configuration (results/<name>/config.json): the batch is "
        "the model's planned cells, with their settings (what the workflow passes)",
    )
    b.add_argument("--settings", help="instead of --config: JSON, what every cell shares, as generate --settings")
    b.add_argument(
        "--cells",
        help='with --settings: JSON list of {"cell": "<dataset>/<split>/<serialization>/<retriever>/<llm>/<prompt>/<setting>-k<k>", '
        '"inputs": {queries, template, corpus?, qrels?, run?}, "settings": {per-cell keys of --settings}}',
    )
    b.add_argument(
        "--share",
        default="1-of-1",
        help="<i>-of-<n>: only the questions of share i of n (generation.batch_jobs: one job per share)",
    )
    b.add_argument("--threads", type=int, default=0, help="CPU threads for the hf backend (0: torch's default)")
    b.add_argument("--cache", required=True, type=Path, help="the model's item cache folder")
    b.add_argument("--out", required=True, type=Path, help="manifest.json: what the batch generated, per cell")
    b.set_defaults(func=run_generate_batch)

    t = sub.add_parser("tool-search", help="BM25 search helper of the open-book tools (JSON lines in, JSON lines out)")
    t.add_argument("--index", required=True, type=Path, help="BM25 index folder of the tool corpus")
    t.add_argument("--retriever-settings", required=True, help="JSON: the bm25 retriever's settings")
    t.set_defaults(func=run_tool_search)
    register_cache(sub)

    k = sub.add_parser("check-api-keys", help="exit 1 naming the variable if an openai model's key is unset")
    k.add_argument("--llms", required=True, help="JSON: the llms config section (or the used part of it)")
    k.set_defaults(func=run_check_keys)


def run_convert(args: argparse.Namespace) -> int:
    from cqabench.generation.llm.convert import convert_gguf

    prov = convert_gguf(args.source, args.out, args.dtype)
    print(f"{args.out}: {prov['gguf_file']} sha256 {prov['gguf_sha256'][:12]}, {prov['convert_seconds']} s")
    return 0


def missing_api_keys(llms: dict[str, Any]) -> list[tuple[str, str]]:
    """(model, variable) for each openai-backend model whose key variable is unset or empty."""
    from cqabench.generation.llm import DEFAULT_API_KEY_ENV

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


SETTINGS_KEYS = {
    "llm",
    "sampling",
    "max_questions",
    "max_doc_chars",
    "models_dir",
    "oracle_distractors",
    "oracle_seed",
    "oracle_context",
    "open_book",
    "allow_failed",
}
INCOMPLETE_EXIT = 3  # outputs written, but some items failed: the job fails so that the next run asks again


def incomplete_exit(what: str, n_failed: int, n_items: int, qids: list[str], allow: bool) -> int:
    """The exit status of a job whose items failed (0 when there are none, or they are allowed).

    A failed item is not cached, so the next run asks for it again; the job fails (after writing
    its outputs) so that Snakemake, which removes a failed job's outputs, does run it next time
    instead of saying "Nothing to be done" over a cell with holes (issue 21). With
    `generation.allow_failed_items` the cell is kept as it is, its failed items counted in
    summary.json, metrics.json (`n_failed`), the fact table and the report.
    """
    if not n_failed:
        return 0
    from cqabench.common import redact

    shown = ", ".join(qids[:10]) + (", ..." if len(qids) > 10 else "")
    kept = "kept (generation.allow_failed_items)" if allow else "incomplete"
    print(
        redact.redact(
            f"cqabench {what}: {'warning' if allow else 'error'}: {n_failed} of {n_items} item(s) failed "
            f"({shown}); they are not cached, and the successful ones are. The outputs are {kept}"
            + ("" if allow else "; run again (snakemake reruns this job) to ask for just the failed items")
        ),
        file=sys.stderr,
    )
    return 0 if allow else INCOMPLETE_EXIT


def _spec_and_sampling(llm: str, settings: dict[str, Any], threads: int, flag: str):
    """The model spec and sampling of a `--settings` object (one cell's, or a batch member's)."""
    from cqabench.generation.llm import llm_spec, sampling_for
    from cqabench.generation.llm.openai_backend import read_api_key

    unknown = sorted(set(settings) - SETTINGS_KEYS)
    if unknown:
        raise ConfigError(f"{flag}: unknown key(s) {unknown}; valid: {sorted(SETTINGS_KEYS)}")
    llm_cfg = settings.get("llm")
    if not isinstance(llm_cfg, dict):
        raise ConfigError(f'{flag} needs "llm": the llms.<name> config entry')
    spec = llm_spec(llm, llm_cfg, settings.get("models_dir", "results/models"))
    if threads > 0:
        spec.options.setdefault("threads", threads)
    if spec.backend == "openai":
        read_api_key(spec)  # before any data is read: a missing key fails the job at once
    return spec, sampling_for(settings.get("sampling"), llm_cfg)


def _cell_settings(args: argparse.Namespace) -> dict[str, Any]:
    """One cell's settings: planned from the resolved config (`--config`), or given (`--settings`)."""
    if (args.config is None) == (args.settings is None):
        raise ConfigError("give the cell's settings as --config FILE (the workflow's) or --settings JSON (one of them)")
    if args.settings is not None:
        return json_object(args.settings, "--settings")
    from cqabench.commands import config_arg, plan_of

    return plan_of(config_arg(args.config)).generation_settings(_cell_of(args))


def _cell_of(args: argparse.Namespace) -> Cell:
    """The cell the command line names (--dataset ... --k)."""
    from cqabench.generation.cell import Cell

    return Cell(
        args.dataset, args.split, args.serialization, args.retriever, args.llm, args.prompt, args.setting, args.k
    )


def _batch_of(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """(shared settings, member cells) of a batch: planned from `--config`, or `--settings` + `--cells`."""
    if args.config is not None:
        if args.settings is not None or args.cells is not None:
            raise ConfigError("give --config, or --settings with --cells, not both")
        from cqabench.commands import config_arg, plan_of

        plan = plan_of(config_arg(args.config))
        return plan.batch_shared_settings(args.llm), plan.batch_member_docs(args.llm)
    if args.settings is None or args.cells is None:
        raise ConfigError("give the batch as --config FILE (the workflow's) or as --settings JSON with --cells JSON")
    try:
        members = json.loads(args.cells)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--cells: not valid JSON ({exc.msg})") from None
    return json_object(args.settings, "--settings"), members


def _options(settings: dict[str, Any]):
    from cqabench.generation.cell import CellOptions

    return CellOptions(
        max_questions=settings.get("max_questions"),
        max_doc_chars=settings.get("max_doc_chars"),
        oracle_distractors=int(settings.get("oracle_distractors") or 0),
        oracle_seed=int(settings.get("oracle_seed") or 0),
        oracle_context=str(settings.get("oracle_context") or "gold"),
        open_book=settings.get("open_book"),
    )


def _path(value: Any) -> Path | None:
    return None if value in (None, "") else Path(value)


def run_generate(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see cqabench.generation.llm.hf: before torch starts OpenMP
    from cqabench.generation.cell import CellInputs
    from cqabench.generation.generate import run_cell
    from cqabench.generation.prompts import load_template

    settings = _cell_settings(args)
    spec, sampling = _spec_and_sampling(args.llm, settings, args.threads, "--config" if args.config else "--settings")
    cell = _cell_of(args)
    inputs = CellInputs(
        queries=args.queries,
        template=args.template,
        corpus=args.corpus,
        qrels=args.qrels,
        run=args.run,
        tool_corpus=args.tool_corpus,
        tool_index=args.tool_index,
    )
    summary = run_cell(
        cell,
        spec,
        sampling,
        load_template(args.template),
        inputs,
        out_path=args.out,
        cache_path=args.cache,
        options=_options(settings),
        summary_path=args.summary,
    )
    print(
        f"{args.out}: {summary['n_items']} items, {summary['n_cached']} cached, {summary['n_generated']} generated, "
        f"{summary['n_failed']} failed, {summary['parse_failures']} parse failures, {summary['wall_time_s']} s"
    )
    return incomplete_exit(
        "generate", summary["n_failed"], summary["n_items"], summary["failed_qids"], bool(settings.get("allow_failed"))
    )


def run_generate_batch(args: argparse.Namespace) -> int:
    """Every member cell's missing items in one engine session (see cqabench.generation.batch.run_batch)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from cqabench.generation.batch import BatchCell, run_batch
    from cqabench.generation.cell import Cell, CellInputs
    from cqabench.generation.prompts import load_template
    from cqabench.generation.shares import parse_share

    share = parse_share(args.share)
    shared, members_raw = _batch_of(args)
    if not isinstance(members_raw, list) or not members_raw:
        raise ConfigError("--cells: expected a non-empty JSON list of {cell, inputs, settings}")
    spec, sampling = _spec_and_sampling(args.llm, shared, args.threads, "--settings")
    members = []
    for i, raw in enumerate(members_raw):
        where = f"--cells[{i}]"
        if not isinstance(raw, dict) or set(raw) - {"cell", "inputs", "settings"} or not {"cell", "inputs"} <= set(raw):
            raise ConfigError(f"{where}: expected an object with cell, inputs (and settings)")
        cell = Cell.from_label(raw["cell"], where)
        if cell.llm != args.llm:
            raise ConfigError(f"{where}.cell: llm {cell.llm!r} is not the batch's llm {args.llm!r}")
        settings = {**shared, **(raw.get("settings") or {})}
        if _spec_and_sampling(args.llm, settings, args.threads, f"{where}.settings") != (spec, sampling):
            raise ConfigError(f"{where}.settings: model or sampling differ from --settings; one batch is one engine")
        files = raw["inputs"]
        unknown = sorted(set(files) - {"queries", "template", "corpus", "qrels", "run", "tool_corpus", "tool_index"})
        if unknown or not files.get("queries") or not files.get("template"):
            raise ConfigError(
                f"{where}.inputs: needs queries and template (corpus, qrels, run, tool_corpus, tool_index "
                f"optional); unknown {unknown}"
            )
        optional = {k: _path(v) for k, v in files.items() if k not in ("queries", "template")}
        inputs = CellInputs(Path(files["queries"]), Path(files["template"]), **optional)
        members.append(BatchCell(cell, inputs, _options(settings), load_template(inputs.template)))
    manifest = run_batch(members, spec, sampling, args.cache, args.out, share=share)
    print(
        f"{args.out}: {manifest['n_cells']} cells, {manifest['n_unique_prompts']} unique prompts, "
        f"{manifest['n_cached']} cached, {manifest['n_generated']} generated, {manifest['n_failed']} failed, "
        f"{manifest['wall_time_s']} s"
    )
    failed = [f"{c['cell']} {q}" for c in manifest["cells"] for q in c["failed_qids"]]
    return incomplete_exit("generate-batch", len(failed), manifest["n_items"], failed, bool(shared.get("allow_failed")))


def run_tool_search(args: argparse.Namespace) -> int:
    """Serve BM25 searches for an open-book job running in another environment (see cqabench.generation.agent.tools)."""
    from cqabench.generation.agent.tools import serve_search

    return serve_search(args.index, json_object(args.retriever_settings, "--retriever-settings"))


def register_cache(sub: argparse._SubParsersAction) -> None:
    """`cqabench cache verify | drop | import` (see cqabench.generation.llm.cache)."""
    c = sub.add_parser("cache", help="check or repair an LLM item cache folder")
    actions = c.add_subparsers(dest="action", required=True)
    v = actions.add_parser("verify", help="check every stored item; exit 1 if any is bad")
    v.add_argument("--cache", required=True, type=Path, help="the item cache folder (cache/llm/<llm>)")
    v.add_argument("--max-chars", type=int, help="also flag completions longer than this")
    v.set_defaults(func=run_cache_verify)
    d = actions.add_parser("drop", help="remove bad or selected items (they are generated again on the next run)")
    d.add_argument("--cache", required=True, type=Path, help="the item cache folder (cache/llm/<llm>)")
    d.add_argument("--bad", action="store_true", help="items `verify` flags")
    d.add_argument("--unverifiable", action="store_true", help="items written before checksums (asked again)")
    d.add_argument("--key", action="append", default=[], help="an item key (repeatable)")
    d.add_argument(
        "--label",
        action="append",
        default=[],
        help="a glob on the item's label '<cell> <qid>' (repeatable), e.g. 'musique/dev/pipe/*'; an item "
        "several cells asked for has one such line per cell, and any line may match",
    )
    d.add_argument("--stale", action="store_true", help="claims, job files and temporary files of jobs that are gone")
    d.add_argument("--max-chars", type=int, help="with --bad: also drop completions longer than this")
    d.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    d.set_defaults(func=run_cache_drop)
    i = actions.add_parser("import", help="copy the items of an SQLite cache of an earlier version")
    i.add_argument("--from", dest="source", required=True, type=Path, help="the old <llm>.sqlite file")
    i.add_argument("--cache", required=True, type=Path, help="the item cache folder to copy into")
    i.set_defaults(func=run_cache_import)


def _cache(args: argparse.Namespace):
    from cqabench.generation.llm.cache import CacheError, ItemCache

    if not args.cache.is_dir():
        raise CacheError(f"{args.cache}: no item cache folder here")
    if getattr(args, "max_chars", None) is not None and args.max_chars < 1:
        raise ConfigError(f"--max-chars: expected a positive integer, got {args.max_chars}")
    return ItemCache(args.cache, max_chars=getattr(args, "max_chars", None))


def run_cache_verify(args: argparse.Namespace) -> int:
    with _cache(args) as cache:
        records = list(cache.iter_records())
        bad = [r for r in records if r.problem]
        unverifiable = [r for r in records if r.note and not r.problem]
        leftovers = cache.leftovers()
    for r in bad:
        print(f"bad item {r.path}: {r.problem} (key {r.key})")
    for r in unverifiable:
        print(f"item {r.path}: {r.note} (key {r.key})")
    print(
        f"{args.cache}: {len(records)} item(s), {len(bad)} bad, {len(unverifiable)} unverifiable (written before "
        f"checksums), {len(leftovers)} leftover(s) of jobs that are gone"
    )
    if unverifiable:
        print(
            f"unverifiable items cannot be checked for edits: keep them, or regenerate them with "
            f"`cqabench cache drop --cache {args.cache} --unverifiable`",
            file=sys.stderr,
        )
    if bad:
        print(f"remove them with `cqabench cache drop --cache {args.cache} --bad`", file=sys.stderr)
        return 1
    return 0


def run_cache_drop(args: argparse.Namespace) -> int:
    import fnmatch

    from cqabench.generation.llm.cache import CacheError

    if not (args.bad or args.unverifiable or args.key or args.label or args.stale):
        raise ConfigError("cache drop: say what to drop: --bad, --unverifiable, --key, --label and/or --stale")
    with _cache(args) as cache:
        doomed = []
        for r in cache.iter_records():
            if (
                (args.bad and r.problem)
                or (args.unverifiable and r.note)
                or r.key in args.key
                or any(fnmatch.fnmatchcase(line, g) for line in r.label.splitlines() for g in args.label)
            ):
                doomed.append(r.path)
        if args.stale:
            doomed += cache.leftovers()
        for path in doomed:
            print(f"{'would drop' if args.dry_run else 'dropped'} {path}")
            if not args.dry_run:
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    raise CacheError(
                        f"{path}: cannot remove it ({exc.strerror}); make {args.cache} writable and run the drop again"
                    ) from None
    print(f"{args.cache}: {'would drop' if args.dry_run else 'dropped'} {len(doomed)} file(s)")
    return 0


def run_cache_import(args: argparse.Namespace) -> int:
    from cqabench.generation.llm.cache import CacheError, ItemCache, import_rows, read_sqlite

    if not args.source.is_file():
        raise CacheError(f"{args.source}: no such SQLite cache file")
    rows = read_sqlite(args.source)  # every row checked before the cache folder is opened or written
    with ItemCache(args.cache) as cache:
        imported, skipped = import_rows(rows, cache)
    print(f"{args.cache}: imported {imported} item(s) from {args.source}, skipped {skipped} empty or unreadable")
    return 0
