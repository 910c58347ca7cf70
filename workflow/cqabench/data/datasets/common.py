"""Reading raw files so that every malformed record is reported by file, record and field."""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import re
import shutil
import stat
import tempfile
import weakref
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cqabench.common.errors import DataError
from cqabench.data.schema import Answer, CanonicalData, Document, Qrel, Query


def os_error(path: Path, exc: OSError) -> DataError:
    """An unreadable path as a DataError naming it (not found, a folder, no permission)."""
    if isinstance(exc, FileNotFoundError):
        problem = "file not found"
    elif isinstance(exc, IsADirectoryError):
        problem = "is a directory, not a file"
    elif isinstance(exc, PermissionError):
        problem = "permission denied"
    else:
        problem = f"cannot be read ({exc.strerror or exc})"
    return DataError(path, None, "-", problem)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def refuse_lone_surrogates(
    text: str, value: Any, path: Path, where: tuple = (), span: tuple[int, int] | None = None
) -> None:
    """A DataError naming the first string of `value` holding a lone UTF-16 surrogate.

    Why: JSON may spell one half of a surrogate pair alone (`"\\ud800"`); json.loads accepts it,
    and the string then cannot be written as UTF-8 (Parquet, TREC, JSON out), a traceback far from
    the record. Only text with a surrogate escape in `span` is walked (a paired escape, an emoji, is
    valid), so clean files cost one regex scan. The error's record is the first step of the path
    (`where` + the path inside `value`), its field the rest.
    """
    start, end = span if span is not None else (0, len(text))
    if not _SURROGATE_ESCAPE.search(text, start, end):
        return
    stack: list[tuple[tuple, Any]] = [(where, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                record = at[0] if at else None
                field = ".".join(str(step) for step in at[1:]).encode("utf-8", "backslashreplace").decode() or "-"
                raise DataError(
                    path,
                    record,
                    field,
                    f"holds a lone UTF-16 surrogate (\\u{ord(item[exc.start]):04x}), "
                    "which is no character and cannot be written as UTF-8; fix the escape",
                ) from None
        elif isinstance(item, dict):
            for key, member in reversed(item.items()):
                stack.extend([((*at, key), member), ((*at, key), key)])
        elif isinstance(item, list):
            stack.extend(((*at, i), member) for i, member in reversed(list(enumerate(item))))


def check_raw_file(path: Path, role: str) -> None:
    """A configured raw file must be a readable, non-empty regular file.

    Checked before any loader runs so that a folder, a missing file or a zero-byte download
    (a transfer cut short) is reported by its role and path, not as an empty dataset.
    """
    try:
        st = path.stat()
    except OSError as exc:
        raise DataError(path, None, "-", f"raw file of role {role!r}: {os_error(path, exc).problem}") from None
    if stat.S_ISDIR(st.st_mode):
        raise DataError(path, None, "-", f"raw file of role {role!r} is a directory, not a file")
    if st.st_size == 0:
        raise DataError(path, None, "-", f"raw file of role {role!r} is empty (0 bytes)")


def decode_utf8(data: bytes, path: Path, line_offset: int = 0) -> str:
    """`data` as UTF-8 (a leading BOM allowed); bad bytes name their line and offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = line_offset + data[: exc.start].count(b"\n") + 1
        bad = data[exc.start : exc.end].hex(" ")
        raise DataError(
            path, f"line {line}", "-", f"not UTF-8 text (bytes {bad} at offset {exc.start}; re-save the file as UTF-8)"
        ) from None


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise os_error(path, exc) from None


def read_json(path: Path) -> Any:
    path = Path(path)
    text = decode_utf8(read_bytes(path), path)
    if not text.strip():
        raise DataError(path, None, "-", "empty file: no JSON in it")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"line {exc.lineno}", "-", f"not valid JSON ({exc.msg}, char {exc.pos})") from None
    refuse_lone_surrogates(text, data, path)
    return data


def read_json_list(path: Path, what: str = "questions") -> list[Any]:
    """A raw file that must hold a JSON list (of questions, records, passages)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, "-", f"expected a JSON list of {what}, got {type(data).__name__}")
    return data


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file, decoded line by line so that bad bytes name their line."""
    path = Path(path)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise os_error(path, exc) from None
    with fh:
        try:
            for lineno, raw in enumerate(fh, start=1):
                yield lineno, decode_utf8(raw, path, lineno - 1)
        except IsADirectoryError as exc:  # open() of a folder succeeds on some systems; reading fails
            raise os_error(path, exc) from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-empty line."""
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(path, f"line {lineno}", "-", f"not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise DataError(path, f"line {lineno}", "-", f"expected a JSON object, got {type(obj).__name__}")
        refuse_lone_surrogates(line, obj, path, (f"line {lineno}",))
        yield lineno, obj


def field(record: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path, rec: object) -> Any:
    """record[key], checked for presence and type; `rec` names the record in the error."""
    if not isinstance(record, dict):
        raise DataError(path, rec, key, f"record is a {type(record).__name__}, expected an object")
    if key not in record:
        raise DataError(path, rec, key, "missing")
    value = record[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataError(path, rec, key, f"expected {names}, got {type(value).__name__}")
    return value


def finite(value: float, path: Path, rec: object, key: str) -> float:
    """A gold number must be a real number: JSON's NaN / Infinity (which Python's parser accepts)
    or a "nan" string would make every prediction wrong, or right, without a word."""
    if not math.isfinite(value):
        raise DataError(path, rec, key, f"not a finite number ({value!r})")
    return value


def text_docid(title: str, text: str) -> str:
    """A content id: the same paragraph gets the same id in every dataset and file order."""
    digest = hashlib.sha1(f"{title}\t{text}".encode()).hexdigest()
    return f"wiki-{digest[:16]}"


def limited(items: list, limit: int | None) -> list:
    """Apply an explicit question limit from config (None: all)."""
    return items if limit is None else items[:limit]


def ordered_unique(values: list[str]) -> list[str]:
    """Drop repeats, keep first occurrences in order: the first alias stays the reference answer."""
    return list(dict.fromkeys(values))


# --- streaming: raw files of any size in bounded memory -----------------------------------------

Record = Query | Document | Qrel | Answer

# A member of a streamed JSON object larger than this is taken to be malformed (an unterminated
# string, say) rather than waited for: the reader never holds more than about this much text.
MAX_MEMBER_CHARS = 16 * 1024 * 1024
_READ_CHARS = 1 << 20
_WS = " \t\n\r"
_NUMBER_CHARS = frozenset("0123456789+-.eE")


def collect(records: Iterable[Record]) -> CanonicalData:
    """The records a loader yields, gathered into one `CanonicalData` (each table in yield order).

    For tests and small callers; `prepare` writes the documents as they come instead."""
    data = CanonicalData()
    lists: dict[type, list] = {Query: data.queries, Document: data.corpus, Qrel: data.qrels, Answer: data.answers}
    for rec in records:
        lists[type(rec)].append(rec)
    return data


def _json_type(first: str) -> str:
    return {"[": "list", '"': "str", "t": "bool", "f": "bool", "n": "null"}.get(first, "number")


class _Malformed(Exception):
    """Raised inside iter_json_object: invalid JSON at `pos` (or text not read yet)."""

    def __init__(self, pos: int, msg: str) -> None:
        super().__init__(msg)
        self.pos, self.msg = pos, msg


def iter_json_object(path: Path, what: str) -> Iterator[tuple[int, str, Any]]:
    """(line, key, value) of every member of a file holding one JSON object, read incrementally.

    Why: StrategyQA's paragraph file and OTT-QA's passage and table files (6.5M documents) are
    single objects `{"id": {...}, ...}` that `json.load` would hold whole, several times their
    size in Python objects. Here one member is parsed at a time (Python's C scanner, on a sliding
    window of text), so memory stays at about one read chunk plus one member. Errors are the same
    DataErrors as read_json's, naming the line: bad UTF-8, invalid JSON (with the member it
    follows), a top level that is not an object (`what` says what it should hold). A repeated
    key (json.load would silently keep the last value) is an error too; it is found from 8-byte
    digests after the last member, then named by a second pass.
    """
    path = Path(path)
    seen = IdDigests()
    for line, key, value in _json_members(path, what):
        seen.add(key)
        yield line, key, value
    candidates = seen.repeated()
    if candidates:
        first_line: dict[str, int] = {}
        for line, key, _ in _json_members(path, what):
            if IdDigests.digest(key) in candidates:
                if key in first_line:
                    raise DataError(
                        path,
                        key,
                        "-",
                        f"member name repeated (lines {first_line[key]} and {line}); "
                        f"each of the {what} needs its own id",
                    )
                first_line[key] = line


def _json_members(path: Path, what: str) -> Iterator[tuple[int, str, Any]]:
    decoder = json.JSONDecoder()
    reader = codecs.getincrementaldecoder("utf-8-sig")()
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed by the with below; open's error is named first)
    except OSError as exc:
        raise os_error(path, exc) from None
    with fh:
        buf, pos, start, eof = "", 0, 0, False
        line_base, counted = 1, 0  # line number at buf[counted]
        read_lines = 0  # newlines in the bytes decoded so far (for a decoding error's line)

        def line_at(i: int) -> int:
            nonlocal line_base, counted
            line_base += buf.count("\n", counted, i)
            counted = i
            return line_base

        def more() -> bool:
            """Append the next chunk to buf (dropping what precedes the current member); False at the end."""
            nonlocal buf, pos, start, eof, counted, read_lines
            if eof:
                return False
            if start > _READ_CHARS:
                line_at(start)
                buf, pos, counted, start = buf[start:], pos - start, 0, 0
            try:
                raw = fh.read(_READ_CHARS)
            except IsADirectoryError as exc:
                raise os_error(path, exc) from None
            try:
                chunk = reader.decode(raw, final=not raw)
            except UnicodeDecodeError as exc:
                line = read_lines + raw[: max(exc.start, 0)].count(b"\n") + 1
                raise DataError(
                    path,
                    f"line {line}",
                    "-",
                    f"not UTF-8 text (bytes {exc.object[exc.start : exc.end].hex(' ')}; re-save the file as UTF-8)",
                ) from None
            read_lines += raw.count(b"\n")
            buf += chunk
            eof = not raw
            return True

        def skip_ws() -> None:
            """Advance pos past whitespace, reading on; _Malformed if the file ends first."""
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in _WS:
                    pos += 1
                if pos < len(buf):
                    return
                if not more():
                    raise _Malformed(len(buf), "the file ends inside the object")

        while pos >= len(buf) or buf[pos] in _WS:
            if pos >= len(buf) and not more():
                raise DataError(path, None, "-", "empty file: no JSON in it")
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
        if buf[pos] != "{":
            raise DataError(path, None, "-", f"expected a JSON object of {what}, got {_json_type(buf[pos])}")
        pos += 1
        last: str | None = None
        while True:
            start = pos
            try:
                skip_ws()
                if buf[pos] == "}":
                    pos += 1
                    break
                if last is not None:
                    if buf[pos] != ",":
                        raise _Malformed(pos, "expected ',' or '}' between members")
                    pos += 1
                    skip_ws()
                key_off = pos - start  # `start` moves when more() drops consumed text; the offset does not
                if buf[pos] != '"':
                    raise _Malformed(pos, "expected a member name in double quotes")
                # scanstring is json.decoder's string scanner; typeshed's stub leaves it out
                key, pos = json.decoder.scanstring(buf, pos + 1)  # type: ignore[attr-defined]
                skip_ws()
                if buf[pos] != ":":
                    raise _Malformed(pos, "expected ':' after the member name")
                pos += 1
                skip_ws()
                value, pos = decoder.raw_decode(buf, pos)
                if not eof and isinstance(value, (int, float)) and not isinstance(value, bool):
                    # A number cut by the window ("12" of 12345, "-0" of "-0.25") counts only once
                    # a character that cannot continue it has been read.
                    end = pos
                    while end < len(buf) and buf[end] in _NUMBER_CHARS:
                        end += 1
                    if end >= len(buf):
                        raise _Malformed(pos, "the file ends inside the object")
            except (json.JSONDecodeError, _Malformed) as exc:
                # Not enough text yet, or really malformed: read on while the member could still be
                # complete; past MAX_MEMBER_CHARS (or at the end of the file) it is an error.
                if len(buf) - start < MAX_MEMBER_CHARS and more():
                    pos = start
                    continue
                where = f" (after member {last!r})" if last is not None else " (in the first member)"
                raise DataError(
                    path, f"line {line_at(min(exc.pos, len(buf)))}", "-", f"not valid JSON ({exc.msg}){where}"
                ) from None
            last = key
            refuse_lone_surrogates(buf, {key: value}, path, span=(start, pos))
            yield line_at(start + key_off), key, value
        while True:
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
            if pos < len(buf):
                raise DataError(path, f"line {line_at(pos)}", "-", "not valid JSON (text after the end of the object)")
            if not more():
                return


def _digest(value: str) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little")


class IdDigests:
    """Ids seen so far as 8-byte digests, not strings, in memory that does not grow with the stream.

    For checking ids are unique and present over a stream of any size. Up to `buffer` digests
    (8 MB) are held in memory; beyond that they are spilled to 256 bucket files by their top
    byte (8 bytes an id on disk, in a temporary folder removed with the object), and `repeated` /
    `missing` read one bucket at a time (36.6M ids: ~1.1 MB a bucket). A Python set of the ids
    would take about 100 bytes an id (2 GB at 21M passages), an in-memory digest array 8 (and 16
    while sorted). A digest collision (probability about n^2 / 2^65: 4e-5 at 36.6M ids) is
    resolved by the callers with the real strings (`repeated` only names candidates)."""

    BUCKETS = 256

    def __init__(self, buffer: int = 1 << 20) -> None:
        self._digests = array("Q")
        self._buffer = max(1, int(buffer))
        self._spill: Path | None = None
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, value: str) -> None:
        self._digests.append(_digest(value))
        self._count += 1
        if len(self._digests) >= self._buffer:
            self._flush()

    def _flush(self) -> None:
        if not len(self._digests):
            return
        if self._spill is None:
            self._spill = Path(tempfile.mkdtemp(prefix="cqabench-ids-"))
            weakref.finalize(self, shutil.rmtree, str(self._spill), True)
        arr = np.frombuffer(self._digests, dtype=np.uint64)
        top = (arr >> np.uint64(56)).astype(np.int64)
        order = np.argsort(top, kind="stable")
        arr, top = arr[order], top[order]
        bounds = np.searchsorted(top, np.arange(self.BUCKETS + 1))
        for bucket in range(self.BUCKETS):
            lo, hi = bounds[bucket], bounds[bucket + 1]
            if lo < hi:
                with open(self._spill / f"{bucket:03d}.u64", "ab") as fh:
                    fh.write(arr[lo:hi].tobytes())
        self._digests = array("Q")

    def _buckets(self) -> Iterator[tuple[int | None, np.ndarray]]:
        """(bucket, its digests sorted); one (None, all) when nothing was spilled."""
        if self._spill is None:
            arr = np.frombuffer(self._digests, dtype=np.uint64).copy() if len(self._digests) else np.zeros(0, np.uint64)
            arr.sort()
            yield None, arr
            return
        self._flush()
        for bucket in range(self.BUCKETS):
            path = self._spill / f"{bucket:03d}.u64"
            arr = np.fromfile(path, dtype=np.uint64) if path.is_file() else np.zeros(0, np.uint64)
            arr.sort()
            yield bucket, arr

    def repeated(self) -> set[int]:
        """Digests added more than once (candidates: check the real ids with `digest`)."""
        out: set[int] = set()
        for _, arr in self._buckets():
            out.update(arr[1:][arr[1:] == arr[:-1]].tolist())
        return out

    def missing(self, values: Iterable[str]) -> list[str]:
        """Those of `values` that were surely never added (order kept)."""
        values = list(values)
        wanted = np.array([_digest(v) for v in values], dtype=np.uint64)
        found = np.zeros(len(values), dtype=bool)
        top = (wanted >> np.uint64(56)).astype(np.int64)
        for bucket, arr in self._buckets():
            sel = np.ones(len(values), dtype=bool) if bucket is None else top == bucket
            if sel.any() and len(arr):
                found[sel] |= np.isin(wanted[sel], arr, assume_unique=False)
        return [v for v, ok in zip(values, found) if not ok]

    @staticmethod
    def digest(value: str) -> int:
        return _digest(value)


# --- relevance modes ------------------------------------------------------------------------------


def check_relevance(dataset: str, modes: dict[str, str], mode: str) -> str:
    """`mode` if it is one of the dataset's relevance modes (its loader's RELEVANCE), else a
    ConfigError naming the config key `datasets.<dataset>.relevance` and the valid modes.

    Why here: every loader takes the mode, and a typo must stop `prepare` (and planning) with the
    key to fix rather than fall back to some default judgment."""
    from cqabench.common.errors import ConfigError

    if mode not in modes:
        valid = "; ".join(f"{name} ({what})" for name, what in modes.items())
        raise ConfigError(f"datasets.{dataset}.relevance: unknown mode {mode!r}; valid: {valid}")
    return mode
