"""cqabench.planner.rule_text: how planned names and settings are written into the rules."""

from __future__ import annotations

import json
import re
import shlex

from cqabench.planner import NEVER, as_arg, names_pattern, one_of


def test_a_name_is_never_read_as_a_shorter_one() -> None:
    """Wildcard constraints try the longest name first, so `bm25-irq` is not matched as `bm25`."""
    assert one_of(["bm25", "bm25-irq"]) == "bm25\\-irq|bm25"
    assert re.match(one_of(["bm25", "bm25-irq"]), "bm25-irq").group() == "bm25-irq"


def test_no_names_match_nothing() -> None:
    assert names_pattern([]) == names_pattern({}) == NEVER
    assert not any(re.search(NEVER, text) for text in ("", "x", "bm25"))
    assert names_pattern({"minilm": {}, "bm25": {}}) == "minilm|bm25"


def test_settings_are_one_shell_word_of_json_with_sorted_keys() -> None:
    word = as_arg({"b": "it's", "a": [1, 2]})
    assert shlex.split(word) == ['{"a": [1, 2], "b": "it\'s"}']
    assert json.loads(shlex.split(word)[0]) == {"a": [1, 2], "b": "it's"}
