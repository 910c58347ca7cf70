"""Subcommands of `cqabench`, one module per workflow stage; each exposes `register(subparsers)`."""

from __future__ import annotations

import json
from typing import Any

from cqabench.common.errors import ConfigError


def json_object(text: str, flag: str) -> dict[str, Any]:
    """A command-line JSON object (settings, cells); a malformed one names its flag."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object, got {type(value).__name__}")
    return value
