"""Encoding a corpus in N part jobs, then building the index from the parts (scatter / gather).

`passages_per_part: P` (dense, SPLADE and ColBERT retrievers) splits the encoding of a corpus of
D passages into N = ceil(D / P) jobs (`encode_jobs: N` asks for N whatever the corpus), each
schedulable on its own GPU or SLURM allocation; N never exceeds the corpus' chunks (below), so
no part is empty (`part_count`, from the corpus size the plan knows). Part i of N encodes one contiguous range of
corpus rows and writes it, atomically, as its own folder; the gather job (the `index` rule's
output) builds the index from the N folders in order. N changes how the work is scheduled, never
what the index holds: the index built from N parts is the one a single job builds, byte for byte.

That equality is why a part's range is made of whole *chunks* (the dense `shard_size`, SPLADE's
encoder flush of 1024 documents) rather than of N equal row counts: the encoder batches texts
longest-first inside a chunk, and int8 dynamic quantization and padding make a vector depend,
in its last bits, on which texts share its batch. With the chunks cut where the single job cuts
them, every batch is the one the single job encodes. So with C = ceil(rows / chunk) chunks,
part i holds chunks [i*C//N, (i+1)*C//N); with N <= C every part holds a chunk (a part of a
corpus smaller than the plan knew is still allowed empty: its folder records zero documents).

The row count comes from the Parquet footer inside the job, so planning (which may run before
the corpus exists) needs only i and N. Every part records what it covers (`part.json`); the
gather refuses parts that do not tile the corpus, were made with other settings, or repeat a
document id across parts, naming the part folder and the field.

ColBERT's parts share a codec (k-means centroids and residual buckets over a sample of the whole
corpus), so one `colbert_codec` job (`train_codec`) runs before them; its chunk size is
colbert-ai's min(chunksize or 25,000, 1 + rows), known from the corpus' row count.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from cqabench import retrieval as retrievers
from cqabench.common.errors import ConfigError, DataError
from cqabench.common.io import atomic_dir, write_json
from cqabench.data.datasets.common import IdDigests
from cqabench.data.documents import corpus_rows
from cqabench.retrieval.base import write_settings
from cqabench.retrieval.jobs import read_documents

log = logging.getLogger(__name__)

PART_FILE = "part.json"
DOCIDS_FILE = "docids.txt"  # every part: its document ids in corpus order, one a line


def part_rows(num_rows: int, chunk: int, part: int, of: int) -> tuple[int, int]:
    """Rows [start, stop) of part `part` (0-based) of `of`, cut at multiples of `chunk`."""
    if of < 1 or not 0 <= part < of:
        raise ConfigError(f"part {part} of {of}: need 0 <= part < of and of >= 1")
    if chunk < 1:
        raise ConfigError(f"chunk size must be positive, got {chunk}")
    chunks = -(-num_rows // chunk)
    lo, hi = part * chunks // of, (part + 1) * chunks // of
    return min(lo * chunk, num_rows), min(hi * chunk, num_rows)


def encode_jobs(settings: Mapping[str, Any]) -> int:
    """How many part jobs `encode_jobs` asks for (1: the single `index` job)."""
    value = settings.get("encode_jobs", 1)
    return 1 if value is None else int(value)


def is_sharded(settings: Mapping[str, Any]) -> bool:
    """Whether the index is gathered from part jobs: `passages_per_part` set, or `encode_jobs` > 1."""
    target = settings.get("passages_per_part")
    if target is not None and settings.get("encode_jobs") is not None:
        raise ConfigError(
            "set passages_per_part (a size target: the number of parts follows the corpus) "
            "or encode_jobs (a fixed number of parts), not both"
        )
    if target is not None and (not isinstance(target, int) or isinstance(target, bool) or target < 1):
        raise ConfigError(f"passages_per_part must be a positive integer, got {target!r}")
    return target is not None or encode_jobs(settings) > 1


def part_count(settings: Mapping[str, Any], documents: int | None) -> int:
    """Part jobs for a corpus of `documents` rows: ceil(documents / passages_per_part), or
    `encode_jobs`; never more than the corpus' chunks (`part_chunk`), so no part is empty, and at
    least 1. `documents` None (a corpus of unknown size): `encode_jobs` as given."""
    fixed = encode_jobs(settings)
    if documents is None:
        return fixed
    chunk = max(1, int(_module(settings).part_chunk(retrievers.resolve(settings), documents)))
    chunks = -(-documents // chunk)
    target = settings.get("passages_per_part")
    wanted = -(-documents // int(target)) if target is not None else fixed
    return max(1, min(wanted, chunks))


def _module(settings: Mapping[str, Any]) -> ModuleType:
    module = retrievers.family(settings)
    if not hasattr(module, "encode_part"):
        raise ConfigError(
            f"retriever type {settings.get('type')!r} cannot be encoded in parts (encode_jobs is for dense, splade, colbert)"
        )
    return module


def needs_codec(settings: Mapping[str, Any]) -> bool:
    """Whether the parts share a codec trained first over the whole corpus (ColBERT)."""
    return bool(getattr(retrievers.family(settings), "NEEDS_CODEC", False))


def _codec_arg(module: ModuleType, codec: str | Path | None) -> dict[str, Path]:
    if not getattr(module, "NEEDS_CODEC", False):
        if codec is not None:
            raise ConfigError("--codec is for colbert parts only")
        return {}
    if codec is None:
        raise ConfigError("colbert parts need --codec: the colbert_codec job's folder")
    return {"codec": Path(codec)}


def train_codec(corpus: str | Path, serialization: str, settings: Mapping[str, Any], out: str | Path) -> dict[str, Any]:
    """The codec every part of a ColBERT index shares, trained over the whole corpus (atomic)."""
    started = time.perf_counter()
    module = _module(settings)
    if not getattr(module, "NEEDS_CODEC", False):
        raise ConfigError(f"retriever type {settings.get('type')!r} has no codec to train")
    resolved = retrievers.resolve(settings)
    with atomic_dir(out) as tmp:
        record = module.train_codec(read_documents(corpus, serialization), tmp, resolved)
        write_settings(tmp, resolved)
    log.info("trained the codec for %d documents in %.1f s", record["rows"], time.perf_counter() - started)
    return record


def encode_corpus_part(
    corpus: str | Path, serialization: str, settings: Mapping[str, Any], part: int, of: int, out: str | Path,
    codec: str | Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Encode part `part` of `of` of the corpus into folder `out` (all of it appears, or nothing)."""
    started = time.perf_counter()
    module = _module(settings)
    extra = _codec_arg(module, codec)
    resolved = retrievers.resolve(settings)
    total = corpus_rows(corpus)
    chunk = int(module.part_chunk(resolved, total))
    if extra:
        module.read_codec(extra["codec"], total, chunk)
    start, stop = part_rows(total, chunk, part, of)
    log.info("encode part %d of %d: rows [%d, %d) of %d (chunks of %d)", part, of, start, stop, total, chunk)
    with atomic_dir(out) as tmp:
        docs = read_documents(corpus, serialization, (start, stop))
        meta = module.encode_part(docs, tmp, resolved, start // chunk, **extra)
        if int(meta["count"]) != stop - start:
            raise DataError(
                corpus, f"rows {start}-{stop}", "-", f"read {meta['count']} documents, expected {stop - start}"
            )
        record = {
            "part": part, "of": of, "rows": [start, stop], "corpus_rows": total, "chunk": chunk,
            "serialization": serialization, "signature": retrievers.signature(resolved), **meta,
        }  # fmt: skip
        write_json(record, tmp / PART_FILE)
        write_settings(tmp, resolved)
    log.info("encoded part %d of %d (%d documents) in %.1f s", part, of, stop - start, time.perf_counter() - started)
    return record


def read_part(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / PART_FILE
    if not path.is_file():
        raise DataError(path, None, "-", "not an encode part (no part.json); rerun its encode-part job")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(path, None, "-", f"not valid JSON ({exc.msg}); rerun its encode-part job") from None


def check_parts(
    corpus: str | Path, serialization: str, settings: Mapping[str, Any], parts: Sequence[str | Path]
) -> list[dict[str, Any]]:
    """The parts' records, after checking they tile this corpus, in order, with these settings."""
    if not parts:
        raise ConfigError("gather: no parts given")
    total = corpus_rows(corpus)
    want_sig = retrievers.signature(settings)
    records, at = [], 0
    for i, folder in enumerate(parts):
        rec = read_part(folder)
        path = Path(folder) / PART_FILE
        expected = {"part": i, "of": len(parts), "corpus_rows": total, "serialization": serialization}
        for key, value in expected.items():
            if rec.get(key) != value:
                raise DataError(path, f"part {i}", key, f"is {rec.get(key)!r}, expected {value!r} (parts given in order 0..{len(parts) - 1} of this corpus)")  # fmt: skip
        if rec.get("signature") != want_sig:
            diff = sorted(
                k
                for k in set(want_sig) | set(rec.get("signature") or {})
                if want_sig.get(k) != (rec.get("signature") or {}).get(k)
            )
            raise DataError(
                path, f"part {i}", "signature", f"made with other settings (differs in: {', '.join(diff)}); rerun it"
            )
        start, stop = rec["rows"]
        if start != at:
            raise DataError(path, f"part {i}", "rows", f"starts at row {start}, expected {at}")
        at = stop
        records.append(rec)
    if at != total:
        raise DataError(
            Path(parts[-1]) / PART_FILE, f"part {len(parts) - 1}", "rows", f"ends at row {at}, the corpus has {total}"
        )
    _check_unique_docids(corpus, parts)
    return records


def _check_unique_docids(corpus: str | Path, parts: Sequence[str | Path]) -> None:
    """No id in two parts (each part checked its own): 8-byte digests, then the real strings."""
    digests = IdDigests()
    for folder in parts:
        with open(Path(folder) / DOCIDS_FILE, encoding="utf-8") as fh:
            for line in fh:
                digests.add(line.rstrip("\n"))
    candidates = digests.repeated()
    if not candidates:
        return
    seen: dict[str, Path] = {}
    for folder in parts:
        with open(Path(folder) / DOCIDS_FILE, encoding="utf-8") as fh:
            for line in fh:
                docid = line.rstrip("\n")
                if IdDigests.digest(docid) in candidates:
                    if docid in seen:
                        raise DataError(
                            corpus, docid, "docid", f"duplicate document id (in {seen[docid]} and {folder})"
                        )
                    seen[docid] = Path(folder)


def gather_index(
    corpus: str | Path, serialization: str, settings: Mapping[str, Any], parts: Sequence[str | Path], out: str | Path,
    codec: str | Path | None = None,
) -> None:  # fmt: skip
    """Build the index at `out` from the parts (checked first); settings.json as `cqabench index`."""
    started = time.perf_counter()
    module = _module(settings)
    extra = _codec_arg(module, codec)
    resolved = retrievers.resolve(settings)
    records = check_parts(corpus, serialization, resolved, parts)
    with atomic_dir(out) as tmp:
        module.gather(list(zip((Path(p) for p in parts), records)), tmp, resolved, **extra)
        write_settings(tmp, resolved)
    log.info("gathered %d parts into %s in %.1f s", len(parts), out, time.perf_counter() - started)


def link_or_copy(src: Path, dst: Path) -> None:
    """A hard link (no second copy of tens of GB of vectors), or a copy across filesystems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
