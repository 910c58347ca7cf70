"""Planned values as the rules write them: wildcard constraints from names, settings as shell words.

Rules take names as regular expressions (wildcard constraints) and planned settings as canonical
JSON in their params (their rerun triggers; the few small settings still passed on a command line
as one shell word); writing both in one place keeps every rule's text the same however a stage's
planning built the value.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

NEVER = "(?!x)x"  # a wildcard constraint no name matches (for an empty list of names)


def one_of(names: Sequence[str] | set[str]) -> str:
    """A regex alternation of `names`, longest first (so `bm25-irq` is not read as `bm25`)."""
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


def names_pattern(names: Sequence[str] | set[str] | Mapping[str, Any]) -> str:
    """`one_of`, or a pattern that matches nothing for an empty collection."""
    return one_of(list(names)) if names else NEVER


def as_json(obj: Any) -> str:
    """A JSON value as canonical text (keys sorted): what a rule's params compare, so a config's
    key order (a YAML dump's, say) reruns nothing."""
    return json.dumps(obj, sort_keys=True)


def as_arg(obj: Any) -> str:
    """A JSON value as one shell word, for passing settings to `cqabench`."""
    return shlex.quote(as_json(obj))
