"""Reading raw files so that every malformed record is reported by file, record and field."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cqabench.errors import DataError


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise DataError(path, None, "-", "file not found") from None
    except json.JSONDecodeError as exc:
        raise DataError(path, f"line {exc.lineno}", "-", f"not valid JSON ({exc.msg}, char {exc.pos})") from None


def read_json_list(path: Path, what: str = "questions") -> list[Any]:
    """A raw file that must hold a JSON list (of questions, records, passages)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DataError(path, None, "-", f"expected a JSON list of {what}, got {type(data).__name__}")
    return data


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-empty line."""
    try:
        fh = open(path, encoding="utf-8")
    except FileNotFoundError:
        raise DataError(path, None, "-", "file not found") from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
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
