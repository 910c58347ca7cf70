"""`cqabench` subcommands of the data stage: download, prepare, pool-corpus, export-beir."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cqabench.commands import SERIALIZATION_HELP, whole_number
from cqabench.common.errors import ConfigError

# export-beir's flags, each with its help
BEIR_INPUTS = {
    "corpus": "the corpus.parquet",
    "queries": "the split's queries.parquet",
    "qrels": "the split's qrels.parquet",
    "split": "the split's name (BEIR's qrels/<split>.tsv)",
    "serialization": SERIALIZATION_HELP,
    "out-dir": "the export folder, to write",
}


def _files(pairs: list[str]) -> dict[str, Path]:
    files = {}
    for pair in pairs:
        role, sep, path = pair.partition("=")
        if not sep:
            raise ConfigError(f"--file expects ROLE=PATH, got {pair!r}")
        files[role] = Path(path)
    return files


def _spec(text: str) -> dict:
    """The `--spec` JSON object; a typo in it is a one-line error naming `--spec`, not a traceback."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--spec: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
            f'expected {{"url": ..., "sha256": ..., "member": ...}}, got {text!r}'
        ) from None
    if not isinstance(spec, dict):
        raise ConfigError(f"--spec: expected a JSON object {{url, sha256, member}}, got {type(spec).__name__} {text!r}")
    return spec


def _download(args: argparse.Namespace) -> int:
    from cqabench.data.download import fetch

    spec = _spec(args.spec)
    fetch(spec.get("url"), Path(args.out), args.name, args.raw_dir, spec.get("sha256"), spec.get("member"))
    return 0


def _prepare(args: argparse.Namespace) -> int:
    from cqabench.data.prepare import prepare

    prepare(
        args.dataset,
        args.split,
        _files(args.file),
        Path(args.out_dir),
        limit=args.limit,
        hops=args.hops,
        answerable_only=args.answerable_only,
        relevance=args.relevance,
    )
    return 0


def _pool(args: argparse.Namespace) -> int:
    from cqabench.data.corpora import pool

    pool([Path(p) for p in args.corpus], Path(args.out))
    return 0


def _beir(args: argparse.Namespace) -> int:
    from cqabench.data.beir import export

    export(Path(args.corpus), Path(args.queries), Path(args.qrels), args.split, args.serialization, Path(args.out_dir))
    return 0


def _check_config(args: argparse.Namespace) -> int:
    """Snakemake reads `--configfile` before any code of ours runs, and its YAML error has no
    position ("Config file is not valid JSON or YAML"): this names the file, line and column."""
    from cqabench.planner.config_files import load_file

    for path in args.files:
        if not Path(path).is_file():
            raise ConfigError(f"{path}: no such file")
        load_file(path)
        print(f"{path}: valid YAML, no duplicated key (`snakemake -n --configfile {path}` checks the rest)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("download", help="fetch and verify one raw file")
    p.add_argument("--name", required=True, help="path of the file relative to the raw directory")
    p.add_argument("--spec", required=True, help="JSON {url, sha256, member}")
    p.add_argument("--raw-dir", default="resources/raw", help="where raw files are kept (default %(default)s)")
    p.add_argument("--out", required=True, help="the verified file, to write")
    p.set_defaults(func=_download)

    p = sub.add_parser("prepare", help="raw files of one (dataset, split) -> canonical Parquet")
    p.add_argument("--dataset", required=True, help="dataset name (its loader in cqabench.data)")
    p.add_argument("--split", required=True, help="the split to prepare, e.g. dev or test")
    p.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="ROLE=PATH",
        help="a raw file and its role for the loader (repeatable)",
    )
    p.add_argument("--limit", type=whole_number(1), default=None, help="explicit cap on the number of questions (>= 1)")
    p.add_argument("--hops", type=int, nargs="+", default=None, help="MuSiQue: keep questions with these hop counts")
    p.add_argument("--answerable-only", action="store_true", help="MuSiQue: drop unanswerable questions")
    p.add_argument(
        "--relevance",
        default="paper",
        help="relevance mode of the dataset's loader (its RELEVANCE; default paper: DEXTER §3.1 / the toolkit)",
    )
    p.add_argument("--out-dir", required=True, help="folder of the canonical Parquet files, to write")
    p.set_defaults(func=_prepare)

    p = sub.add_parser("pool-corpus", help="pool prepared corpora into one deduplicated corpus")
    p.add_argument("--corpus", action="append", required=True, help="a prepared corpus.parquet (repeatable)")
    p.add_argument("--out", required=True, help="the pooled corpus.parquet, to write")
    p.set_defaults(func=_pool)

    p = sub.add_parser(
        "export-beir",
        help="one export folder: BEIR files, TREC qrels, Pyserini JsonCollection, export.json (or only export.json, with why)",
    )
    for name, text in BEIR_INPUTS.items():
        p.add_argument(f"--{name}", required=True, help=text)
    p.set_defaults(func=_beir)

    p = sub.add_parser(
        "check-config",
        help="a config file's YAML syntax, tabs and duplicated keys, with file, line "
        "and column (Snakemake's own message has no position)",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="config file(s) to check")
    p.set_defaults(func=_check_config)
