"""The resumable item cache: every completion is stored once, the moment it exists.

One folder per model (cache/llm/{llm}/ by default, shared by every config) outside every
rule's declared outputs and every results tree, because Snakemake deletes the outputs of a
failed job and a killed job's finished items must survive (and `make clean` keeps it). It
must stay correct when many jobs on many nodes share it over NFS, so it uses only the two
operations NFS makes atomic across clients — creating a hard link (fails if the name exists)
and renaming — and never a byte-range lock or a shared-memory index (why SQLite's WAL mode
was dropped: SQLite documents it as unsafe on a network filesystem):

    items/ab/<key>.json    one completion and the sha256 of its content, fsynced under a
                           temporary name, then published with link(): the first publisher wins,
                           a file is complete or absent, and nothing rewrites it afterwards (only
                           `cqabench cache drop` removes it, or a reader that finds it edited)
    claims/ab/<key>        "this job is generating the item": a hard link to the job's file,
                           created with link() (exclusive), taken in bulk per chunk
    jobs/<job>.json        host, pid, process start time; its mtime is the job's heartbeat, and
                           since every claim is a link to it, the claim's mtime is too

A job generates only items it has claimed and waits for items another live job claimed. A
claim is stale when its job is gone — the job file was removed or the pid is dead (same host)
— or when its heartbeat is older than the lease (any host: a stopped process is alive but does
not beat; the age is measured against our own heartbeat's mtime, i.e. the file server's clock,
so host clocks need not agree). A stale claim is taken over by renaming it away and checking
its inode, so two waiters never both take it.

Reading needs no write: a cache that cannot be written (read-only mount, no permission, full
disk) opens read-only, serves every cached item, and names the path and the fix only when the
job has something to store (claim or publish).

The key is a hash of everything that decides the output: model identity (file hash or
revision), backend, dtype, sampling parameters and the full prompt; see `item_key`. Empty,
failed and oversized completions are refused: they are never stored (see `completion_problem`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cqabench.common.errors import CqaError
from cqabench.generation.llm.base import Chat, Completion, Sampling

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
FORMAT = "cqabench-item-cache/2"
DEFAULT_LEASE_S = 600.0
_KEY = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES})
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
EDITED = "content does not match its sha256 (edited or damaged after it was written)"
UNVERIFIABLE = "unverifiable (written before checksums)"


class CacheError(CqaError):
    """The item cache folder is unusable or holds a bad file; says which and how to recover."""


def recovery_hint(root: Path, max_chars: int | None = None) -> str:
    cap = f" --max-chars {max_chars}" if max_chars is not None else ""
    return (
        f"check it with `cqabench cache verify --cache {root}{cap}` and remove bad items with "
        f"`cqabench cache drop --cache {root} --bad{cap}` (they are generated again on the next run)"
    )


def item_key(model: Mapping[str, Any], backend: str, dtype: str, sampling: Sampling, chat: Chat) -> str:
    """sha256 over a canonical JSON of all inputs that change what the model writes.

    batch_size is deliberately absent: under greedy decoding it does not change the answer
    (tests/generation/test_hf_backend.py checks that), and keeping it out lets a resumed job, which
    batches the remaining items differently, reuse the finished ones.
    """
    payload = {
        "v": SCHEMA_VERSION,
        "model": dict(model),
        "backend": backend,
        "dtype": dtype,
        "sampling": sampling.to_dict(),
        "chat": chat,
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def content_sha256(body: Mapping[str, Any]) -> str:
    """sha256 of an item's canonical JSON without its own "sha256" field: what `cache verify` checks."""
    rest = {k: v for k, v in body.items() if k != "sha256"}
    blob = json.dumps(rest, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def completion_problem(comp: Completion, max_chars: int | None = None) -> str:
    """Why a completion must not be stored ("" if it may): a cached answer is final for good."""
    if comp.error:
        return comp.error
    if not comp.text.strip():
        return "empty completion"
    if max_chars is not None and len(comp.text) > max_chars:
        return f"completion of {len(comp.text)} characters exceeds max_completion_chars={max_chars}"
    return ""


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks (/proc), so a reused pid is not mistaken for it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]


def _pid_alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return True  # no /proc: the signal test is all we have
    if fields[0] in ("Z", "X"):  # killed, not yet reaped by its parent
        return False
    return not start or fields[19] == start


@dataclass(frozen=True)
class Record:
    """One stored item as `iter_records` reads it: its file, and what is wrong with it, if anything."""

    path: Path
    key: str
    label: str
    completion: Completion | None
    problem: str
    note: str = ""  # not a problem, but not verified either: UNVERIFIABLE for items without a checksum
    ident: tuple[int, int] | None = None  # (inode, device) of the file read, to move exactly it aside


class ItemCache:
    """Key → Completion in a folder that many processes and hosts may share (module docstring).

    Open one per job; `close` (or the context manager) releases this job's claims. A folder
    that cannot be written opens read-only (`writable` is False): lookups work, and the first
    claim or publication raises the CacheError saying which path and what to do.
    """

    def __init__(self, path: str | Path, lease_s: float = DEFAULT_LEASE_S, max_chars: int | None = None) -> None:
        self.root = Path(path)
        self.path = self.root
        self.lease_s = float(lease_s)
        self.max_chars = max_chars
        if self.root.exists() and not self.root.is_dir():
            raise CacheError(
                f"{self.root}: is a file, not an item cache folder (an SQLite cache of an earlier version?); "
                f"import it with `cqabench cache import --from {self.root} --cache <folder>` or remove it"
            )
        marker = self.root / "FORMAT"
        if marker.exists() and marker.read_text().strip() != FORMAT:
            raise CacheError(f"{marker}: cache format {marker.read_text().strip()!r}, expected {FORMAT!r}")
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.job = f"{self.host}-{self.pid}-{uuid.uuid4().hex[:8]}"
        self._job_file = self.root / "jobs" / f"{self.job}.json"
        self._claimed: set[str] = set()
        self._stop = threading.Event()
        self._read_only: CacheError | None = None
        try:
            self._prepare(marker)
        except CacheError as exc:  # read-only, full or no hard links: reads still work
            self._read_only = exc
            log.info("item cache %s opened read-only: %s", self.root, exc)
            return
        self._beat = threading.Thread(target=self._heartbeat, name="item-cache-heartbeat", daemon=True)
        self._beat.start()

    @property
    def writable(self) -> bool:
        return self._read_only is None

    def _prepare(self, marker: Path) -> None:
        """The folders, the FORMAT marker and this job's file: the writes every writing job needs."""
        for sub in ("items", "claims", "jobs"):
            with self._writing(self.root / sub):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
        if not marker.exists():
            self._publish_bytes(marker, (FORMAT + "\n").encode())
        info = {
            "job": self.job,
            "host": self.host,
            "pid": self.pid,
            "start": _start_time(self.pid),
            "since": time.time(),
        }
        self._publish_bytes(self._job_file, json.dumps(info).encode())

    def _require_writable(self, what: str) -> None:
        if self._read_only is not None:
            raise CacheError(f"{self._read_only} ({what})")

    # ---- files ----

    def _write_error(self, exc: OSError, path: Path) -> CacheError | None:
        """The one-line error for a write the filesystem refused (read-only, no permission, full), else None."""
        why = f"{os.strerror(exc.errno)}" if exc.errno else str(exc)
        if exc.errno in _FULL:
            return CacheError(
                f"{path}: no space left for the item cache {self.root} ({why}): free space there (or "
                f"raise the quota) and rerun, or set generation.cache_dir (`--cache`) to a folder with "
                f"room; the items published so far are kept"
            )
        if exc.errno in _NOT_WRITABLE:
            return CacheError(
                f"{path}: cannot write to the item cache {self.root} ({why}): make it writable, or set "
                f"generation.cache_dir (`--cache`) to a writable folder; a cell whose items are all "
                f"cached runs from a read-only cache"
            )
        return None

    @contextmanager
    def _writing(self, path: Path) -> Iterator[None]:
        """Turn a refused write on `path` into the CacheError that says what to do."""
        try:
            yield
        except OSError as exc:
            err = self._write_error(exc, path)
            if err is None:
                raise
            raise err from None

    def _shard(self, kind: str, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"item cache key {key!r} is not [A-Za-z0-9_-]{{1,128}}")
        return self.root / kind / key[:2]

    def item_path(self, key: str) -> Path:
        return self._shard("items", key) / f"{key}.json"

    def _claim_path(self, key: str) -> Path:
        return self._shard("claims", key) / key

    def _publish_bytes(self, path: Path, data: bytes) -> bool:
        """Write `data` under a temporary name, fsync, hard-link it to `path`; False if `path` existed."""
        with self._writing(path.parent):
            path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            with self._writing(tmp):
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                try:
                    view = memoryview(data)
                    while view:  # a full disk can write short: never publish a torn item
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
            try:
                with self._writing(path):
                    os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise CacheError(
                        f"{self.root}: the filesystem does not support hard links, which the item cache "
                        f"needs to publish items atomically; set generation.cache_dir elsewhere"
                    ) from None
                raise
        finally:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass  # never created (read-only), or the filesystem went away: nothing to clean

    def _heartbeat(self) -> None:
        every = max(0.5, self.lease_s / 10)
        while not self._stop.wait(every):
            try:
                os.utime(self._job_file)
            except OSError:  # the folder was removed under us; claims then read as stale
                pass

    def _read_item(self, path: Path, key: str) -> Record:
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                raw = fh.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            return Record(path, key, "", None, f"unreadable ({exc.strerror})")
        ident = (st.st_ino, st.st_dev)
        try:
            obj = json.loads(raw.decode("utf-8"))
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            comp = Completion.from_dict(obj["completion"])
            label = str(obj.get("label", ""))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            return Record(
                path, key, "", None, f"not a valid item file ({type(exc).__name__}: {str(exc)[:80]})", ident=ident
            )
        if "sha256" in obj and obj["sha256"] != content_sha256(obj):
            return Record(path, key, label, comp, EDITED, ident=ident)
        note = "" if "sha256" in obj else UNVERIFIABLE
        if obj.get("key") != key:
            return Record(
                path, key, label, comp, f"holds key {obj.get('key')!r}, not the one its name says", note, ident
            )
        return Record(path, key, label, comp, completion_problem(comp, self.max_chars), note, ident)

    def _set_aside(self, rec: Record) -> None:
        """Move an edited item out of the way so it is generated again; what moved must be what was read."""
        aside = rec.path.with_name(f".{rec.path.name}.{self.job}.edited")
        try:
            os.rename(rec.path, aside)
        except FileNotFoundError:
            return  # another job set it aside first
        except OSError as exc:
            log.warning("item cache: cannot move the edited item %s aside (%s)", rec.path, exc.strerror)
            return
        moved = aside.stat()
        if (moved.st_ino, moved.st_dev) != rec.ident:  # a fresh item published meanwhile: put it back
            try:
                os.link(aside, rec.path)
            except FileExistsError:
                pass
            aside.unlink(missing_ok=True)

    # ---- lookups and publication ----

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        """Stored completions of `keys`; a bad stored file stops the job, naming it and the fix.

        An item whose content does not match its checksum is never used: it is moved aside
        (`.<key>.json.<job>.edited`, removed by `cache drop --stale`) with a warning naming the
        file, and counts as missing, so the job asks the model again.
        """
        found: dict[str, Completion] = {}
        for key in dict.fromkeys(keys):
            path = self.item_path(key)
            try:
                rec = self._read_item(path, key)
            except FileNotFoundError:
                continue
            if rec.problem == EDITED:
                log.warning("item cache: %s %s; not used, asked again", path, EDITED)
                self._set_aside(rec)
                continue
            if rec.problem or rec.completion is None:
                cap = self.max_chars if "max_completion_chars" in rec.problem else None
                raise CacheError(f"{path}: bad cached item ({rec.problem}); {recovery_hint(self.root, cap)}")
            found[key] = rec.completion
        return found

    def put_many(self, items: Iterable[tuple[str, Completion, str]]) -> dict[str, Completion]:
        """Publish (key, completion, label) items; returns the stored completion of each key.

        An item already present keeps its first completion (another job's, in a race): the
        returned value is then that one, so every cell uses what the cache holds. The job's
        claims on these keys are released. Empty, failed or oversized completions are refused.
        """
        items = list(items)
        if items:
            self._require_writable(f"{len(items)} new item(s) cannot be stored")
        stored: dict[str, Completion] = {}
        for key, comp, label in items:
            problem = completion_problem(comp, self.max_chars)
            if problem:
                raise ValueError(f"refusing to cache item {key} ({label}): {problem}")
            if key in stored:
                continue
            stored[key] = self._publish_item(key, comp, label)
        self.release_many(stored)
        return stored

    def _publish_item(self, key: str, comp: Completion, label: str) -> Completion:
        """Publish one item (with its checksum); the completion the cache holds for `key` afterwards."""
        body = {"key": key, "label": label, "completion": comp.to_dict(), "created": time.time(), "job": self.job}
        body["sha256"] = content_sha256(body)
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        path = self.item_path(key)
        for _ in range(2):  # a second try only if the item there was edited and get_many set it aside
            if self._publish_bytes(path, data):
                return comp
            got = self.get_many([key])
            if key in got:
                return got[key]
        raise CacheError(f"{path}: an edited item keeps reappearing under this name; {recovery_hint(self.root)}")

    # ---- claims ----

    def claim_many(self, keys: Sequence[str], limit: int) -> list[str]:
        """Claim up to `limit` of `keys` (in order) for this job; stale claims are taken over.

        Keys this job already holds count as claimed. Keys claimed by a live job are skipped:
        the caller waits for their completion (`get_many`) and asks again later.
        """
        if keys:
            self._require_writable(f"{len(dict.fromkeys(keys))} item(s) are not cached and must be generated")
        mine: list[str] = []
        live: set[tuple[int, int]] = set()  # inodes of job files found live in this call: one check per job
        for key in dict.fromkeys(keys):
            if len(mine) >= limit:
                break
            if key in self._claimed or self._try_claim(key, live):
                mine.append(key)
        return mine

    def _try_claim(self, key: str, live: set[tuple[int, int]]) -> bool:
        path = self._claim_path(key)
        with self._writing(path.parent):
            path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                with self._writing(path):
                    os.link(self._job_file, path)
                self._claimed.add(key)
                return True
            except FileExistsError:
                pass
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # released meanwhile: try again
            if (st.st_ino, st.st_dev) in live:  # every claim of a job is a link to its one job file
                return False
            owner = self._stale_owner(path)
            if owner is None:
                live.add((st.st_ino, st.st_dev))
                return False
            if not self._take_over(path, owner):
                return False
        return False

    def _now(self) -> float:
        """The file server's clock: the mtime of our own job file, just touched (host clocks may differ)."""
        try:
            os.utime(self._job_file)
            return self._job_file.stat().st_mtime
        except OSError:
            return time.time()

    def _job_gone(self, info: Mapping[str, Any], mtime: float, now: float) -> bool:
        """A job is gone when its pid is dead (same host) or its heartbeat is older than the lease (any host).

        The lease holds on this host too: a stopped (SIGSTOP, `scontrol suspend`) process is
        alive but does not beat, and must not make other jobs wait without limit.
        """
        if info.get("host") == self.host and not _pid_alive(int(info.get("pid", -1)), str(info.get("start", ""))):
            return True
        return now - mtime > self.lease_s

    def _stale_owner(self, path: Path, now: float | None = None) -> os.stat_result | None:
        """The claim's stat if its job is gone (see the module docstring), else None (live or vanished)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        try:
            info = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            info = {}  # unreadable: its job file cannot be found below, so it counts as stale
        job_file = self.root / "jobs" / f"{info.get('job', '?')}.json"
        if not job_file.exists():
            return st  # the job ended (or the claim is unreadable): nobody will finish it
        return st if self._job_gone(info, st.st_mtime, self._now() if now is None else now) else None

    def _take_over(self, path: Path, stale: os.stat_result) -> bool:
        """Move the stale claim away; if what moved is not the stale one, put it back."""
        tomb = path.with_name(f".{path.name}.{self.job}.stale")
        try:
            with self._writing(path):
                os.rename(path, tomb)
        except FileNotFoundError:
            return True  # someone else removed it: try to claim again
        try:
            moved = tomb.stat()
        except FileNotFoundError:  # swept by `cqabench cache drop --stale` meanwhile
            return True
        if (moved.st_ino, moved.st_dev) != (stale.st_ino, stale.st_dev):  # a fresh claim of a live job
            try:
                os.link(tomb, path)
            except FileExistsError:
                pass
            tomb.unlink(missing_ok=True)
            return False
        tomb.unlink(missing_ok=True)
        log.warning("item cache %s: took over the stale claim %s", self.root, path.name)
        return True

    def release_many(self, keys: Iterable[str]) -> None:
        """Drop this job's claims on `keys` (published, or given up so another job may try)."""
        for key in keys:
            if key in self._claimed:
                self._claimed.discard(key)
                try:
                    if os.path.samefile(self._claim_path(key), self._job_file):  # not if taken over
                        with self._writing(self._claim_path(key)):
                            self._claim_path(key).unlink()
                except FileNotFoundError:
                    pass

    def claim_holders(self, keys: Sequence[str]) -> list[str]:
        """Jobs (host-pid-…) holding claims on `keys`, for the log line of a waiting job."""
        holders = []
        for key in keys:
            try:
                holders.append(json.loads(self._claim_path(key).read_text()).get("job", "?"))
            except (OSError, ValueError):
                continue
        return sorted(set(holders))

    # ---- whole-cache views (cqabench cache verify | drop) ----

    def iter_records(self) -> Iterator[Record]:
        for path in sorted((self.root / "items").glob("*/*.json")):
            try:
                yield self._read_item(path, path.stem)
            except FileNotFoundError:
                continue

    def leftovers(self) -> list[Path]:
        """Temporary files, edited items set aside, stale claims and job files of jobs that are gone."""
        out: list[Path] = []
        now = self._now()
        for path in sorted((self.root / "claims").glob("*/*")):
            if path.name.startswith(".") or self._stale_owner(path, now) is not None:  # a takeover's leftover, or stale
                out.append(path)
        for path in sorted((self.root / "items").glob("*/.*.tmp")):
            if time.time() - path.stat().st_mtime > 60:
                out.append(path)
        out += sorted((self.root / "items").glob("*/.*.edited"))
        for path in sorted((self.root / "jobs").glob("*.json")):
            if path == self._job_file:
                continue
            try:
                gone = self._job_gone(json.loads(path.read_text()), path.stat().st_mtime, now)
            except (OSError, ValueError, KeyError, TypeError):
                gone = True
            if gone:
                out.append(path)
        return out

    def __len__(self) -> int:
        return sum(1 for _ in (self.root / "items").glob("*/*.json"))

    def close(self) -> None:
        """Release this job's claims and remove its job file; a read-only cache has neither."""
        self._stop.set()
        if self._read_only is not None:
            return
        try:
            self.release_many(list(self._claimed))
            self._job_file.unlink(missing_ok=True)
        except (OSError, CacheError) as exc:  # must not hide the error that ended the job; the lease frees them
            log.warning(
                "item cache %s: could not release this job's claims (%s); they expire after the lease", self.root, exc
            )

    def __enter__(self) -> ItemCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_sqlite(source: Path) -> list[tuple[Any, Any, Any]]:
    """An old SQLite cache's (key, completion, label) rows, every key checked before one is written."""
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        rows = db.execute("SELECT key, completion, label FROM items").fetchall()
        db.close()
    except sqlite3.Error as exc:
        raise CacheError(f"{source}: not a readable SQLite item cache ({exc}); nothing was imported") from None
    for number, (key, _, _) in enumerate(rows, start=1):
        if not isinstance(key, str) or not _KEY.match(key):
            raise CacheError(
                f"{source}: row {number}, field 'key': {key!r} is not an item cache key "
                "([A-Za-z0-9_-], 1 to 128 characters); nothing was imported"
            )
    return rows


def import_rows(rows: Iterable[tuple[Any, Any, Any]], cache: ItemCache) -> tuple[int, int]:
    """(imported, skipped) of `read_sqlite`'s rows; empty completions (issue 11, cause 4) are asked again."""
    imported = skipped = 0
    for key, blob, label in rows:
        try:
            comp = Completion.from_dict(json.loads(blob))
        except (ValueError, KeyError, TypeError):
            skipped += 1
            continue
        if completion_problem(comp, cache.max_chars):
            skipped += 1
            continue
        cache.put_many([(key, comp, label)])
        imported += 1
    return imported, skipped
