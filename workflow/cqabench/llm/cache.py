"""The resumable item cache: every completion is stored the moment it exists.

One SQLite file per model (results/cache/llm/{llm}.sqlite by default) outside every rule's
declared outputs, because Snakemake deletes the outputs of a failed job and a killed job's
finished items must survive. Each batch is one transaction with synchronous=FULL, so a
SIGKILL loses at most the batch being generated. SQLite (WAL mode, busy timeout) also
lets parallel jobs of the same model share the file, so an identical prompt — e.g. the
same closed-book question under two table serializations — is generated once.

The key is a hash of everything that decides the output: model identity (file hash or
revision), backend, dtype, sampling parameters and the full prompt; see `item_key`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cqabench.llm.base import Chat, Completion, Sampling

SCHEMA_VERSION = 1


def item_key(model: Mapping[str, Any], backend: str, dtype: str, sampling: Sampling, chat: Chat) -> str:
    """sha256 over a canonical JSON of all inputs that change what the model writes.

    batch_size is deliberately absent: under greedy decoding it does not change the answer
    (tests/test_hf_backend.py checks that), and keeping it out lets a resumed job, which
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


class ItemCache:
    """Key → Completion, durable per `put_many` call."""

    def __init__(self, path: str | Path, timeout_s: float = 120.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
        self._retry_busy(lambda: self._db.execute("PRAGMA journal_mode=WAL"), timeout_s)
        self._db.execute("PRAGMA synchronous=FULL")
        self._retry_busy(
            lambda: self._db.execute(
                "CREATE TABLE IF NOT EXISTS items ("
                " key TEXT PRIMARY KEY,"
                " completion TEXT NOT NULL,"
                " created REAL NOT NULL,"
                " label TEXT NOT NULL DEFAULT '')"
            ),
            timeout_s,
        )

    def _retry_busy(self, step: Any, timeout_s: float) -> None:
        """Run a schema step, retrying while another process holds the file.

        SQLite answers SQLITE_BUSY at once, without its busy handler, when two connections
        switch a fresh file to WAL at the same moment; the busy timeout does not cover it.
        """
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while True:
            try:
                step()
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        found: dict[str, Completion] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):  # SQLite's bound-parameter limit
            chunk = unique[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for key, blob in self._db.execute(f"SELECT key, completion FROM items WHERE key IN ({marks})", chunk):
                found[key] = Completion.from_dict(json.loads(blob))
        return found

    def put_many(self, items: Iterable[tuple[str, Completion, str]]) -> int:
        """Store (key, completion, label) rows in one durable transaction; returns rows written.

        A key already present keeps its first completion (INSERT OR IGNORE): two jobs racing
        on the same prompt cannot make a cell's answer flip between reruns.
        """
        rows = [(k, json.dumps(c.to_dict(), ensure_ascii=False), time.time(), label) for k, c, label in items]
        if not rows:
            return 0
        self._db.execute("BEGIN IMMEDIATE")
        try:
            before = self._db.total_changes
            self._db.executemany("INSERT OR IGNORE INTO items (key, completion, created, label) VALUES (?, ?, ?, ?)", rows)
            written = self._db.total_changes - before
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return written

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ItemCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
