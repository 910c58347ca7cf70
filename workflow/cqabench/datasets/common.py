"""Reading raw files so that every malformed record is reported by file, record and field."""

from __future__ import annotations

import hashlib
import json
import math
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cqabench.errors import DataError


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
        bad = data[exc.start: exc.end].hex(" ")
        raise DataError(path, f"line {line}", "-",
                        f"not UTF-8 text (bytes {bad} at offset {exc.start}; re-save the file as UTF-8)") from None


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
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, f"line {exc.lineno}", "-", f"not valid JSON ({exc.msg}, char {exc.pos})") from None


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
    digest = hashlib.sha1(f"{title}\t{text}".encode("utf-8")).hexdigest()
    return f"wiki-{digest[:16]}"


def limited(items: list, limit: int | None) -> list:
    """Apply an explicit question limit from config (None: all)."""
    return items if limit is None else items[:limit]


def ordered_unique(values: list[str]) -> list[str]:
    """Drop repeats, keep first occurrences in order: the first alias stays the reference answer."""
    return list(dict.fromkeys(values))
