"""ColBERTv2 late interaction through colbert-ai 0.2.22 (PLAID index, residual compression).

colbert-ai runs its work in spawned ranks and a multiprocessing manager; when a rank dies the
parent can wait forever. So every colbert-ai call here runs in a child Python process
(`python -m cqabench.retrieval.colbert index|search REQUEST.json`) with one rank and
`avoid_fork_if_possible`, i.e. no further processes, under a wall-clock `timeout_s`. A crash,
a non-zero exit or a timeout becomes a `ColbertError` carrying the tail of the child's log.

On CPU (`device: cpu`, the default) colbert-ai compiles its C++ helpers (segmented_maxsim,
decompress_residuals, ...) with ninja on first use and caches them under
~/.cache/torch_extensions: the first index/search on a machine takes ~2 minutes longer.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from cqabench.common.errors import ConfigError, CqaError, DataError
from cqabench.models.store import revision_settings
from cqabench.retrieval.base import Doc, QueryText, Results, check_positive_int, rank

SEARCH_ONLY_KEYS = frozenset(
    {
        "threads",
        "device",
        "timeout_s",
        "ncells",
        "centroid_score_threshold",
        "ndocs",
        "batch_size",
        "chunksize",
        "encode_jobs",
    }
)
# Run-time settings and what reads them: device (torch, colbert-ai's gpus), threads
# (OMP_NUM_THREADS of the worker), timeout_s (the worker's wall-clock limit), batch_size
# (colbert-ai index_bsize: passages per encoder batch while indexing; colbert-ai batches
# queries itself), chunksize (passages per colbert-ai index chunk: encoded, compressed and
# saved as one `N.codes.pt` / `N.residuals.pt` pair; None: colbert-ai's min(25,000, 1 + N);
# the chunk's float embeddings are the indexing job's largest buffer, and chunking changes
# the file layout, not what a search finds), ncells / centroid_score_threshold / ndocs (PLAID
# search; None: colbert-ai's defaults for k), encode_jobs (part jobs encoding the chunks, after
# one codec job: cqabench.retrieval.parts; the same index for any value).
_RUNTIME_DEFAULTS: dict[str, Any] = {
    "device": "cpu", "threads": None, "timeout_s": 6 * 3600, "batch_size": None, "chunksize": None,
    "ncells": None, "centroid_score_threshold": None, "ndocs": None, "encode_jobs": 1,
}  # fmt: skip
_PLAID_SEARCH = ("ncells", "centroid_score_threshold", "ndocs")
PLAID_DIR = "plaid"
_DEFAULTS: dict[str, Any] = {
    "nbits": 2,
    "doc_maxlen": 180,
    "query_maxlen": 32,
    "kmeans_niters": 4,
    "doc_format": "{title} | {text}",
}
# passages_per_part: read by the planner only (cqabench.retrieval.parts.part_count), never recorded
_KNOWN = {"type", "model", "revision", "passages_per_part", *_RUNTIME_DEFAULTS, *_DEFAULTS}
_LOG_TAIL = 25


class ColbertError(CqaError):
    """colbert-ai failed, crashed or timed out in its worker process."""


def resolve(settings: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(settings) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"colbert retriever: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(sorted(_KNOWN))}"
        )
    if not settings.get("model"):
        raise ConfigError("colbert retriever: set `model` (a ColBERTv2 checkpoint, e.g. colbert-ir/colbertv2.0)")
    out = {**_DEFAULTS, **{k: v for k, v in settings.items() if k in _DEFAULTS}, "model": settings["model"]}
    out.update(revision_settings(settings, ("model",), "colbert"))
    if out["nbits"] not in (1, 2, 4, 8):
        raise ConfigError(f"colbert nbits must be 1, 2, 4 or 8, got {out['nbits']!r}")
    for key in ("doc_maxlen", "query_maxlen", "kmeans_niters"):
        if not isinstance(out[key], int) or out[key] < 1:
            raise ConfigError(f"colbert setting {key} must be a positive integer, got {out[key]!r}")
    runtime = {**_RUNTIME_DEFAULTS, **{k: settings[k] for k in _RUNTIME_DEFAULTS if settings.get(k) is not None}}
    if runtime["device"] not in ("cpu", "cuda"):
        raise ConfigError(f"colbert device must be cpu or cuda, got {runtime['device']!r}")
    check_positive_int("colbert", runtime, "threads", "batch_size", "chunksize", "ncells", "ndocs", "encode_jobs")
    for key in ("timeout_s", "centroid_score_threshold"):
        value = runtime[key]
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0):
            raise ConfigError(f"colbert retriever: {key} must be a positive number, got {value!r}")
    return {**out, **runtime}


def _request(s: dict[str, Any], action: str, **extra: Any) -> dict[str, Any]:
    """What the worker is sent: the resolved settings it reads (PLAID search keys on search only)."""
    keep = {k: v for k, v in s.items() if k not in _PLAID_SEARCH or (action == "search" and v is not None)}
    return {**keep, **extra}


def worker_env(settings: dict[str, Any]) -> dict[str, str]:
    """The worker's environment: offline, on the asked device, with the asked thread count."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    # torch compiles colbert-ai's C++ helpers with `ninja` from PATH: the pip-installed one
    # sits next to this interpreter even when the virtualenv is not activated.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if settings["device"] == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # colbert-ai would otherwise pick up a GPU by itself
    if settings["threads"]:
        env["OMP_NUM_THREADS"] = str(int(settings["threads"]))
    return env


def _run_worker(action: str, request: dict[str, Any], settings: dict[str, Any], workdir: Path) -> None:
    """Run one colbert-ai job in a child process; never hang, never fail silently."""
    req = workdir / f"{action}-request.json"
    req.write_text(json.dumps(request), encoding="utf-8")
    log_path = workdir / f"{action}.log"
    if settings["device"] != "cpu":
        from cqabench.retrieval.encoders import require_device

        require_device(settings["device"], f"colbert {action}")  # before colbert-ai would fall back or hang
        if action in ("codec", "index"):
            codec_kmeans(settings["device"])  # the codec's k-means: refused here if it would run on the CPU
    env = worker_env(settings)
    timeout = float(settings["timeout_s"])
    cmd = [sys.executable, "-m", "cqabench.retrieval.colbert", action, str(req)]
    with open(log_path, "w", encoding="utf-8") as log:
        # Its own process group: a timeout or an interrupt kills the worker with the compiler and
        # ninja it started, so no orphan goes on holding a build folder.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                                start_new_session=True)  # fmt: skip
        try:
            returncode = proc.wait(timeout=timeout)
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise ColbertError(
                    f"colbert {action} ran past timeout_s={timeout:g}; log tail:\n{_tail(log_path)}"
                ) from None
            raise
    if returncode != 0:
        raise ColbertError(f"colbert {action} failed (exit {returncode}); log tail:\n{_tail(log_path)}")


def codec_kmeans(device: str) -> Callable[..., Any] | None:
    """The k-means colbert-ai's codec trains with on `device`: None (colbert-ai's own faiss one)
    on the CPU; on CUDA our torch k-means on that device (cqabench.retrieval.kmeans), or a
    ConfigError where the k-means would run on the CPU of a GPU job (issue 37: faiss-cpu turns
    colbert-ai's `gpu=True` into 0 GPUs, silently)."""
    if device == "cpu":
        return None
    import functools

    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"colbert codec: device {device!r} asked, but torch sees no CUDA GPU: the codec's k-means "
                          "would run on the CPU; run the job on a GPU node or set device: cpu")  # fmt: skip
    from colbert.indexing import collection_indexer

    if not hasattr(collection_indexer, "compute_faiss_kmeans"):
        import faiss

        if faiss.get_num_gpus() == 0:
            raise ConfigError("colbert codec: this colbert-ai has no compute_faiss_kmeans for the torch k-means to "
                              f"replace, and faiss {faiss.__version__} sees no GPU: the codec's k-means would run on "
                              "the CPU; pin colbert-ai 0.2.22 or install faiss-gpu")  # fmt: skip
        return None  # colbert-ai's own k-means, on faiss's GPU
    from cqabench.retrieval.kmeans import colbert_kmeans

    return functools.partial(colbert_kmeans, device=device)


def install_codec_kmeans(device: str) -> None:
    """Hand colbert-ai the codec k-means of `device` (worker side; `codec_kmeans`)."""
    kmeans = codec_kmeans(device)
    if kmeans is not None:
        from colbert.indexing import collection_indexer

        collection_indexer.compute_faiss_kmeans = kmeans  # CollectionIndexer._train_kmeans calls it by this name


# colbert-ai's C++ helpers for the CPU, compiled by torch on first use: (module, class) that loads each.
_CPU_EXTENSIONS = {
    "segmented_maxsim_cpp": ("colbert.modeling.colbert", "ColBERT"),
    "filter_pids_cpp": ("colbert.search.index_storage", "IndexScorer"),
    "decompress_residuals_cpp": ("colbert.search.index_storage", "IndexScorer"),
    "segmented_lookup_cpp": ("colbert.search.strided_tensor", "StridedTensor"),
}


def load_cpu_extensions() -> None:
    """Compile or load colbert-ai's CPU helpers before colbert-ai asks for them.

    torch guards each build folder with a plain `lock` file that it waits on while the file
    exists; a compile killed midway (a timed-out job, a cancelled test run) leaves it behind,
    and every later job on that machine then waits forever. Here the builds run under an
    flock, which the kernel releases when its holder dies: whoever holds it knows that no
    other cqabench worker is compiling, so any `lock` file left in those folders is stale.
    """
    import fcntl
    import importlib

    from torch.utils.cpp_extension import _get_build_directory

    folders = [Path(_get_build_directory(name, verbose=False)) for name in _CPU_EXTENSIONS]
    with open(folders[0].parent / "cqabench-colbert.flock", "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        for folder in folders:
            (folder / "lock").unlink(missing_ok=True)
        for module, cls in dict.fromkeys(_CPU_EXTENSIONS.values()):
            getattr(importlib.import_module(module), cls).try_load_torch_extensions(False)


def _tail(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-_LOG_TAIL:])


def passage_text(s: dict[str, Any], title: str, text: str) -> str:
    """One passage of collection.tsv: `doc_format` applied (text alone when there is no title),
    whitespace collapsed (TSV: no tabs or newlines inside)."""
    body = s["doc_format"].format(title=title, text=text) if title.strip() else text
    return " ".join(body.split())


def _write_collection(docs: Iterable[Doc], s: dict[str, Any], collection: Path, docids: Path | None) -> int:
    """collection.tsv (pids from 0) and, if asked, docids.txt; returns the passage count."""
    count = 0
    with contextlib.ExitStack() as stack:
        col = stack.enter_context(open(collection, "w", encoding="utf-8"))
        ids = stack.enter_context(open(docids, "w", encoding="utf-8")) if docids else None
        for docid, title, text in docs:
            if "\n" in docid:
                raise ConfigError(f"colbert index: docid {docid!r} holds a newline")
            col.write(f"{count}\t{passage_text(s, title, text)}\n")
            if ids:
                ids.write(docid + "\n")
            count += 1
    return count


def build_index(docs: Iterable[Doc], index_dir: Path, settings: dict[str, Any]) -> None:
    s = resolve(settings)
    index_dir = Path(index_dir).absolute()  # the worker runs in its own folder
    with tempfile.TemporaryDirectory(prefix="cqabench-colbert-") as tmp:
        collection = Path(tmp) / "collection.tsv"
        if not _write_collection(docs, s, collection, index_dir / "docids.txt"):
            raise ConfigError("colbert index: the corpus is empty")
        request = _request(s, "index", collection=str(collection), index_path=str(index_dir / PLAID_DIR), root=tmp)
        _run_worker("index", request, s, Path(tmp))


# ---- the index in parts (cqabench.retrieval.parts): codec job, N chunk-encoding jobs, gather ----
#
# colbert-ai's CollectionIndexer runs four steps in one process: setup (the plan: chunk count,
# number of centroids, from a sample of the corpus), train (k-means centroids and residual
# buckets: the codec), index (each chunk encoded and compressed with the codec) and finalize
# (chunk offsets, the centroid -> passage IVF, metadata.json). The first two need the whole
# corpus and run once (`train_codec`); index runs per chunk, so part i of N encodes its whole
# chunks with the shared codec (`encode_part`); finalize runs in the gather. Every step is
# colbert-ai's own method on the config `Indexer.index` builds, seeded as its launcher seeds,
# so the index equals the single job's, file by file (tests/retrieval/test_colbert.py).

CODEC_FILE = "codec.json"  # our record of the codec job: corpus rows, chunk size, colbert-ai's plan
CODEC_TENSORS = ("centroids.pt", "avg_residual.pt", "buckets.pt", "plan.json")
NEEDS_CODEC = True


def chunk_size(s: dict[str, Any], rows: int) -> int:
    """colbert-ai's chunk size for a corpus of `rows` passages (one rank): min(chunksize or 25,000, 1 + rows)."""
    return min(int(s["chunksize"] or 25_000), 1 + rows)


def part_chunk(settings: dict[str, Any], rows: int) -> int:
    return chunk_size(resolve(settings), rows)


def train_codec(docs: Iterable[Doc], out: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """colbert-ai's setup and train over the whole corpus: plan.json and the codec tensors in `out`."""
    s = resolve(settings)
    out = Path(out).absolute()  # the worker runs in its own folder
    with tempfile.TemporaryDirectory(prefix="cqabench-colbert-") as tmp:
        collection = Path(tmp) / "collection.tsv"
        rows = _write_collection(docs, s, collection, None)
        if not rows:
            raise ConfigError("colbert index: the corpus is empty")
        request = _request(s, "codec", collection=str(collection), index_path=str(out / PLAID_DIR), root=tmp)
        _run_worker("codec", request, s, Path(tmp))
    plan = json.loads((out / PLAID_DIR / "plan.json").read_text(encoding="utf-8"))
    record = {"rows": rows, "chunksize": chunk_size(s, rows), "num_chunks": int(plan["num_chunks"]),
              "num_partitions": int(plan["num_partitions"])}  # fmt: skip
    (out / CODEC_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def read_codec(codec: Path, rows: int, chunk: int) -> dict[str, Any]:
    """The codec job's record, checked against the corpus and chunk size the part jobs cut by."""
    path = Path(codec) / CODEC_FILE
    if not path.is_file():
        raise DataError(path, None, "-", "not a colbert codec (no codec.json); rerun its colbert_codec job")
    record = json.loads(path.read_text(encoding="utf-8"))
    for key, value in (("rows", rows), ("chunksize", chunk)):
        if record.get(key) != value:
            raise DataError(
                path, None, key, f"is {record.get(key)!r}, the parts need {value!r}; rerun the colbert_codec job"
            )
    return record


def _link_codec(codec: Path, plaid: Path) -> None:
    from cqabench.retrieval.parts import link_or_copy

    plaid.mkdir(parents=True, exist_ok=True)
    for name in CODEC_TENSORS:
        link_or_copy(Path(codec) / PLAID_DIR / name, plaid / name)


def encode_part(
    docs: Iterable[Doc], out: Path, settings: dict[str, Any], first_chunk: int, *, codec: Path
) -> dict[str, Any]:
    """Chunks first_chunk.. of the corpus, encoded and compressed with the shared codec; docids.txt."""
    s = resolve(settings)
    out = Path(out).absolute()  # the worker runs in its own folder
    with tempfile.TemporaryDirectory(prefix="cqabench-colbert-") as tmp:
        collection = Path(tmp) / "collection.tsv"
        count = _write_collection(docs, s, collection, out / "docids.txt")
        codec = Path(codec).absolute()
        record = json.loads((codec / CODEC_FILE).read_text(encoding="utf-8"))
        chunk = int(record["chunksize"])
        chunks = list(range(first_chunk, first_chunk + -(-count // chunk)))
        if count:
            plaid = out / PLAID_DIR
            _link_codec(codec, plaid)
            request = _request(s, "encode", collection=str(collection), index_path=str(plaid), root=tmp,
                               chunksize=chunk, first_chunk=first_chunk)  # fmt: skip
            _run_worker("encode", request, s, Path(tmp))
            for name in CODEC_TENSORS:
                (plaid / name).unlink()  # the gather takes them from the codec job
    return {"count": count, "chunks": chunks}


def gather(parts: list[tuple[Path, dict[str, Any]]], index_dir: Path, settings: dict[str, Any], *, codec: Path) -> None:
    """The PLAID index from the parts' chunks and the codec; colbert-ai's finalize builds the IVF."""
    import shutil

    from cqabench.retrieval.parts import link_or_copy

    s = resolve(settings)
    index_dir = Path(index_dir).absolute()  # the worker runs in its own folder
    rows = sum(int(rec["count"]) for _, rec in parts)
    if not rows:
        raise ConfigError("colbert index: the corpus is empty")
    codec = Path(codec).absolute()
    record = read_codec(codec, rows, int(parts[0][1]["chunk"]))
    chunks = [c for _, rec in parts for c in rec["chunks"]]
    if chunks != list(range(record["num_chunks"])):
        raise DataError(Path(codec) / CODEC_FILE, None, "num_chunks",
                        f"the plan has {record['num_chunks']} chunks, the parts hold {len(chunks)}; rerun the parts")  # fmt: skip
    plaid = index_dir / PLAID_DIR
    _link_codec(codec, plaid)
    with open(index_dir / "docids.txt", "wb") as ids:
        for folder, rec in parts:
            for c in rec["chunks"]:
                for name in (f"{c}.codes.pt", f"{c}.residuals.pt", f"doclens.{c}.json"):
                    link_or_copy(folder / PLAID_DIR / name, plaid / name)
                # finalize rewrites the chunk metadata (adds embedding_offset): a copy, never the part's file
                shutil.copyfile(folder / PLAID_DIR / f"{c}.metadata.json", plaid / f"{c}.metadata.json")
            with open(folder / "docids.txt", "rb") as fh:
                shutil.copyfileobj(fh, ids)
    with tempfile.TemporaryDirectory(prefix="cqabench-colbert-") as tmp:
        _run_worker("finalize", _request(s, "finalize", index_path=str(plaid), root=tmp, rows=rows), s, Path(tmp))


def search(index_dir: Path, queries: list[QueryText], k: int, settings: dict[str, Any]) -> Results:
    s = resolve(settings)
    index_dir = Path(index_dir).absolute()  # the worker runs in its own folder
    if not (index_dir / PLAID_DIR / "metadata.json").is_file():
        raise ConfigError(f"index {index_dir} holds no colbert PLAID index ({PLAID_DIR}/); rebuild it")
    results: Results = {qid: [] for qid, _ in queries}
    todo = [(qid, text) for qid, text in queries if text.strip()]
    if not todo:
        return results
    docids = (index_dir / "docids.txt").read_text(encoding="utf-8").split("\n")[:-1]
    with tempfile.TemporaryDirectory(prefix="cqabench-colbert-") as tmp:
        out = Path(tmp) / "ranking.json"
        request = _request(
            s,
            "search",
            index_path=str(index_dir / PLAID_DIR),
            root=tmp,
            queries=[text for _, text in todo],
            k=k,
            out=str(out),
        )
        _run_worker("search", request, s, Path(tmp))
        ranked = json.loads(out.read_text(encoding="utf-8"))
    for (qid, _), hits in zip(todo, ranked):
        results[qid] = rank(((docids[pid], score) for pid, score in hits), k)
    return results


# --- the worker side: runs in the child process only ---------------------------------------


def _colbert_config(req: dict[str, Any], **extra: Any) -> Any:
    from colbert.infra import ColBERTConfig

    if req.get("batch_size"):
        extra["index_bsize"] = int(req["batch_size"])
    return ColBERTConfig(
        nbits=req["nbits"],
        doc_maxlen=req["doc_maxlen"],
        query_maxlen=req["query_maxlen"],
        kmeans_niters=req["kmeans_niters"],
        gpus=0 if req["device"] == "cpu" else 1,
        avoid_fork_if_possible=True,
        **extra,
    )


class TsvPassages:
    """The passages of our collection.tsv, read from disk on every pass instead of held in a list.

    colbert-ai's `Collection(path=...)` loads every passage into a Python list (at 21M passages
    ~15 GB); indexing only needs `len` and passes in order (the k-means sample, then the
    chunks), so `Collection(data=TsvPassages(path))` streams them. Each line is parsed as
    colbert-ai's `load_collection` parses it, so the passages are the same strings.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with open(self.path, "rb") as fh:
            self._count = sum(1 for _ in fh)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        with open(self.path, encoding="utf-8") as fh:
            for line_idx, line in enumerate(fh):
                pid, passage, *rest = line.strip("\n\r ").split("\t")
                if int(pid) != line_idx or rest:
                    raise DataError(
                        self.path, f"line {line_idx + 1}", "pid", f"expected pid {line_idx} and one passage"
                    )
                yield passage

    def __getitem__(self, item: int) -> str:
        raise TypeError("TsvPassages streams; colbert-ai's indexing never indexes the collection by position")


def _collection(req: dict[str, Any]) -> Any:
    """The collection colbert-ai indexes: streamed, in chunks of `chunksize` passages if set."""
    from colbert.data import Collection

    collection = Collection(data=TsvPassages(req["collection"]))
    collection.path = req["collection"]  # what colbert-ai records as the collection's provenance
    if req.get("chunksize"):
        size = int(req["chunksize"])
        # Collection.cast accepts the class itself only (`type(obj) is cls`), so the chunk size
        # is set on the instance, not by a subclass; colbert-ai reads it through this method.
        collection.get_chunksize = lambda: min(size, 1 + len(collection))
    return collection


class _Rows:
    """A collection known by its length only: what colbert-ai's finalize reads of it."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return self.rows

    def __iter__(self) -> Iterator[str]:
        raise TypeError("the gather holds no passages; finalize needs the collection's length only")


def _indexing_step(action: str, req: dict[str, Any], checkpoint: str) -> None:
    """One of colbert-ai's CollectionIndexer steps on the config `Indexer.index` would run it with.

    `Indexer.index` configures the collection, the index name and bsize, then colbert-ai's
    launcher merges the run config, seeds every generator with 12345 and builds the
    CollectionIndexer; the same happens here before `setup`+`train` (codec), `index` (a part's
    chunks) or `finalize` (the gather), so each step computes what it computes in one job.
    """
    import torch
    from colbert import Indexer
    from colbert.data import Collection
    from colbert.indexing.collection_indexer import CollectionIndexer
    from colbert.indexing.index_saver import IndexSaver
    from colbert.infra import Run, RunConfig
    from colbert.infra.launcher import Launcher, set_seed

    path = Path(req["index_path"])
    path.mkdir(parents=True, exist_ok=True)
    if action == "finalize":
        collection = Collection(data=_Rows(int(req["rows"])))
    else:
        collection = _collection(req)
    indexer = Indexer(checkpoint=checkpoint, config=_colbert_config(req, index_path=str(path)))
    indexer.configure(collection=collection, index_name=path.name, resume=False)
    indexer.configure(bsize=64, partitions=None)
    config = type(indexer.config).from_existing(indexer.config, Launcher(None).run_config, RunConfig(rank=0))
    set_seed(12345)  # colbert-ai's run_process_without_mp, which `Indexer.index` ends in
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, config.gpus_[: config.nranks]))
    with Run().context(config, inherit_config=False), torch.inference_mode():
        if action == "finalize":
            step = CollectionIndexer.__new__(CollectionIndexer)  # finalize reads no model: none is loaded
            step.verbose, step.config, step.rank, step.nranks = 3, config, 0, 1
            step.collection, step.saver = Collection.cast(collection), IndexSaver(config)
            if not step._try_load_plan():
                raise DataError(path / "plan.json", None, "-", "no colbert-ai plan; rerun the colbert_codec job")
            step.finalize()
            return
        step = CollectionIndexer(config=config, collection=collection, verbose=3)
        if action == "codec":
            install_codec_kmeans(req["device"])
            step.setup()
            step.train([])
            return
        # action == "encode": this part's passages are chunks first_chunk.. of the whole corpus
        first, size = int(req["first_chunk"]), int(req["chunksize"])
        own = step.collection.enumerate_batches
        step.collection.enumerate_batches = lambda rank, chunksize=None: (
            (first + i, first * size + offset, passages) for i, offset, passages in own(rank=rank, chunksize=size)
        )
        step.index()


def _worker(action: str, req: dict[str, Any]) -> None:
    from colbert import Indexer, Searcher
    from colbert.infra import Run, RunConfig

    from cqabench.retrieval.encoders import resolve_model

    checkpoint = resolve_model(req["model"])
    gpus = 0 if req["device"] == "cpu" else 1
    if not gpus:
        load_cpu_extensions()
    run = RunConfig(nranks=1, gpus=gpus, root=req["root"], experiment="cqabench", avoid_fork_if_possible=True)
    with Run().context(run):
        if action in ("codec", "encode", "finalize"):
            _indexing_step(action, req, checkpoint)
            return
        if action == "index":
            install_codec_kmeans(req["device"])
            path = Path(req["index_path"])
            indexer = Indexer(checkpoint=checkpoint, config=_colbert_config(req, index_path=str(path)))
            indexer.index(name=path.name, collection=_collection(req), overwrite=True)
            return
        extra = {k: req[k] for k in _PLAID_SEARCH if req.get(k) is not None}
        searcher = Searcher(
            index=req["index_path"],
            checkpoint=checkpoint,
            config=_colbert_config(req, **extra),
            collection=["(not loaded)"],
            verbose=0,
        )
        k = int(req["k"])
        ranking = searcher.search_all({i: q for i, q in enumerate(req["queries"])}, k=k).todict()
        out = [
            [(int(pid), float(score)) for pid, _rank, score in ranking.get(i, [])] for i in range(len(req["queries"]))
        ]
        Path(req["out"]).write_text(json.dumps(out), encoding="utf-8")


if __name__ == "__main__":
    _worker(sys.argv[1], json.loads(Path(sys.argv[2]).read_text(encoding="utf-8")))
