"""Issue 36 item 6, raw JSON: a lone UTF-16 surrogate escape ("\\ud800") is accepted by
json.loads and then cannot be written as UTF-8 (Parquet, TREC): a traceback far from the record.
Now each JSON reader names the file, the record and the field; a surrogate pair (an emoji
written as two escapes) is one character and is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from cqabench.common.errors import DataError
from cqabench.data.datasets.common import iter_json_object, read_json, read_jsonl

LONE = r"\ud800"
PAIR = r"\ud83d\ude00"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="ascii")
    return path


def test_read_json_names_the_record_and_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "q.json", f'[{{"id": "a", "question": "ok {PAIR}"}}, {{"id": "b", "question": "x{LONE}y"}}]'
    )
    with pytest.raises(
        DataError, match=r"q\.json: record 1, field 'question': holds a lone UTF-16 surrogate \(\\ud800\)"
    ):
        read_json(path)


def test_read_jsonl_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "q.jsonl", f'{{"id": "a"}}\n{{"id": "b", "meta": {{"steps": ["s", "{LONE}"]}}}}\n')
    with pytest.raises(DataError, match=r"q\.jsonl: record 'line 2', field 'meta\.steps\.1': holds a lone UTF-16"):
        list(read_jsonl(path))


def test_iter_json_object_names_the_member(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.json", f'{{"p1": {{"text": "fine {PAIR}"}}, "p2": {{"title": "{LONE}"}}}}')
    with pytest.raises(DataError, match=r"p\.json: record 'p2', field 'title': holds a lone UTF-16"):
        list(iter_json_object(path, "paragraphs"))


def test_a_surrogate_pair_is_one_character(tmp_path: Path) -> None:
    path = _write(tmp_path, "ok.json", f'{{"p1": {{"text": "{PAIR}"}}}}')
    assert read_json(path) == {"p1": {"text": "\U0001f600"}}
    assert [v for _, _, v in iter_json_object(path, "paragraphs")] == [{"text": "\U0001f600"}]
